"""bench/accelerator.py --quick: runs on CPU without TensorFlow, seqio or gin, both tunings,
and times the sentence-transformers peer on the same device."""

import importlib.util
import json
import subprocess
import sys

import pytest

from vmsst_testing import ROOT

_BLOCK_AND_RUN = r"""
import runpy, sys

# Absent as on an accelerator image: `import` raises ModuleNotFoundError and
# importlib.util.find_spec answers None (transformers probes for TensorFlow so).
for name in ("tensorflow", "tensorflow_text", "seqio", "gin"):
  sys.modules[name] = None
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
  if importlib.util.find_spec("sentence_transformers") is None:  # make test-core-jax-next
    assert lines[-1]["sentence_transformers"] == "skipped" and lines[-1]["why"]
    return
  # The peer on the same device: sentence-transformers' MNRL step at matched bf16.
  (peer,) = [line for line in lines if line.get("peer") == "sentence_transformers"]
  assert peer["device"] == "cpu" and peer["pairs_per_s"] > 0 and peer["target"] == 1.5
  assert peer["contrastive_vs_peer"] == pytest.approx(rows[0]["examples_per_s"]
                                                      / peer["pairs_per_s"])
