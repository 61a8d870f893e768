"""Goodput: where a run's wall time went, from hand-made durations (no training, no clock)."""

import pathlib

import pytest

from vmsst.base import run_directory
from vmsst.training import goodput as goodput_lib


class HandClock:
  """A clock the test moves by hand."""

  def __init__(self):
    self.now = 100.0

  def __call__(self) -> float:
    return self.now


def _run_of_100_seconds() -> tuple[goodput_lib.Goodput, HandClock]:
  clock = HandClock()
  run = goodput_lib.Goodput(clock=clock, host="process 1 of 2 on h")
  run.add("startup", 5.0)
  run.add("data_wait", 3.0)
  run.add("checkpoints", 2.0)
  run.add("redone", 4.0)
  run.add("productive", 85.0)
  clock.now += 100.0
  return run, clock


def test_shares_add_up_to_the_wall_time_with_the_rest_as_other():
  run, _ = _run_of_100_seconds()
  shares = run.shares()
  assert shares["productive"] == pytest.approx(0.85)
  assert shares["redone"] == pytest.approx(0.04)
  assert shares["other"] == pytest.approx(0.01)
  assert sum(shares.values()) == pytest.approx(1.0)
  assert run.scalars()["goodput/data_wait"] == pytest.approx(3.0)


def test_the_line_names_each_category_that_took_time_largest_first():
  run, _ = _run_of_100_seconds()
  assert run.line() == ("goodput 85%: start-up and compilation 5%, redone steps 4%, "
                        "data wait 3%, checkpoints 2%, other 1%")


def test_timing_counts_a_block_also_when_it_raises():
  clock = HandClock()
  run = goodput_lib.Goodput(clock=clock)
  with pytest.raises(RuntimeError):
    with run.timing("evaluation"):
      clock.now += 7.5
      raise RuntimeError("evaluator failed")
  assert run.seconds["evaluation"] == 7.5
  with pytest.raises(ValueError, match="unknown goodput category 'eval'"):
    run.add("eval", 1.0)


def test_data_wait_warns_per_window_naming_the_host():
  clock = HandClock()
  run = goodput_lib.Goodput(clock=clock, data_wait_warning=0.2, host="process 1 of 2 on h")
  run.add("productive", 9.0)
  run.add("data_wait", 1.0)  # 10% of step time: fine
  assert run.check_data_wait(steps=50) is None
  run.add("productive", 6.0)
  run.add("data_wait", 4.0)  # this window alone: 40%, although 25% over the whole run
  warning = run.check_data_wait(steps=50)
  assert warning.startswith("process 1 of 2 on h: steps waited on the input pipeline 40% ")
  assert "over the last 50 steps" in warning and "data_wait_warning = 0.2" in warning
  assert run.check_data_wait(steps=50) is None  # an empty window


def test_redone_steps_are_those_past_the_checkpoint_up_to_the_previous_progress():
  # Restored at 20, the previous run had reached 27: steps 21..27 are redone.
  assert [s for s in range(18, 31) if goodput_lib.steps_redone(20, 27, s)] == list(range(21, 28))
  assert not goodput_lib.steps_redone(20, None, 21)  # no record: a first run
  assert not goodput_lib.steps_redone(20, 20, 21)  # killed right at a checkpoint


def test_progress_round_trips_through_the_model_directory(tmp_path):
  paths = run_directory.of(str(tmp_path))
  assert run_directory.read(str(tmp_path)).progress is None
  run_directory.record_progress(paths, 27)
  assert run_directory.read(str(tmp_path)).progress == 27
  pathlib.Path(paths.progress).write_text("{\"ste")  # cut short by a kill
  assert run_directory.read(str(tmp_path)).progress is None


def test_time_before_the_loop_that_no_category_holds_is_start_up():
  clock = HandClock()
  run = goodput_lib.Goodput(clock=clock)
  clock.now += 4.0
  run.add("checkpoints", 1.5)  # a restore, timed on its own
  run.add_unaccounted("startup")
  assert run.seconds["startup"] == 2.5 and run.shares()["other"] == 0.0


def test_a_small_but_nonzero_category_still_shows_and_nothing_reads_zero():
  clock = HandClock()
  run = goodput_lib.Goodput(clock=clock)
  run.add("productive", 99.0)
  run.add("redone", 0.2)  # one step done again
  run.add("checkpoints", 0.8)
  clock.now += 100.0
  assert run.line() == "goodput 99%: checkpoints 1%, redone steps <1%"
