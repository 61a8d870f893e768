"""The installed package: tasks/ goes in as `vmsst_tasks`, never as a generic `tasks`.

Why: a top-level `tasks` in site-packages would shadow another project's own
`tasks` package (or be shadowed by it). Subprocesses run from a directory
outside the repository, as another project would, against this venv's install.
"""

import importlib.util
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


def _install_script():
  spec = importlib.util.spec_from_file_location("install", REPO / "launch" / "install.py")
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module


def test_uv_gets_pips_settings_with_pips_precedence():
  """uv reads no pip.conf: the indexes, find-links and constraints pip would use reach it."""
  install = _install_script()
  listed = ("global.extra-index-url='https://a/simple https://b/simple'\n"
            "global.find-links='\\n/wheels\\n/more'\n:env:.index-url='https://mirror/simple'\n"
            "global.index-url='https://ignored/simple'\nglobal.constraint='/global.txt'\n"
            "install.constraint='/install.txt'\nglobal.cert='/ca.pem'\n")
  settings = install.pip_settings(listed)
  assert settings["cert"] == ["/ca.pem"]
  flags = install.uv_arguments(settings)
  pairs = list(zip(flags[::2], flags[1::2]))
  assert ("--index-strategy", "unsafe-best-match") in pairs and "--compile-bytecode" in flags
  assert [v for f, v in pairs if f == "--extra-index-url"] == ["https://a/simple", "https://b/simple"]
  assert [v for f, v in pairs if f == "--find-links"] == ["/wheels", "/more"]
  assert [v for f, v in pairs if f == "--index-url"] == ["https://mirror/simple"]  # PIP_INDEX_URL
  assert [v for f, v in pairs if f == "--constraint"] == ["/install.txt"]  # [install] over [global]


def test_pips_own_config_listing_parses(tmp_path):
  """The format pip prints today: a real `pip config list` over a config file and a variable."""
  (tmp_path / "pip.conf").write_text("[global]\nfind-links =\n    /a\n    /b\n"
                                     "[install]\nconstraint = /c.txt\n")
  env = {"PATH": "/usr/bin:/bin", "PIP_CONFIG_FILE": str(tmp_path / "pip.conf"),
         "PIP_EXTRA_INDEX_URL": "https://x/simple"}
  listed = subprocess.run([sys.executable, "-m", "pip", "config", "list"], env=env,
                          capture_output=True, text=True, check=True).stdout
  settings = _install_script().pip_settings(listed)
  assert settings["find-links"] == ["/a", "/b"] and settings["constraint"] == ["/c.txt"]
  assert settings["extra-index-url"] == ["https://x/simple"]
