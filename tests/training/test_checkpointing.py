"""Faults at restore time: corrupt steps fall back loudly, another config is named."""

import dataclasses
import logging
import os
import pathlib
import signal

import jax
import numpy as np
import optax
import pytest

from vmsst_testing import TINY, random_batch
from vmsst.training import checkpointing
from vmsst.model import models
from vmsst.model import partitioning
from vmsst.training import trainer as trainer_lib
from vmsst.objectives import MODELS


def _trainer(config=TINY) -> trainer_lib.Trainer:
  mesh = partitioning.make_mesh(1, 1, devices=jax.devices()[:1])
  return trainer_lib.Trainer(MODELS["vmsst"](config), optax.adam(1e-3), mesh,
                             models.batch_shapes(4, 12))


@pytest.fixture(scope="module")
def two_states():
  """(trainer, {2: state after 2 steps, 4: after 4}) as host numpy trees."""
  trainer = _trainer()
  state, saved = trainer.initialize(jax.random.key(0)), {}
  for step in range(1, 5):
    state, _ = trainer.step(state, random_batch(seed=step), jax.random.key(1))
    if step in (2, 4):
      saved[step] = jax.device_get(state)
  return trainer, saved


def _save_both(trainer, saved, model_dir) -> pathlib.Path:
  manager = checkpointing.make_manager(str(model_dir))
  for step, state in saved.items():
    checkpointing.save(manager, step, state, force=True)
  manager.wait_until_finished()
  return pathlib.Path(manager.directory)


def _data_files(step_dir: pathlib.Path) -> list[pathlib.Path]:
  return sorted((p for p in step_dir.rglob("*") if p.is_file() and p.parent.name == "d"),
                key=lambda p: p.stat().st_size)


