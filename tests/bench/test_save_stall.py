"""bench/save_stall.py: the stall arithmetic on hand-made step times, and its page."""

import pathlib
import sys

import pytest

BENCH = pathlib.Path(__file__).resolve().parents[2] / "bench"
sys.path.insert(0, str(BENCH))

import save_stall  # pylint: disable=wrong-import-position


def test_a_save_stalls_its_step_and_the_next_ones_beyond_the_median_clean_step():
  # Step 1 compiles (never a reference); clean steps take 1 s; step 4 saves.
  steps = [9.0, 1.0, 1.0, 3.5, 1.5, 1.0, 1.0, 1.0]
  assert save_stall.stalls(steps, [4], after=1) == [pytest.approx(2.5 + 0.5)]
  assert save_stall.stalls(steps, [4], after=0) == [pytest.approx(2.5)]
  # A save at the last step counts only the steps there are.
  assert save_stall.stalls(steps, [8], after=2) == [0.0]


def test_the_page_names_its_command_and_the_ratio():
  mode = {"median_step_s": 0.5, "save_call_s": 0.1, "stall_per_save_s": 0.2}
  record = {"parameters": 5e7, "train_state_mb": 200.0, "cores": 2, "load_average": 1.0,
            "flags": {"batch_size": 8, "length": 16, "save_every": 6, "rounds": 2, "after": 2},
            "summary": {"synchronous": {**mode, "stall_per_save_s": 0.8},
                        "asynchronous": mode, "stall_ratio_async_over_sync": 0.25}}
  page = save_stall.readme(record)
  assert "python bench/save_stall.py --output=docs/results/save_stall" in page
  assert "| synchronous | 0.500 | 0.100 | 0.800 |" in page
  assert "blocks 1.00x as long" in page and "its stall is 0.25x" in page
