"""gin's home: vmsst/base/gin_utils.py (the run-file flags, the checks) and what run files can
name (vmsst/training/configurables.py).

Every `@gin.configurable` in vmsst/ and tasks/ must exist after
`vmsst.training.configurables.register()` alone (in a fresh process, so no configurable
depends on which other module happened to be imported first); modules that
use gin import it one way; run files import nothing; the flags come without
TensorFlow, JAX or the training loop.
"""

import ast
import json
import pathlib
import subprocess
import sys

import pytest

from vmsst.base import cli
from vmsst.base import gin_utils
from vmsst.training import configurables

ROOT = pathlib.Path(__file__).resolve().parents[1]


def _module_name(path: pathlib.Path) -> str:
  parts = list(path.relative_to(ROOT).with_suffix("").parts)
  if parts[-1] == "__init__":
    parts.pop()
  if parts[0] == "tasks":  # installed as vmsst_tasks (setup.py's package_dir)
    parts[0] = "vmsst_tasks"
  return ".".join(parts)


def _is_configurable(decorator: ast.expr) -> bool:
  target = decorator.func if isinstance(decorator, ast.Call) else decorator
  return (isinstance(target, ast.Attribute) and target.attr == "configurable"
          and isinstance(target.value, ast.Name) and target.value.id == "gin")


def _sources() -> list[pathlib.Path]:
  return sorted([*(ROOT / "vmsst").rglob("*.py"), *(ROOT / "tasks").rglob("*.py")])


def decorated_configurables() -> set[str]:
  """module.name of every `@gin.configurable` in vmsst/ and tasks/."""
  found = set()
  for path in _sources():
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
      if isinstance(node, (ast.FunctionDef, ast.ClassDef)) and any(
          _is_configurable(d) for d in node.decorator_list):
        found.add(f"{_module_name(path)}.{node.name}")
  return found


def test_registering_alone_registers_every_configurable():
  listing = ("import json, gin.config; from vmsst.training import configurables; "
             "configurables.register(); "
             "print(json.dumps(sorted(k for k, _ in gin.config._REGISTRY.items())))")
  result = subprocess.run([sys.executable, "-c", listing], cwd=ROOT, capture_output=True,
                          text=True, timeout=300, check=True)
  registered = set(json.loads(result.stdout.strip().splitlines()[-1]))
  decorated = decorated_configurables()
  assert {"TeacherCache", "register_families", "train", "opus_tasks"} <= {
      name.rsplit(".", 1)[-1] for name in decorated}
  assert not decorated - registered, "import their modules in vmsst/training/configurables.py"
  assert {"tasks.heldout.retrieval_sets", "vmsst.vocabulary.get_vocabulary"} <= registered


def test_importing_gin_utils_imports_nothing_above_the_base_layer():
  listing = ("import json, sys; from vmsst.base import gin_utils; gin_utils.define_flags(); "
             "print(json.dumps(sorted(m for m in sys.modules if m.startswith('vmsst') "
             "or m.split('.')[0] in ('tensorflow', 'jax', 'seqio'))))")
  result = subprocess.run([sys.executable, "-c", listing], cwd=ROOT, capture_output=True,
                          text=True, timeout=300, check=True)
  loaded = json.loads(result.stdout.strip().splitlines()[-1])
  assert set(loaded) <= {"vmsst", "vmsst.base", "vmsst.base.cli", "vmsst.base.console",
                         "vmsst.base.files", "vmsst.base.gin_utils", "vmsst.base.old_names"}, loaded


def test_modules_import_gin_one_way():
  """`from vmsst.base.gin_utils import gin`: the stand-in where gin-config is absent."""
  direct = []
  for path in _sources():
    if path == ROOT / "vmsst" / "base" / "gin_utils.py":
      continue
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
      if isinstance(node, ast.Import) and any(a.name == "gin" for a in node.names):
        direct.append(f"{path.relative_to(ROOT)}:{node.lineno}")
  assert direct == []


def test_run_files_import_nothing():
  imports = [f"{path.relative_to(ROOT)}: {line}"
             for path in sorted((ROOT / "gin").rglob("*.gin"))
             for line in path.read_text(encoding="utf-8").splitlines()
             if line.startswith(("import ", "from "))]
  assert imports == []


@pytest.mark.integration  # registering imports TensorFlow, which starts a process
def test_a_run_file_that_imports_a_missing_module_says_to_remove_the_line(tmp_path):
  run = tmp_path / "old.gin"
  run.write_text("import vmsst.gin_configurables\ninclude 'gin/runs/vmsst_cpu.gin'\n")
  with pytest.raises(cli.UserError, match="imports vmsst.gin_configurables.*remove it"):
    configurables.parse_gin([str(run)], [])


def test_the_run_file_flags_are_defined_once_without_tensorflow_jax_or_the_loop():
  listing = ("import json, sys; from absl import flags; from vmsst.base import gin_utils; "
             "assert gin_utils.define_flags() is gin_utils.define_flags(); "
             "print(json.dumps({'flags': sorted(f.name for f in "
             "flags.FLAGS.get_key_flags_for_module('vmsst.base.gin_utils')), 'heavy': sorted("
             "m for m in ('tensorflow', 'jax', 'seqio', 'vmsst.training.loop') if m in sys.modules)}))")
  done = subprocess.run([sys.executable, "-c", listing], cwd=ROOT, capture_output=True,
                        text=True, timeout=300, check=True)
  found = json.loads(done.stdout.strip().splitlines()[-1])
  assert found == {"flags": sorted(gin_utils.FLAG_NAMES), "heavy": []}


def test_check_gin_files_names_the_missing_run_file_and_the_fix(tmp_path):
  gin_utils.check_gin_files(["train", "--gin_file=gin/runs/vmsst_cpu.gin"])  # the checkout's
  with pytest.raises(cli.UserError, match="--gin_file=gin/runs/nope.gin not found.*gin_search_path"):
    gin_utils.check_gin_files(["train", "--gin_file", "gin/runs/nope.gin",
                               f"--gin_search_path={tmp_path}"])
  with pytest.raises(cli.UserError, match="give --gin_file=gin/runs/<run>.gin"):
    gin_utils.check_gin_files(["train"], required=True)
