"""Early stopping: the pure state machine by hand, persistence, and a real stopped run."""

import json
import pathlib

import jax
import numpy as np
import pytest

import vmsst.training.loop
import vmsst_testing
from vmsst.base.gin_utils import gin
from vmsst.training import early_stopping as es
from vmsst.encoding import restore
from vmsst.model import param_files
from vmsst.base import run_directory


@pytest.fixture(autouse=True)
def _clean_gin():
  yield
  gin.clear_config()


def test_both_metrics_must_fall_below_the_last_improvement():
  # (loss, errors) per epoch, patience 2; the reference is the last improvement.
  state = es.StopState()
  state = es.update(state, 1000, (0.50, 40), patience=2)        # first: the reference
  assert state == es.StopState(best=(0.50, 40.0), best_step=1000)
  state = es.update(state, 2000, (0.45, 41), patience=2)        # loss fell, errors did not
  assert (state.idle, state.stopped, state.best_step) == (1, False, 1000)
  state = es.update(state, 3000, (0.44, 39), patience=2)        # both below (0.50, 40)
  assert state == es.StopState(best=(0.44, 39.0), best_step=3000)
  state = es.update(state, 4000, (0.44, 30), patience=2)        # a tie in the loss: idle
  state = es.update(state, 5000, (0.60, 50), patience=2)        # second idle epoch: stop
  assert (state.idle, state.stopped, state.best_step) == (2, True, 3000)
  assert es.update(state, 6000, (0.1, 1), patience=2) == state  # stopped stays stopped


def test_any_rule_and_min_delta():
  assert es.improved((0.5, 40), (0.45, 41), require="any")
  assert not es.improved((0.5, 40), (0.45, 41), require="all")
  assert not es.improved((0.5,), (0.495,), min_delta=0.01)
  assert es.improved(None, (9.0,))


def test_observe_persists_and_a_restarted_monitor_keeps_counting(tmp_path):
  stopper = es.EarlyStopping(metrics=("loss",), patience=2, directory=str(tmp_path))
  params = {"w": np.ones(2)}
  assert not stopper.observe(10, {"loss": 1.0, "other": 5.0}, params)
  assert not stopper.observe(20, {"loss": 1.0}, {"w": np.zeros(2)})
  saved = json.loads(pathlib.Path(run_directory.of(str(tmp_path)).early_stopping).read_text())
  assert saved == {"best": [1.0], "best_step": 10, "idle": 1, "stopped": False}
  again = es.EarlyStopping(metrics=("loss",), patience=2, directory=str(tmp_path))
  assert again.state == es.StopState(best=(1.0,), best_step=10, idle=1)
  assert again.observe(30, {"loss": 2.0}, params)
  assert again.resume(evaluator=object(), eval_every=10)  # a stopped run stays stopped
  np.testing.assert_array_equal(stopper.final_params({"w": np.zeros(2)})["w"], [1.0, 1.0])


def test_errors_name_the_fix():
  stopper = es.EarlyStopping(metrics=("loss", "errors"))
  with pytest.raises(KeyError, match=r"\['errors'\] are not among the evaluator's results"):
    stopper.observe(1, {"loss": 1.0}, {})
  with pytest.raises(ValueError, match="needs train.evaluator"):
    stopper.resume(evaluator=None, eval_every=1000)
  with pytest.raises(ValueError, match="require"):
    es.EarlyStopping(require="most")


@pytest.mark.slow
def test_train_stops_after_idle_evaluations_and_keeps_the_best(data_dir, tiny_vocab_path,
                                                               tmp_path):
  # The retrieval evaluator's "chance" never falls: the first evaluation (step 1) is the
  # last improvement, steps 2 and 3 are idle, so patience 2 stops at step 3 of 20 and the
  # final checkpoint holds the parameters of step 1.
  extra = ["train.eval_every = 1", "train.early_stopping = @EarlyStopping()",
           "EarlyStopping.metrics = ['chance']", "EarlyStopping.patience = 2",
           "EarlyStopping.directory = %MODEL_DIR", "retrieval_sets.max_pairs = 16"]
  model_dir = tmp_path / "stopped"
  vmsst_testing.configure_small_run(data_dir, tiny_vocab_path, model_dir, steps=20, extra=extra)
  result = vmsst.training.loop.train()
  assert result["step"] == 3
  assert json.loads(pathlib.Path(run_directory.of(str(model_dir)).early_stopping).read_text())["best_step"] == 1
  one_step = tmp_path / "one_step"
  vmsst_testing.configure_small_run(data_dir, tiny_vocab_path, one_step, steps=1,
                                    extra=["train.evaluator = None"])
  vmsst.training.loop.train()
  gin.clear_config()
  stopped = restore.restore(str(model_dir))
  assert stopped.step == 3
  want = param_files.flatten(jax.device_get(restore.restore(str(one_step)).params))
  got = param_files.flatten(jax.device_get(stopped.params))
  assert all(np.array_equal(got[k], want[k]) for k in want)
  # A rerun finds the run stopped and trains nothing.
  vmsst_testing.configure_small_run(data_dir, tiny_vocab_path, model_dir, steps=20, extra=extra)
  assert vmsst.training.loop.train()["step"] == 3
