"""The installed package: tasks/ goes in as `vmsst_tasks`, never as a generic `tasks`.

Why: a top-level `tasks` in site-packages would shadow another project's own
`tasks` package (or be shadowed by it). Subprocesses run from a directory
outside the repository, as another project would, against this venv's install.
"""

import pathlib
import re
import subprocess
import sys

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
