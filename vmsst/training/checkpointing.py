"""Orbax checkpoints of the train state and the data position, restored onto the target shardings.

The manager saves every `save_interval_steps`, keeps `max_to_keep`, and on
start-up the trainer restores the latest step (resume after interruption).
Each step holds two orbax items (run_directory names them): the train state,
and the input stream's position after that step (`save(..., batches=)`; the
stream's own `save`/`restore` write and read it, `restore_position` puts a
resumed stream back), as MaxText keeps Grain's iterator state. Being an item
of the step, the position commits, is kept, deleted and set aside with it;
a step without one (saved by an earlier version) resumes the stream by
skipping its batches.

Faults it survives:
- a process killed mid-save: orbax writes into `<step>.orbax-checkpoint-tmp-*`
  and renames only when complete, so a half-written step is never listed; the
  manager removes such leftovers when it starts (`cleanup_tmp_directories`).
  Saves are asynchronous (`make_manager`): the step waits only for the
  device-to-host copy and the data position's write, and a kill while the
  background write runs leaves the previous step as the latest.
- a truncated or corrupt step (deleted or cut array files, broken metadata):
  `restore_latest` warns, moves it aside to `checkpoints/corrupt-<step>` and
  falls back to the previous step; if none restores it raises
  `NoUsableCheckpointError`, never starting afresh silently.
- a MODEL_DIR written by another configuration: `IncompatibleCheckpointError`
  lists every parameter whose name or shape differs.
- SIGTERM (what schedulers send before preempting) or Ctrl-C (SIGINT):
  `PreemptionWatcher` notices it; the loop finishes the step, saves it and
  exits with `PREEMPTED_EXIT_CODE` (SIGTERM) or `cli.INTERRUPTED_EXIT_CODE`
  (SIGINT). A second Ctrl-C aborts at once (KeyboardInterrupt).
"""

import dataclasses
import os
import signal
import sys
import threading
from typing import Any

from vmsst.base.gin_utils import gin
import jax
import orbax.checkpoint as ocp
from absl import logging
from jax.experimental import multihost_utils

from vmsst.base import cli
from vmsst.base import console
from vmsst.base import files
from vmsst.base import run_directory
from vmsst.encoding import restore

# EX_TEMPFAIL of sysexits.h: "temporary failure, retry" (a scheduler requeues).
PREEMPTED_EXIT_CODE = 75


class IncompatibleCheckpointError(ValueError):
  """The checkpoint's parameters do not fit the configured model."""


class NoUsableCheckpointError(RuntimeError):
  """Checkpoints exist but none of them restores."""


class Preempted(SystemExit):
  """SIGTERM or SIGINT arrived; the state was saved.

  `code` is PREEMPTED_EXIT_CODE after SIGTERM, cli.INTERRUPTED_EXIT_CODE after SIGINT.
  """

  def __init__(self, step: int, directory: str, signum: int = signal.SIGTERM):
    super().__init__(cli.INTERRUPTED_EXIT_CODE if signum == signal.SIGINT else PREEMPTED_EXIT_CODE)
    self.step, self.directory, self.signum = step, directory, signum

  def __str__(self) -> str:
    cause = "interrupted (Ctrl-C)" if self.signum == signal.SIGINT else "preempted (SIGTERM)"
    return (f"{cause}: saved step {self.step} in {self.directory}; "
            f"exit status {self.code}, rerun the same command to resume")