def _truncate_largest_array_file(step_dir):
  largest = _data_files(step_dir)[-1]
  with open(largest, "r+b") as f:
    f.truncate(largest.stat().st_size // 2)


def _delete_array_files(step_dir):
  for path in _data_files(step_dir):
    path.unlink()


def _truncate_tree_metadata(step_dir):
  with open(step_dir / "default" / "_METADATA", "r+b") as f:
    f.truncate(20)


def _delete_tree_metadata(step_dir):
  (step_dir / "default" / "_METADATA").unlink()


CORRUPTIONS = [_truncate_largest_array_file, _delete_array_files, _truncate_tree_metadata,
               _delete_tree_metadata]


@pytest.mark.parametrize("corrupt", CORRUPTIONS, ids=lambda f: f.__name__.strip("_"))
def test_a_corrupt_latest_step_falls_back_to_the_previous_one_and_says_so(
    two_states, tmp_path, caplog, corrupt):
  trainer, saved = two_states
  directory = _save_both(trainer, saved, tmp_path)
  corrupt(directory / "4")
  manager = checkpointing.make_manager(str(tmp_path))
  with caplog.at_level(logging.WARNING):
    restored = checkpointing.restore_latest(manager, trainer.abstract_state)
  jax.tree.map(np.testing.assert_array_equal, jax.device_get(restored), saved[2])
  warnings = " ".join(r.getMessage() for r in caplog.records if r.levelno == logging.WARNING)
  assert f"checkpoint step 4 in {directory} does not restore" in warnings, warnings
  assert f"aside to {directory / 'corrupt-4'}" in warnings, warnings
  # The bad step is kept for inspection, out of orbax's way: step 4 can be saved again.
  assert sorted(os.listdir(directory)) == ["2", "corrupt-4"]
  assert manager.all_steps() == [2]
  assert checkpointing.save(manager, 4, restored, force=True)
  manager.wait_until_finished()
  assert checkpointing.make_manager(str(tmp_path)).latest_step() == 4


def test_all_steps_corrupt_is_an_error_never_a_fresh_start(two_states, tmp_path):
  trainer, saved = two_states
  directory = _save_both(trainer, saved, tmp_path)
  _delete_array_files(directory / "2")
  _truncate_tree_metadata(directory / "4")
  manager = checkpointing.make_manager(str(tmp_path))
  with pytest.raises(checkpointing.NoUsableCheckpointError,
                     match=r"(?s)none of the checkpoints.*step 4: JSONDecodeError.*step 2: .*"
                           r"set MODEL_DIR to a new directory"):
    checkpointing.restore_latest(manager, trainer.abstract_state)
  assert sorted(os.listdir(directory)) == ["2", "4"]  # nothing moved when nothing restores


def test_an_empty_directory_restores_nothing(tmp_path):
  manager = checkpointing.make_manager(str(tmp_path))
  assert checkpointing.restore_latest(manager, _trainer().abstract_state) is None


def test_a_half_written_step_left_by_a_killed_save_is_ignored_and_removed(two_states, tmp_path):
  trainer, saved = two_states
  directory = _save_both(trainer, saved, tmp_path)
  # What a SIGKILL during the save of step 6 leaves: orbax's temporary directory.
  leftover = directory / "6.orbax-checkpoint-tmp-1795339735242863"
  (leftover / "default").mkdir(parents=True)
  (leftover / "default" / "_METADATA").write_text('{"tree_metadata": {')
  manager = checkpointing.make_manager(str(tmp_path))
  restored = checkpointing.restore_latest(manager, trainer.abstract_state)
  assert int(restored.step) == 4
  manager.wait_until_finished()  # the clean-up of temporaries runs in the background
  assert sorted(os.listdir(directory)) == ["2", "4"]


def _config_error(two_states, tmp_path, **changes) -> str:
  trainer, saved = two_states
  _save_both(trainer, saved, tmp_path)
  other = _trainer(dataclasses.replace(TINY, **changes))
  manager = checkpointing.make_manager(str(tmp_path))
  with pytest.raises(checkpointing.IncompatibleCheckpointError) as error:
    checkpointing.restore_latest(manager, other.abstract_state)
  assert manager.all_steps() == [2, 4]  # a config mismatch is not corruption: nothing moved
  return str(error.value)


def test_another_width_lists_saved_and_expected_shapes(two_states, tmp_path):
  message = _config_error(two_states, tmp_path, emb_dim=48)
  assert f"step 4 in {tmp_path / 'checkpoints'} was written by a different configuration" in message
  # Parameters come first, sorted; TINY's emb_dim is 32.
  assert "\n  params/decoder_final_norm/bias: saved (32,), expected (48,)\n" in message
  assert "params/token_embed/embedding" not in message  # beyond the 20 listed ...
  assert "more\nSet MODEL_DIR to a fresh directory" in message  # ... counted instead


def test_another_depth_lists_the_parameters_the_checkpoint_lacks(two_states, tmp_path):
  message = _config_error(two_states, tmp_path, num_encoder_layers=2)
  # 12 new tensors in semantic_encoder/layer_1, then Adam's mu and nu of each: 36.
  assert "36 tensors differ" in message
  assert ("params/semantic_encoder/layer_1/attention/query/kernel: saved (absent), "
          "expected (32, 2, 16)") in message
  assert "params/semantic_encoder/layer_0" not in message


def test_a_checkpoint_from_before_model_state_restores_with_an_empty_one(two_states, tmp_path):
  """States saved without the (empty) `model_state` field, as before momentum contrast added it."""
  trainer, saved = two_states
  old_format = {"step": saved[4].step, "params": saved[4].params, "opt_state": saved[4].opt_state}
  manager = checkpointing.make_manager(str(tmp_path))
  checkpointing.save(manager, 4, old_format, force=True)
  manager.wait_until_finished()
  restored = checkpointing.restore_latest(checkpointing.make_manager(str(tmp_path)),
                                          trainer.abstract_state)
  assert isinstance(restored, trainer_lib.TrainState) and restored.model_state == {}
  assert int(restored.step) == 4
  for got, want in zip(jax.tree.leaves(restored.params), jax.tree.leaves(saved[4].params)):
    np.testing.assert_array_equal(got, want)
  restored_state, _ = trainer.step(restored, random_batch(seed=5), jax.random.key(1))
  assert int(restored_state.step) == 5


def test_ctrl_c_asks_the_loop_to_stop_and_a_second_one_aborts_at_once(tmp_path):
  manager = checkpointing.make_manager(str(tmp_path))
  previous = signal.getsignal(signal.SIGINT)
  with checkpointing.PreemptionWatcher() as watcher:
    assert not watcher.reached(1, manager)
    os.kill(os.getpid(), signal.SIGINT)  # the first: no KeyboardInterrupt, a stop request
    assert watcher.reached(1, manager) and watcher.signum == signal.SIGINT
    with pytest.raises(KeyboardInterrupt):
      os.kill(os.getpid(), signal.SIGINT)
  assert signal.getsignal(signal.SIGINT) is previous
  stopped = checkpointing.Preempted(7, "d", watcher.signum)
  assert stopped.code == 130
  assert str(stopped) == ("interrupted (Ctrl-C): saved step 7 in d; exit status 130, rerun "
                          "the same command to resume")
  assert checkpointing.Preempted(7, "d").code == 75

