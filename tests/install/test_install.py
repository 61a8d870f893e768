"""The installed package: tasks/ goes in as `vmsst_tasks`, never as a generic `tasks`.

Why: a top-level `tasks` in site-packages would shadow another project's own
`tasks` package (or be shadowed by it). Subprocesses run from a directory
outside the repository, as another project would, against this venv's install.
"""

import pathlib
import re
import shutil
import subprocess
import sys
import zipfile

REPO = pathlib.Path(__file__).resolve().parents[2]


def _python(code: str, cwd: pathlib.Path) -> str:
  done = subprocess.run([sys.executable, "-c", code], cwd=cwd, capture_output=True, text=True,
                        check=False)
  assert done.returncode == 0, done.stderr
  return done.stdout.strip()


def test_import_tasks_from_another_directory_is_not_ours(tmp_path):
  code = "import importlib.util as u; s = u.find_spec('tasks'); print(s and s.origin)"
  assert _python(code, tmp_path) == "None"


def test_another_projects_tasks_package_and_ours_live_side_by_side(tmp_path):
  (tmp_path / "tasks").mkdir()
  (tmp_path / "tasks" / "__init__.py").write_text("MINE = True\n")
  code = ("import tasks, vmsst_tasks.sources.pair_readers, vmsst.vocabulary; "
          "print(tasks.MINE, vmsst_tasks.sources.pair_readers.__file__)")
  assert _python(code, tmp_path) == f"True {REPO / 'tasks' / 'sources' / 'pair_readers.py'}"


def test_no_module_imports_the_bare_tasks_name():
  bare = re.compile(r"^\s*(from tasks[. ]|import tasks\b)|-m tasks\.", re.M)
  offenders = [p.relative_to(REPO).as_posix()
               for d in ("vmsst", "tasks", "bench", "tests", "launch", "gin", "docs")
               for p in sorted((REPO / d).rglob("*")) if p.suffix in (".py", ".sh", ".gin", ".md")
               and bare.search(p.read_text(encoding="utf-8"))]
  offenders += [name for name in ("README.md", "WORKSPACE.md", "Makefile")
                if bare.search((REPO / name).read_text(encoding="utf-8"))]
  assert not offenders


def test_the_wheel_carries_every_module_of_vmsst_and_tasks(tmp_path):
  """A wheel, an sdist or Dataflow's `--setup_file=./setup.py` carry only the packages setup.py
  lists, where the editable install finds any folder: a package it misses fails on a pod or a
  Beam worker, not here."""
  source = tmp_path / "source"  # a copy: an in-tree build would reuse build/'s earlier files
  for name in ("vmsst", "tasks"):
    shutil.copytree(REPO / name, source / name, ignore=shutil.ignore_patterns("__pycache__"))
  shutil.copy(REPO / "setup.py", source)
  subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-build-isolation", "--no-deps",
                  "--quiet", "--wheel-dir", str(tmp_path), str(source)], check=True, cwd=tmp_path)
  wheel, = tmp_path.glob("vmsst-*.whl")
  carried = {name for name in zipfile.ZipFile(wheel).namelist() if name.endswith(".py")}
  installed_as = {"vmsst": "vmsst", "tasks": "vmsst_tasks"}
  modules = {f"{installed_as[folder]}/{path.relative_to(REPO / folder).as_posix()}"
             for folder in installed_as for path in (REPO / folder).rglob("*.py")
             if "__pycache__" not in path.parts}
  assert modules - carried == set()
