"""The packages' import graph: no cycle, and the data layer never imports the model layer.

Checked by the workspace's shared tool (/work/shared/tools/import_graph.py),
which counts module- and function-level imports alike. It names the data
layer's modules by their folder, `tasks`, so the code's own imports of them
(`vmsst_tasks.registry`, the installed name) are not edges there; the second
test runs it on a view whose folder is named vmsst_tasks, where they are.
"""

import os
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


@pytest.mark.skipif(not TOOL.exists(), reason=f"{TOOL} is not in this checkout's workspace")
def test_no_cycle_through_the_installed_name_of_tasks(tmp_path):
  """vmsst -> vmsst_tasks edges counted: e.g. registry -> opus_paper -> registry would show."""
  os.symlink(ROOT / "vmsst", tmp_path / "vmsst")
  os.symlink(ROOT / "tasks", tmp_path / "vmsst_tasks")
  result = subprocess.run([sys.executable, str(TOOL), str(tmp_path), "vmsst", "vmsst_tasks"],
                          capture_output=True, text=True, check=False)
  assert result.returncode == 0 and " 0 cycles" in result.stdout, result.stdout + result.stderr
  plain = subprocess.run([sys.executable, str(TOOL), str(ROOT), "vmsst", "tasks"],
                         capture_output=True, text=True, check=False)
  edges = lambda out: int(out.split(" modules, ")[1].split(" imports")[0])
  assert edges(result.stdout) > edges(plain.stdout)  # the vmsst <-> vmsst_tasks imports counted


# Model-layer homes the shared tool's list predates (it still names their old module,
# vmsst.inference): the data side must not import them either.
MODEL_LAYER_SINCE = ("vmsst.encoding", "vmsst.mining")


def test_the_data_side_imports_no_encoding_or_mining():
  import ast  # pylint: disable=import-outside-toplevel
  found = []
  for path in sorted((ROOT / "tasks").rglob("*.py")):
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
      names = ([a.name for a in node.names] if isinstance(node, ast.Import)
               else [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
      found += [f"{path.relative_to(ROOT)}: {n}" for n in names if n.startswith(MODEL_LAYER_SINCE)]
  assert not found, found
