"""End to end on the real data: the loss falls, retrieval beats chance, resume works."""

import contextlib
import io
import re
import shutil

from vmsst.base.gin_utils import gin
import jax
import numpy as np
import pytest

import vmsst.training.loop
import vmsst_testing

# Training runs and subprocesses: the slow tier (`make test-fast` skips them).
pytestmark = pytest.mark.slow


# The runs that check bookkeeping, not learning: one small configuration, so that the file's
# later runs load its compiled programs from the session's compilation cache.
SMALL = ["train.evaluator = None", "BATCH_SIZE = 8", "train.mixture_name = 'vmsst_multi30k'"]


@pytest.fixture(autouse=True)
def _clean_gin():
  yield
  gin.clear_config()


@pytest.mark.usefixtures("optimized_compiles")
def test_short_vmsst_run_learns_and_retrieves_far_above_chance(data_dir, tiny_vocab_path,
                                                               tmp_path):
  # Multi30k only (4 languages, short captions, most within 20 pieces) so that 300 CPU steps
  # suffice (200 leave retrieval barely over the bar). Only the end is checked: no
  # evaluation on the way.
  vmsst_testing.configure_small_run(data_dir, tiny_vocab_path, tmp_path / "vmsst", steps=300,
             extra=["train.mixture_name = 'vmsst_multi30k'", "SEQUENCE_LENGTH = 20",
                    "train.eval_every = 0"])
  result = vmsst.training.loop.train()
  losses = [loss for _, loss in result["loss_history"]]
  assert result["step"] == 300
  assert np.mean(losses[-3:]) < 0.7 * np.mean(losses[:3]), losses
  multi30k = [v for k, v in result["retrieval"].items() if k.startswith("multi30k")]
  chance = 100 / 200
  assert len(multi30k) == 3 and np.mean(multi30k) > 6 * chance, result["retrieval"]
  assert "VMSST" in (tmp_path / "vmsst" / "config.gin").read_text()


NAN_RUN = ["make_manager.save_interval_steps = 2", "train.log_every = 100", *SMALL]
# Adafactor's update is ~lr x parameter RMS, ~1e28 here: its squared norm overflows
# float32, so from step 5 on every step is non-finite.
HUGE_LR = "inverse_sqrt_schedule.peak_learning_rate = 1e30"


@pytest.fixture(scope="module")
def four_good_steps(data_dir, tiny_vocab_path, tmp_path_factory):
  """(model_dir with checkpoints 2 and 4, params at step 4, the run's result, its progress bar,
  the schedule's peak and warm-up): copied or read by each test below, so the file trains
  these four steps once."""
  model_dir = tmp_path_factory.mktemp("nan") / "four"
  vmsst_testing.configure_small_run(data_dir, tiny_vocab_path, model_dir, steps=4, extra=NAN_RUN)
  schedule = (gin.query_parameter("inverse_sqrt_schedule.peak_learning_rate"),
              gin.query_parameter("inverse_sqrt_schedule.warmup_steps"))
  bar = io.StringIO()
  with contextlib.redirect_stderr(bar):  # tqdm's default file: sys.stderr when the bar starts
    result = vmsst.training.loop.train()
  gin.clear_config()
  return model_dir, jax.device_get(result["params"]), result, bar.getvalue(), schedule


def test_resume_continues_from_the_saved_step_and_matches_an_uninterrupted_run(
    four_good_steps, data_dir, tiny_vocab_path, tmp_path):
  # The fixture's finished 4-step run, continued to 8 (TRAIN_STEPS raised), against a straight
  # 8-step run; the NaN tests' batch and data (NAN_RUN): the same programs, compiled once.
  assert (four_good_steps[2]["start_step"], four_good_steps[2]["step"]) == (0, 4)
  shutil.copytree(four_good_steps[0], tmp_path / "resumed")
  vmsst_testing.configure_small_run(data_dir, tiny_vocab_path, tmp_path / "resumed", steps=8,
                                    extra=NAN_RUN)
  resumed = vmsst.training.loop.train()
  assert (resumed["start_step"], resumed["step"]) == (4, 8)
  vmsst_testing.configure_small_run(data_dir, tiny_vocab_path, tmp_path / "straight", steps=8,
                                    extra=NAN_RUN)
  straight = vmsst.training.loop.train()
  jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6),
               jax.device_get(resumed["params"]), jax.device_get(straight["params"]))