@gin.configurable
def make_manager(model_dir: "str | run_directory.Paths", *, save_interval_steps: int = 500,
                 max_to_keep: int = 3, asynchronous: bool = True) -> ocp.CheckpointManager:
  """CheckpointManager of a run directory's checkpoints (`model_dir`: the directory, or its
  run_directory.Paths).

  The handler is registered up front so that `item_metadata` can read a step
  before anything is restored (the configuration check needs it).

  Args:
    asynchronous: `save` returns once the arrays are copied to host memory
      and a background thread writes them (the next step runs meanwhile);
      False writes before returning (bench/save_stall.py compares the two).
      Either way a step is listed only once complete, and
      `wait_until_finished` waits for the write in flight.
  """
  options = ocp.CheckpointManagerOptions(
      save_interval_steps=save_interval_steps, max_to_keep=max_to_keep, create=True,
      cleanup_tmp_directories=True, enable_async_checkpointing=asynchronous)
  paths = model_dir if isinstance(model_dir, run_directory.Paths) else run_directory.of(model_dir)
  return ocp.CheckpointManager(
      paths.checkpoints, options=options,
      item_handlers={run_directory.STATE: ocp.StandardCheckpointHandler(),
                     run_directory.DATA_POSITION: DataPositionHandler()})


def save(manager: ocp.CheckpointManager, step: int, state: Any, *, batches: Any = None,
         force: bool = False) -> bool:
  """Saves `state` at `step` if the interval says so (or `force`), with the position of
  `batches` (the training stream, after the step's batch) when given."""
  items = {run_directory.STATE: ocp.args.StandardSave(state)}
  if batches is not None:
    items[run_directory.DATA_POSITION] = DataPositionSave(batches)
  return manager.save(step, args=ocp.args.Composite(**items), force=force)


def restore_position(manager: ocp.CheckpointManager, step: int, batches: Any) -> str | None:
  """Puts `batches` (a fresh training stream) at the position saved with `step`.

  Returns:
    None once restored, else why not (for the log; the stream then skips to the step).
  """
  if step not in manager.all_steps():
    return f"no checkpoint of step {step} in {manager.directory}"
  try:
    restored = manager.restore(step, args=ocp.args.Composite(
        **{run_directory.DATA_POSITION: DataPositionRestore(batches)}))
  except KeyError:  # orbax: the item is not in the checkpoint
    return f"the checkpoint of step {step} holds no data position (saved without one)"
  return restored[run_directory.DATA_POSITION]


class DataPositionHandler(ocp.CheckpointHandler):
  """Orbax's side of the data position: the stream writes and reads its own files.

  Called on every process while `save` blocks (orbax runs a synchronous
  item before the save returns), so the stream has not moved on; each host
  writes its share (input_pipeline.HostBatches.save decides which).
  """

  def save(self, directory, args: "DataPositionSave") -> None:
    args.batches.save(os.fspath(directory))

  def restore(self, directory, args: "DataPositionRestore") -> str | None:
    return args.batches.restore(os.fspath(directory))

  def metadata(self, directory) -> None:
    del directory


@ocp.args.register_with_handler(DataPositionHandler, for_save=True)
@dataclasses.dataclass
class DataPositionSave(ocp.args.CheckpointArgs):
  batches: Any  # the training stream: HostBatches, or StreamBatches of a pre-tokenized one


@ocp.args.register_with_handler(DataPositionHandler, for_restore=True)
@dataclasses.dataclass
class DataPositionRestore(ocp.args.CheckpointArgs):
  batches: Any  # a fresh stream of the same description, put at the saved position


def restore_latest(manager: ocp.CheckpointManager, abstract_state: Any) -> Any | None:
  """The newest state that restores, laid out like `abstract_state`; None if none exists.

  Steps are tried newest first. One that fails to read is logged as a WARNING
  (step, directory, error), moved aside to `corrupt-<step>` (so training can
  save that step again) and the previous one is tried.

  Args:
    abstract_state: tree of jax.ShapeDtypeStruct with `.sharding` set, so
      every array is restored straight onto its devices.
  Raises:
    IncompatibleCheckpointError: the newest readable checkpoint has other
      parameter names or shapes (a different configuration).
    NoUsableCheckpointError: checkpoints exist but none restores.
  """
  steps = sorted(manager.all_steps(), reverse=True)
  if not steps:
    return None
  failures = []
  for step in steps:
    try:
      saved = _read_metadata(manager, step)
    except Exception as e:  # pylint: disable=broad-except  # any read failure means corrupt
      _warn_unreadable(manager, step, e, failures)
      continue
    check_compatible(saved, abstract_state, os.fspath(manager.directory), step)
    logging.info("Restoring checkpoint at step %d from %s", step, manager.directory)
    try:
      state = _restore(manager, step, saved, abstract_state)
      jax.block_until_ready(state)
    except Exception as e:  # pylint: disable=broad-except
      _warn_unreadable(manager, step, e, failures)
      continue
    _set_aside(manager, [s for s, _ in failures])
    return state
  raise NoUsableCheckpointError(
      f"none of the checkpoints in {manager.directory} restores "
      f"({'; '.join(f'step {s}: {cli.first_line(e)}' for s, e in failures)}). Nothing was "
      "restored and training was not restarted from scratch: repair or move that directory "
      "aside to start afresh, or set MODEL_DIR to a new directory.")


