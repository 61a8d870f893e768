"""bench/accelerator.py --quick: runs on CPU without TensorFlow, seqio or gin, both tunings."""

import json
import subprocess
import sys

import pytest

from vmsst_testing import ROOT

_BLOCK_AND_RUN = r"""
import importlib.abc, runpy, sys

class Block(importlib.abc.MetaPathFinder):
  def find_spec(self, name, path=None, target=None):
    if name.split(".")[0] in ("tensorflow", "tensorflow_text", "seqio", "gin"):
      raise ImportError(f"{name} is blocked in this test")

sys.meta_path.insert(0, Block())
sys.argv = ["bench/accelerator.py", "--quick", "--objectives=contrastive"]
runpy.run_path("bench/accelerator.py", run_name="__main__")
"""


@pytest.mark.slow
def test_quick_run_reports_both_tunings_without_tensorflow():
  result = subprocess.run([sys.executable, "-c", _BLOCK_AND_RUN], cwd=ROOT, capture_output=True,
                          text=True, timeout=600, check=False)
  assert result.returncode == 0, result.stderr[-3000:]
  lines = [json.loads(line) for line in result.stdout.splitlines() if line.startswith("{")]
  assert lines[0]["bf16_peak_tflops"] > 0
  rows = [line for line in lines if "xla_cpu_tuning" in line]
  assert [row["xla_cpu_tuning"] for row in rows] == [True, False]
  for row in rows:
    assert row["examples_per_s"] > 0 and 0 < row["mfu"] < 1 and row["memory_estimate_gib"] > 0
  # The same step either way (same masks; only bf16 summation order differs).
  assert rows[0]["loss"] == pytest.approx(rows[1]["loss"], rel=1e-2)
  assert any("tuning_on_over_off" in line for line in lines)
  assert lines[-1]["sentence_transformers"] == "skipped" and lines[-1]["why"]
