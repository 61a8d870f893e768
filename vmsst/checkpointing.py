"""Orbax checkpoints of the train state, restored onto the target shardings.

The manager saves every `save_interval_steps`, keeps `max_to_keep`, and on
start-up the trainer restores the latest step (resume after interruption).
"""

import logging as python_logging  # record levels (absl's constants differ)
import os
from typing import Any

import gin
import jax
import orbax.checkpoint as ocp
from absl import logging


@gin.configurable
def make_manager(model_dir: str, *, save_interval_steps: int = 500,
                 max_to_keep: int = 3) -> ocp.CheckpointManager:
  """CheckpointManager under `model_dir/checkpoints`."""
  options = ocp.CheckpointManagerOptions(
      save_interval_steps=save_interval_steps, max_to_keep=max_to_keep, create=True)
  return ocp.CheckpointManager(
      os.path.join(os.path.abspath(model_dir), "checkpoints"), options=options)


def save(manager: ocp.CheckpointManager, step: int, state: Any, *, force: bool = False) -> bool:
  """Saves `state` at `step` if the interval says so (or `force`)."""
  return manager.save(step, args=ocp.args.StandardSave(state), force=force)


def restore_latest(manager: ocp.CheckpointManager, abstract_state: Any) -> Any | None:
  """The latest saved state, laid out like `abstract_state`; None if none exists.

  Args:
    abstract_state: tree of jax.ShapeDtypeStruct with `.sharding` set, so
      every array is restored straight onto its devices.
  """
  step = manager.latest_step()
  if step is None:
    return None
  logging.info("Restoring checkpoint at step %d from %s", step, manager.directory)
  return manager.restore(step, args=ocp.args.StandardRestore(abstract_state))


def abstract_with_shardings(tree: Any, shardings: Any) -> Any:
  """ShapeDtypeStructs of `tree` carrying the given shardings."""
  return jax.tree.map(lambda x, s: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=s),
                      tree, shardings)


def quiet_orbax_logs() -> None:
  """Keeps orbax's per-save INFO lines out of the console (entrypoints call it)."""
  logging.get_absl_handler().addFilter(_QuietOrbax())


class _QuietOrbax:
  """absl-handler filter: drops orbax's INFO chatter (several lines per save)."""

  def filter(self, record) -> bool:
    return record.levelno > python_logging.INFO or "/orbax/" not in record.pathname
