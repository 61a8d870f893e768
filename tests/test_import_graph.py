"""The packages' import graph: no cycle, and the data layer never imports the model layer.

Checked by the workspace's shared tool (/work/shared/tools/import_graph.py),
which counts module- and function-level imports alike.
"""

import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
TOOL = pathlib.Path("/work/shared/tools/import_graph.py")


@pytest.mark.skipif(not TOOL.exists(), reason=f"{TOOL} is not in this checkout's workspace")
def test_no_import_cycle_and_no_tasks_to_model_layer_import():
  result = subprocess.run([sys.executable, str(TOOL), str(ROOT), "vmsst", "tasks"],
                          capture_output=True, text=True, check=False)
  assert result.returncode == 0, result.stdout + result.stderr