def _continue_to_8(four_good_steps, data_dir, tiny_vocab_path, model_dir, extra):
  shutil.copytree(four_good_steps[0], model_dir)
  vmsst_testing.configure_small_run(data_dir, tiny_vocab_path, model_dir, steps=8,
                                    extra=NAN_RUN + [HUGE_LR, "train.resume_with_changes = True"]
                                    + extra)  # the learning rate changes on purpose


def _saved_steps(model_dir):
  return sorted(int(p.name) for p in (model_dir / "checkpoints").iterdir() if p.name.isdigit())


def test_nan_loss_stops_and_keeps_the_last_good_checkpoint(
    four_good_steps, data_dir, tiny_vocab_path, tmp_path):
  _continue_to_8(four_good_steps, data_dir, tiny_vocab_path, tmp_path / "nan", [])
  # Checked every step (not only on logged ones): the first bad step stops the run.
  with pytest.raises(FloatingPointError,
                     match=r"at step 5 \(1 bad steps in a row.*last good checkpoint \(step 4\)"):
    vmsst.training.loop.train()
  assert _saved_steps(tmp_path / "nan") == [2, 4]


def test_skipping_nonfinite_steps_finishes_and_counts_them(
    four_good_steps, data_dir, tiny_vocab_path, tmp_path):
  _continue_to_8(four_good_steps, data_dir, tiny_vocab_path, tmp_path / "skip",
                 ["train.skip_nonfinite_steps = 10"])
  result = vmsst.training.loop.train()
  assert (result["start_step"], result["step"], result["skipped_steps"]) == (4, 8, 4)
  assert result["final_metrics"]["skipped_steps"] == 4
  # Every update was discarded: the parameters are still those of step 4.
  jax.tree.map(np.testing.assert_array_equal, jax.device_get(result["params"]),
               four_good_steps[1])


def test_more_bad_steps_in_a_row_than_allowed_stop_the_run(
    four_good_steps, data_dir, tiny_vocab_path, tmp_path):
  _continue_to_8(four_good_steps, data_dir, tiny_vocab_path, tmp_path / "limit",
                 ["train.skip_nonfinite_steps = 2"])
  with pytest.raises(FloatingPointError, match=r"at step 7 \(3 bad steps in a row"):
    vmsst.training.loop.train()
  # Step 6 was saved while skipping: it holds step 4's (good) parameters.
  assert _saved_steps(tmp_path / "limit") == [4, 6]


def test_a_rerun_with_fewer_steps_than_the_checkpoint_leaves_the_directory_as_it_was(
    four_good_steps, data_dir, tiny_vocab_path, tmp_path, caplog):
  model_dir = tmp_path / "done"
  shutil.copytree(four_good_steps[0], model_dir)  # a finished 4-step run
  before = {p: p.read_bytes() for p in model_dir.rglob("*") if p.is_file()}
  vmsst_testing.configure_small_run(data_dir, tiny_vocab_path, model_dir, steps=2, extra=NAN_RUN)
  with caplog.at_level("WARNING"):
    result = vmsst.training.loop.train()
  assert (result["start_step"], result["step"]) == (4, 4)
  assert "already at step 4 ≥ TRAIN_STEPS (2), nothing to do" in caplog.text
  assert {p: p.read_bytes() for p in model_dir.rglob("*") if p.is_file()} == before
  assert "TRAIN_STEPS = 4" in (model_dir / "config.gin").read_text()


@pytest.mark.integration  # trains (in its fixture), as the rest of the file
def test_learning_rate_is_logged_and_the_bar_shows_the_loss_every_step(four_good_steps):
  """Read off the fixture's run (log_every 100: only its saved steps 2 and 4 are logged)."""
  _, _, result, bar, (peak, warmup) = four_good_steps
  # Step 4's update is optax's count 3: peak * min(3 / warmup, sqrt(warmup / 3)).
  np.testing.assert_allclose(result["final_metrics"]["learning_rate"],
                             peak * min(3 / warmup, (warmup / 3) ** 0.5), rtol=1e-6)
  # Step 1 is not a logged step: the bar shows its loss all the same.
  assert re.search(r"1/4 \[[^\]]*loss=\d", bar), bar[-2000:]