def _restore(manager: ocp.CheckpointManager, step: int, saved: Any, abstract_state: Any) -> Any:
  """Restores `step`; fields of the state that hold no arrays may be absent on disk.

  A checkpoint written before a field was added to the train state (e.g.
  `model_state`, empty for most objectives) lacks that key; its saved tree
  then differs from the target only by empty subtrees, which are taken from
  `abstract_state` instead of failing the restore.
  """
  if hasattr(saved, "keys") and dataclasses.is_dataclass(abstract_state):  # orbax tree metadata
    on_disk = set(saved.keys())
    fields = {f.name: getattr(abstract_state, f.name) for f in dataclasses.fields(abstract_state)}
    empty = {k: v for k, v in fields.items() if k not in on_disk and not jax.tree.leaves(v)}
    if empty:
      target = {k: v for k, v in fields.items() if k not in empty}
      return abstract_state.replace(**_restore_state(manager, step, target), **empty)
  return _restore_state(manager, step, abstract_state)


def _restore_state(manager: ocp.CheckpointManager, step: int, target: Any) -> Any:
  return manager.restore(step, args=ocp.args.Composite(
      **{run_directory.STATE: ocp.args.StandardRestore(target)}))[run_directory.STATE]


def _warn_unreadable(manager: ocp.CheckpointManager, step: int, error: Exception,
                     failures: list[tuple[int, Exception]]) -> None:
  failures.append((step, error))
  logging.warning("checkpoint step %d in %s does not restore (%s); trying the previous one",
                  step, manager.directory, cli.first_line(error))


def _read_metadata(manager: ocp.CheckpointManager, step: int) -> Any:
  metadata = manager.item_metadata(step)
  metadata = metadata and metadata.get(run_directory.STATE)
  if metadata is None:
    raise ValueError("no readable item metadata (_METADATA missing?)")
  return metadata


def _set_aside(manager: ocp.CheckpointManager, bad_steps: list[int]) -> None:
  """Renames each bad step to `corrupt-<step>` (process 0) and re-lists the steps."""
  if not bad_steps:
    return
  directory = os.fspath(manager.directory)
  for step in bad_steps:
    target = files.join(directory, f"corrupt-{step}")
    if jax.process_index() == 0:
      suffix = 1
      while files.exists(target):
        target, suffix = files.join(directory, f"corrupt-{step}.{suffix}"), suffix + 1
      files.rename(files.join(directory, str(step)), target)
    logging.warning("moved the unreadable checkpoint of step %d aside to %s", step, target)
  if jax.process_count() > 1:
    multihost_utils.sync_global_devices("vmsst_checkpoints_set_aside")
  manager.reload()


