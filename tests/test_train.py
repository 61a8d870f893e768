"""End to end on the real data: the loss falls, retrieval beats chance, resume works."""

import gin
import jax
import numpy as np
import pytest

import vmsst.train
import vmsst_testing


@pytest.fixture(autouse=True)
def _clean_gin():
  yield
  gin.clear_config()


def test_short_vmsst_run_learns_and_retrieves_far_above_chance(data_dir, tiny_vocab_path,
                                                               tmp_path):
  # Multi30k only (4 languages, short captions) so that 300 CPU steps suffice.
  vmsst_testing.configure_small_run(data_dir, tiny_vocab_path, tmp_path / "vmsst", steps=300,
             extra=["train.mixture_name = 'vmsst_multi30k'"])
  result = vmsst.train.train()
  losses = [loss for _, loss in result["loss_history"]]
  assert result["step"] == 300
  assert np.mean(losses[-3:]) < 0.7 * np.mean(losses[:3]), losses
  multi30k = [v for k, v in result["retrieval"].items() if k.startswith("multi30k")]
  chance = 100 / 200
  assert len(multi30k) == 3 and np.mean(multi30k) > 6 * chance, result["retrieval"]
  assert "VMSST" in (tmp_path / "vmsst" / "config.gin").read_text()


def test_resume_continues_from_the_saved_step_and_matches_an_uninterrupted_run(
    data_dir, tiny_vocab_path, tmp_path):
  common = ["make_manager.save_interval_steps = 4", "train.evaluator = None"]
  vmsst_testing.configure_small_run(data_dir, tiny_vocab_path, tmp_path / "resumed", steps=8, extra=common)
  first = vmsst.train.train()
  assert (first["start_step"], first["step"]) == (0, 8)
  vmsst_testing.configure_small_run(data_dir, tiny_vocab_path, tmp_path / "resumed", steps=12, extra=common)
  resumed = vmsst.train.train()
  assert (resumed["start_step"], resumed["step"]) == (8, 12)
  vmsst_testing.configure_small_run(data_dir, tiny_vocab_path, tmp_path / "straight", steps=12, extra=common)
  straight = vmsst.train.train()
  jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6),
               jax.device_get(resumed["params"]), jax.device_get(straight["params"]))


def test_nan_loss_stops_and_keeps_the_last_good_checkpoint(data_dir, tiny_vocab_path,
                                                           tmp_path):
  common = ["make_manager.save_interval_steps = 2", "train.evaluator = None",
            "train.log_every = 100"]
  vmsst_testing.configure_small_run(data_dir, tiny_vocab_path, tmp_path / "nan", steps=4, extra=common)
  vmsst.train.train()
  vmsst_testing.configure_small_run(data_dir, tiny_vocab_path, tmp_path / "nan", steps=8,
             extra=common + ["inverse_sqrt_schedule.peak_learning_rate = 1e30"])
  with pytest.raises(FloatingPointError, match="last good checkpoint"):
    vmsst.train.train()
  saved = sorted(int(p.name) for p in (tmp_path / "nan" / "checkpoints").iterdir()
                 if p.name.isdigit())
  assert saved == [2, 4]
