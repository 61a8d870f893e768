"""Where a run's wall time went: productive steps against everything else.

A pod run loses time to start-up and compilation, to steps that wait on the
input pipeline, to saving and restoring checkpoints, to evaluation, and,
after a restart, to redoing the steps between the last checkpoint and where
the previous run had got to. `Goodput` accumulates those durations (pure:
the loop hands it seconds, or a clock to time blocks with) and renders them
as TensorBoard scalars and one line at exit:

  goodput 91%: start-up 4%, data wait 3%, checkpoints 2%, other 0%

"Redone" needs the previous run's progress: the loop records the last step a
run reached in the run directory (`run_directory.record_progress`, process 0,
at each logged step and at exit) and finds it there on restart
(`run_directory.read(...).progress`).
"""

import dataclasses
import socket
import time
from typing import Callable, Iterator
import contextlib

from absl import logging

from vmsst.base.gin_utils import gin

# Categories in the order the line names them; "productive" is the goodput.
CATEGORIES = ("productive", "startup", "data_wait", "checkpoints", "evaluation", "redone")
LABELS = {"productive": "productive", "startup": "start-up and compilation",
          "data_wait": "data wait", "checkpoints": "checkpoints", "evaluation": "evaluation",
          "redone": "redone steps", "other": "other"}


@dataclasses.dataclass
class Goodput:
  """Seconds per category since `started` (a `clock()` reading).

  Attributes:
    clock: seconds, monotonic (time.monotonic; a test passes its own).
    started: the clock when the run started.
    data_wait_warning: the share of a window's step time spent waiting for
      data above which `check_data_wait` warns (0.2: a fifth).
    host: what a warning names this host by ("process 0 of 1 on <hostname>").
  """
  clock: Callable[[], float] = time.monotonic
  started: float | None = None
  data_wait_warning: float = 0.2
  host: str = ""
  seconds: dict[str, float] = dataclasses.field(
      default_factory=lambda: dict.fromkeys(CATEGORIES, 0.0))
  _window: dict[str, float] = dataclasses.field(default_factory=dict)

  def __post_init__(self):
    if self.started is None:
      self.started = self.clock()
    self._window = dict(self.seconds)

  def add(self, category: str, seconds: float) -> None:
    """Counts `seconds` under `category` (one of CATEGORIES)."""
    if category not in self.seconds:
      raise ValueError(f"unknown goodput category {category!r}; one of {CATEGORIES}")
    self.seconds[category] += seconds

  def add_unaccounted(self, category: str, now: float | None = None) -> None:
    """Counts the wall time so far that no category holds under `category` (e.g. start-up)."""
    wall = (self.clock() if now is None else now) - self.started
    self.add(category, max(0.0, wall - sum(self.seconds.values())))

  @contextlib.contextmanager
  def timing(self, category: str) -> Iterator[None]:
    """Counts the block's duration under `category` (also when it raises)."""
    begin = self.clock()
    try:
      yield
    finally:
      self.add(category, self.clock() - begin)

  def shares(self, now: float | None = None) -> dict[str, float]:
    """Each category's share of the wall time so far, "other" the rest; sums to 1."""
    wall = (self.clock() if now is None else now) - self.started
    if wall <= 0:
      return {**dict.fromkeys(CATEGORIES, 0.0), "other": 0.0}
    shares = {k: v / wall for k, v in self.seconds.items()}
    shares["other"] = max(0.0, 1.0 - sum(shares.values()))
    return shares

  def scalars(self, now: float | None = None) -> dict[str, float]:
    """TensorBoard scalars: `goodput/<category>` in percent of the wall time so far."""
    return {f"goodput/{k}": 100 * v for k, v in self.shares(now).items()}

  def line(self, now: float | None = None) -> str:
    """`goodput 91%: data wait 3%, checkpoints 2%, ...`: every category that took time, largest first.

    "other" (logging, the progress bar) is named only from half a percent.
    """
    shares = self.shares(now)
    rest = sorted(((v, k) for k, v in shares.items()
                   if k != "productive" and v > (0.005 if k == "other" else 0)), reverse=True)
    parts = ", ".join(f"{LABELS[k]} {_percent(v)}" for v, k in rest)
    return f"goodput {_percent(shares['productive'])}" + (f": {parts}" if parts else "")

  def check_data_wait(self, steps: int) -> str | None:
    """A warning when, since the last check, data waits exceeded their share of step time.

    Step time is productive + redone + data wait of the window; returns the
    warning it logged (None when within the limit).
    """
    window = {k: self.seconds[k] - self._window[k] for k in self.seconds}
    self._window = dict(self.seconds)
    busy = window["productive"] + window["redone"] + window["data_wait"]
    if busy <= 0 or window["data_wait"] / busy <= self.data_wait_warning:
      return None
    message = (f"{self.host or 'this host'}: steps waited on the input pipeline "
               f"{_percent(window['data_wait'] / busy)} of their time over the last {steps} "
               f"steps (above make_goodput.data_wait_warning = {self.data_wait_warning:g}); "
               "the input pipeline is the bottleneck: give it more CPU cores or pre-tokenize")
    logging.warning("%s", message)
    return message


def _percent(share: float) -> str:
  """Whole percent; a share under one percent but above zero is "<1%", never "0%"."""
  return "<1%" if 0 < share < 0.005 else f"{100 * share:.0f}%"


@gin.configurable
def make_goodput(*, process_index: int, process_count: int,
                 data_wait_warning: float = 0.2) -> Goodput:
  """The run's Goodput, started now; warnings name this host by index and hostname.

  Args:
    data_wait_warning: warn while running when steps spend more than this
      share of their time waiting for the next batch.
  """
  host = f"process {process_index} of {process_count} on {socket.gethostname()}"
  return Goodput(data_wait_warning=data_wait_warning, host=host)


def steps_redone(start_step: int, previous_step: int | None, step: int) -> bool:
  """Whether `step` repeats work: the previous run had reached it past the restored `start_step`."""
  return previous_step is not None and start_step < step <= previous_step