def check_compatible(saved: Any, abstract_state: Any, directory: str, step: int) -> None:
  """Raises if the saved tree (orbax metadata) differs from the model's in names or shapes.

  Args:
    saved: `manager.item_metadata(step)`, leaves with `.shape`.
    abstract_state: the TrainState of ShapeDtypeStructs the run expects.
  Raises:
    IncompatibleCheckpointError: listing each differing path with saved vs
      expected shape (parameters first; optimizer slots mirror them).
  """
  have, want = _shapes_by_path(saved), _shapes_by_path(abstract_state)
  problems = [(path, have.get(path), want.get(path)) for path in sorted(have.keys() | want.keys())
              if have.get(path) != want.get(path)]
  if not problems:
    return
  problems.sort(key=lambda p: not p[0].startswith("params/"))
  shown = [f"  {path}: saved {_shape_text(s)}, expected {_shape_text(e)}"
           for path, s, e in problems[:20]]
  more = [f"  ... and {len(problems) - 20} more"] if len(problems) > 20 else []
  if any(p.startswith("params/language_embed/") and s is None for p, s, _ in problems):
    more.append("  (no params/language_embed: "
                + restore.OLD_DIRECTORY_FIX.format(model_dir=os.path.dirname(directory.rstrip("/")))
                + ")")
  raise IncompatibleCheckpointError(
      f"the checkpoint at step {step} in {directory} was written by a different configuration; "
      f"{len(problems)} tensors differ:\n" + "\n".join(shown + more) + "\nSet MODEL_DIR to a "
      "fresh directory for this configuration (or restore the gin settings that wrote it, "
      "see config.gin next to the checkpoints).")


def _shapes_by_path(tree: Any) -> dict[str, tuple[int, ...]]:
  """{"params/layer/kernel": shape}: dict keys, attribute and tuple fields alike."""
  def name(key) -> str:
    for attr in ("key", "name", "idx"):
      if hasattr(key, attr):
        return str(getattr(key, attr))
    return str(key)
  return {"/".join(name(k) for k in path): tuple(getattr(leaf, "shape", ()))
          for path, leaf in jax.tree_util.tree_flatten_with_path(tree)[0]}


def _shape_text(shape: tuple[int, ...] | None) -> str:
  return "(absent)" if shape is None else str(tuple(shape))


class PreemptionWatcher:
  """Notices SIGTERM or Ctrl-C so that the loop saves and exits at a step boundary.

  One process: SIGTERM and SIGINT handlers (installed on entering, the
  previous ones put back on exit) record the signal; Ctrl-C no longer
  raises KeyboardInterrupt mid-step, so the work since the last checkpoint
  is kept. A second Ctrl-C raises KeyboardInterrupt at once (no save), for
  a user who does not want to wait. Several processes: JAX's preemption
  service (started by jax.distributed.initialize) catches SIGTERM and every
  process agrees on one step through `manager.reached_preemption(step)`; a
  local flag could stop hosts at different steps and hang the collective
  save (Ctrl-C keeps its default there).

  Attributes:
    signum: the signal that asked the loop to stop (None before one arrives).
  """

  _SIGNALS = (signal.SIGTERM, signal.SIGINT)

  def __init__(self):
    self.signum = None
    self._previous = {}

  def __enter__(self) -> "PreemptionWatcher":
    if jax.process_count() == 1 and threading.current_thread() is threading.main_thread():
      self._previous = {s: signal.signal(s, self._handle) for s in self._SIGNALS}
    return self

  def __exit__(self, *exc_info) -> None:
    for signum, previous in self._previous.items():
      signal.signal(signum, signal.SIG_DFL if previous is None else previous)
    self._previous = {}

  def _handle(self, signum: int, frame) -> None:
    if signum == signal.SIGINT and self.signum == signal.SIGINT:
      signal.default_int_handler(signum, frame)  # the second Ctrl-C: KeyboardInterrupt now
    if signum == signal.SIGINT:
      sys.stderr.write("\nCtrl-C: finishing this step and saving it (Ctrl-C again aborts "
                       "without saving)\n")
    if self.signum is None or signum == signal.SIGINT:
      self.signum = signum

  def reached(self, step: int, manager: ocp.CheckpointManager) -> bool:
    """True once SIGTERM or SIGINT arrived (checked after each step)."""
    if jax.process_count() > 1:
      return manager.reached_preemption(step)
    return self.signum is not None


def quiet_orbax_logs() -> None:
  """Keeps orbax's per-save INFO lines (and other chatter) out of the console: console.quiet_logs."""
  console.quiet_logs()
