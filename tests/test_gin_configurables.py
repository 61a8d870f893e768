"""vmsst/gin_configurables.py is the one place that makes objects bindable from gin files.

Every `@gin.configurable` outside the training loop must exist after importing
that module alone (in a fresh process), so no configurable depends on which
other module happened to be imported first; and gin files import nothing else.
"""

import ast
import json
import pathlib
import subprocess
import sys

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


def decorated_configurables() -> set[str]:
  """module.name of every `@gin.configurable` in vmsst/ and tasks/, vmsst/training/ excepted."""
  found = set()
  for path in sorted([*(ROOT / "vmsst").rglob("*.py"), *(ROOT / "tasks").rglob("*.py")]):
    if (ROOT / "vmsst" / "train") in path.parents:
      continue  # train's own configurables: entrypoints import vmsst.training.loop itself
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
      if isinstance(node, (ast.FunctionDef, ast.ClassDef)) and any(
          _is_configurable(d) for d in node.decorator_list):
        found.add(f"{_module_name(path)}.{node.name}")
  return found


def test_importing_gin_configurables_alone_registers_every_configurable():
  listing = ("import json, gin.config, vmsst.gin_configurables; "
             "print(json.dumps(sorted(k for k, _ in gin.config._REGISTRY.items())))")
  result = subprocess.run([sys.executable, "-c", listing], cwd=ROOT, capture_output=True,
                          text=True, timeout=300, check=True)
  registered = set(json.loads(result.stdout.strip().splitlines()[-1]))
  decorated = decorated_configurables()
  assert {"vmsst.teachers.cache.TeacherCache", "vmsst_tasks.registry.register_tasks",
          "vmsst_tasks.registry.register_families",
          "vmsst_tasks.registry.opus.opus_tasks"} <= decorated
  assert not decorated - registered, "not imported by vmsst/gin_configurables.py"


def test_gin_files_import_only_gin_configurables():
  imports = {f"{path.relative_to(ROOT)}: {line}"
             for path in sorted((ROOT / "gin").rglob("*.gin"))
             for line in path.read_text(encoding="utf-8").splitlines()
             if line.startswith(("import ", "from "))}
  assert {i for i in imports if not i.endswith(": import vmsst.gin_configurables")} == set()
