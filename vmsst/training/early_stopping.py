"""Early stopping on held-out metrics: stop after `patience` idle evaluations.

The rule of query-tower tuning (Vasilyev et al. 2022, §2.3): "there are 1000
batches per epoch, and stopping occurs after 10 consecutive non-improvement
epochs. The improvement is measured on the validation subset after each
epoch. The model is considered to be improved if (on the validation subset)
both the loss and the count of errors are decreased." Any objective can use
it: `train.early_stopping = @EarlyStopping()`, with `train.eval_every` the
epoch (1,000 batches in the paper) and `train.evaluator` returning the
watched metrics (for query-tower tuning `QueryTowerValidation`: "loss" and
"errors").

`update` is the pure state machine; `EarlyStopping` holds its state, the
parameters of the last improvement (restored into the final checkpoint when
training stops, `restore_best`), and persists the state to
MODEL_DIR/early_stopping.json so that a restarted run keeps counting, and a
run that has stopped stays stopped.

What the paper leaves open, and what is chosen here:
  * "decreased" compared with what: with the values at the last improvement
    (the best so far), not merely the previous epoch, so a slow drift back
    and forth does not count as progress.
  * the first evaluation: it sets the reference and counts as an improvement
    (the loop does not evaluate before step 1).
  * which model is kept: the one at the last improvement (`restore_best`).
"""

import dataclasses
import json
from typing import Any, Mapping, Sequence

import jax
import jax.numpy as jnp
from absl import logging

from vmsst.base.gin_utils import gin
from vmsst.training import checkpointing
from vmsst.base import files
from vmsst.base import run_directory


@dataclasses.dataclass(frozen=True)
class StopState:
  """Where early stopping stands.

  Attributes:
    best: the watched metrics at the last improvement (None before any).
    best_step: the step of the last improvement.
    idle: evaluations since the last improvement.
    stopped: `idle` reached the patience.
  """
  best: tuple[float, ...] | None = None
  best_step: int | None = None
  idle: int = 0
  stopped: bool = False


def improved(best: Sequence[float] | None, values: Sequence[float], *, require: str = "all",
             min_delta: float = 0.0) -> bool:
  """Whether `values` improve on `best` (lower is better): every one ("all") or any one."""
  if best is None:
    return True
  falls = [value < reference - min_delta for value, reference in zip(values, best)]
  return all(falls) if require == "all" else any(falls)


def update(state: StopState, step: int, values: Sequence[float], *, patience: int,
           require: str = "all", min_delta: float = 0.0) -> StopState:
  """The state after one evaluation at `step` with the watched metrics `values`."""
  if state.stopped:
    return state
  if improved(state.best, values, require=require, min_delta=min_delta):
    return StopState(best=tuple(float(v) for v in values), best_step=step)
  idle = state.idle + 1
  return dataclasses.replace(state, idle=idle, stopped=idle >= patience)


REQUIRE = ("all", "any")


@gin.configurable
class EarlyStopping:
  """Stops `train` once the evaluator's watched metrics stop falling."""

  def __init__(self, *, metrics: Sequence[str] = ("loss", "errors"), patience: int = 10,
               require: str = "all", min_delta: float = 0.0, restore_best: bool = True,
               directory: str | None = None):
    """Args:
      metrics: keys of the evaluator's results, each lower-is-better.
      patience: idle evaluations (epochs of `train.eval_every` steps) that stop training.
      require: "all" (the paper: every metric must fall) or "any".
      min_delta: a fall must exceed this to count.
      restore_best: the final checkpoint holds the parameters of the last improvement.
      directory: where early_stopping.json is kept (gin: %MODEL_DIR); None: not kept.
    """
    if require not in REQUIRE:
      raise ValueError(f"EarlyStopping.require = {require!r}; choose one of {REQUIRE}.")
    if patience < 1 or not metrics:
      raise ValueError("EarlyStopping needs patience >= 1 and at least one metric.")
    self.metrics, self.patience, self.require = tuple(metrics), patience, require
    self.min_delta, self.restore_best, self.directory = min_delta, restore_best, directory
    self.state = self._load()
    self.best_params: Any = None

  def _path(self) -> str | None:
    return run_directory.of(self.directory).early_stopping if self.directory else None

  def _load(self) -> StopState:
    path = self._path()
    if path is None or not files.exists(path):
      return StopState()
    saved = json.loads(files.read_text(path))
    saved["best"] = tuple(saved["best"]) if saved["best"] is not None else None
    return StopState(**saved)

  def _save(self) -> None:
    path = self._path()
    if path is not None and jax.process_index() == 0:
      files.write_text(path, json.dumps(dataclasses.asdict(self.state), indent=1))

  def resume(self, evaluator: Any, eval_every: int) -> bool:
    """Checks the run can stop early; True when it already has (nothing left to do)."""
    if evaluator is None or eval_every <= 0:
      raise ValueError("train.early_stopping needs train.evaluator (returning "
                       f"{', '.join(self.metrics)}) and train.eval_every > 0 (the epoch); "
                       "bind both, or unbind train.early_stopping.")
    if self.state.stopped:
      logging.warning("stopped early at an earlier run (%d idle evaluations; last improvement "
                      "at step %s); delete %s to train on", self.state.idle,
                      self.state.best_step, self._path())
    return self.state.stopped

  def observe(self, step: int, results: Mapping[str, float], params: Any) -> bool:
    """Feeds one evaluation; True when training should stop now.

    Raises:
      KeyError: the evaluator's results lack a watched metric.
    """
    missing = [m for m in self.metrics if m not in results]
    if missing:
      raise KeyError(f"EarlyStopping.metrics {missing} are not among the evaluator's results "
                     f"({', '.join(sorted(results))}); set EarlyStopping.metrics to some of them.")
    self.state = update(self.state, step, [results[m] for m in self.metrics],
                        patience=self.patience, require=self.require, min_delta=self.min_delta)
    if self.state.best_step == step and self.restore_best:
      self.best_params = jax.tree.map(jnp.copy, params)  # the train step donates its state
    self._save()
    logging.info("early stopping: %s at step %d, %d idle of %d (last improvement: step %s)",
                 {m: results[m] for m in self.metrics}, step, self.state.idle, self.patience,
                 self.state.best_step)
    return self.state.stopped

  def final_params(self, params: Any) -> Any:
    """The parameters to save at the stop: the last improvement's, or `params`.

    After a restart the last improvement before it is not held (only its
    metrics are, in early_stopping.json): until the next improvement,
    `params` are kept.
    """
    return self.best_params if self.restore_best and self.best_params is not None else params

  def save_final(self, manager, step: int, state: Any) -> Any:
    """Saves the stopped run's last checkpoint at `step` (replacing one saved there)."""
    state = state.replace(params=self.final_params(state.params))
    manager.wait_until_finished()
    if step in manager.all_steps():
      manager.delete(step)
    checkpointing.save(manager, step, state, force=True)
    return state
