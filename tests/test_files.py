"""vmsst/base/files.py on local paths, and the guard that keeps every other module going through it.

A pod keeps model directories, data, vocabularies and outputs in a bucket;
`open`, `os.path`, `pathlib` or `np.save` on such a path either fails
(`os.listdir` finds nothing) or writes into a local folder named `gs:`. The
guard parses every module of vmsst/ and tasks/ (the `ast` module: a comment or
a string naming `open(` is no call) and fails on any such call outside
vmsst/base/files.py unless the allow-list below names it with the reason its path is
provably local.
"""

import ast
import gzip
import os
import pathlib

import numpy as np
import pytest

from vmsst.base import files

ROOT = pathlib.Path(__file__).resolve().parents[1]
PACKAGES = ("vmsst", "tasks")
HOME = "vmsst/base/files.py"

# os.path functions that touch the file system (join/dirname/basename only
# compute strings, and `files.join` / `files.parent` keep a gs:// scheme).
OS_PATH = {"exists", "isdir", "isfile", "abspath", "realpath", "getsize", "getmtime", "lexists"}
OS = {"makedirs", "mkdir", "listdir", "scandir", "walk", "remove", "unlink", "rename", "replace",
      "rmdir", "removedirs", "stat"}
OPENERS = {"io", "gzip", "bz2", "lzma", "codecs", "tarfile", "zipfile"}
NUMPY = {"np", "numpy"}
NUMPY_IO = {"save", "savez", "savez_compressed", "savetxt", "load", "loadtxt", "genfromtxt",
            "fromfile", "memmap"}
MODULES = {"glob", "shutil", "pathlib"}
IMPORTED_MODULES = {"glob", "shutil"}  # pathlib only when called: its annotations touch nothing

# (module, enclosing function or class.method, kind) → why the path is provably local.
ALLOWED = {
    ("vmsst/base/console.py", "<module>", "import glob"): "for has_accelerator's /dev patterns",
    ("vmsst/base/cli.py", "<module>", "os.path.abspath"):
        "CHECKOUT: this package's own location (__file__)",
    ("vmsst/base/console.py", "has_accelerator", "glob.glob"): "device files under /dev",
    ("vmsst/base/console.py", "_stderr_muted", "open"): "os.devnull",
    ("vmsst/evaluation/plots.py", "save", "savefig"):
        "writes the local file files.local_output gives, which uploads it to a bucket path",
    ("vmsst/base/gin_utils.py", "_repository_roots", "os.path.isfile"):
        "finds the checkout around a gin file on this disk (gin reads a gs:// one itself, "
        "and isfile is False for it)",
    ("vmsst/base/gin_utils.py", "_repository_roots", "pathlib.Path"):
        "only for files isfile found on this disk, and this package's own __file__",
}
# Whole modules that work on the local disk only, and say so to the user.
ALLOWED_MODULES = {
    "tasks/sources/opus_fetch.py": "opustools downloads and zipfile extracts into a local "
                                   "directory; the command (tasks/opus_download.py) refuses a "
                                   "gs:// --output with how to copy it to the bucket",
}


def _dotted(node: ast.AST) -> str:
  """`os.path.exists` for the expression `os.path.exists` (empty for anything else)."""
  if isinstance(node, ast.Name):
    return node.id
  if isinstance(node, ast.Attribute):
    base = _dotted(node.value)
    return f"{base}.{node.attr}" if base else ""
  return ""


def access_kind(name: str, pathlib_names: set[str]) -> str | None:
  """What file-system access a dotted name is (`open`, `os.path.exists`, `np.save`, ...), or None."""
  parts = name.split(".")
  if name == "open" or (len(parts) == 2 and parts[0] in OPENERS and parts[1] == "open"):
    return name
  if len(parts) == 3 and parts[:2] == ["os", "path"] and parts[2] in OS_PATH:
    return name
  if len(parts) == 2 and parts[0] == "os" and parts[1] in OS:
    return name
  if len(parts) == 2 and parts[0] in NUMPY and parts[1] in NUMPY_IO:
    return f"np.{parts[1]}"
  if (parts[0] in MODULES and len(parts) > 1) or parts[0] in pathlib_names:
    return name
  if name.startswith("tf.io.gfile."):
    return name
  if len(parts) > 1 and parts[-1] == "savefig":  # matplotlib: local disk only (plots.save)
    return "savefig"
  return None


def _imports(tree: ast.Module) -> tuple[list[tuple[int, str]], set[str]]:
  """Imports of glob / shutil / pathlib (each a finding) and the names bound from pathlib."""
  found, pathlib_names = [], set()
  for node in ast.walk(tree):
    if isinstance(node, ast.Import):
      found += [(node.lineno, f"import {a.name}") for a in node.names
                if a.name.split(".")[0] in IMPORTED_MODULES]
    elif isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] in MODULES:
      if node.module in IMPORTED_MODULES:
        found.append((node.lineno, f"from {node.module} import"))
      if node.module == "pathlib":
        pathlib_names |= {a.asname or a.name for a in node.names}
  return found, pathlib_names


class _Scope(ast.NodeVisitor):
  """Each use of a file-system function, called or passed on (`opener = gzip.open if gz else
  open`), with the function (or class.method) around it; annotations are no use."""

  def __init__(self, pathlib_names):
    self.stack, self.found, self.pathlib_names = [], [], pathlib_names

  def _enter(self, node):
    self.stack.append(node.name)
    for field in ("decorator_list", "bases", "keywords", "body"):
      for child in getattr(node, field, ()):
        self.visit(child)
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
      for default in [*node.args.defaults, *node.args.kw_defaults]:
        if default is not None:
          self.visit(default)
    self.stack.pop()

  visit_FunctionDef = visit_AsyncFunctionDef = visit_ClassDef = _enter

  def visit_AnnAssign(self, node):
    if node.value is not None:
      self.visit(node.value)

  def visit_Call(self, node):
    self.called = node.func
    self.generic_visit(node)

  def _name(self, node):
    kind = isinstance(node.ctx, ast.Load) and access_kind(_dotted(node), self.pathlib_names)
    # pathlib only when called: `Path = str | pathlib.Path` (a type) touches nothing.
    if kind and kind.split(".")[0] in {"pathlib", *self.pathlib_names}:
      kind = kind if node is getattr(self, "called", None) else None
    if kind:
      self.found.append((node.lineno, ".".join(self.stack) or "<module>", kind))
    elif not isinstance(node, ast.Name):
      self.generic_visit(node)

  visit_Name = visit_Attribute = _name


def findings(path: pathlib.Path) -> list[tuple[str, int, str, str]]:
  """(module, line, scope, kind) of every file-system access in one source file."""
  tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
  relative = path.relative_to(ROOT).as_posix()
  imports, pathlib_names = _imports(tree)
  scope = _Scope(pathlib_names)
  scope.visit(tree)
  return ([(relative, line, "<module>", kind) for line, kind in imports]
          + [(relative, line, where, kind) for line, where, kind in scope.found])


def all_findings() -> list[tuple[str, int, str, str]]:
  sources = sorted(p for package in PACKAGES for p in (ROOT / package).rglob("*.py"))
  return [f for p in sources if p.relative_to(ROOT).as_posix() != HOME for f in findings(p)]


def test_every_file_access_goes_through_vmsst_files():
  """Anything not allow-listed is a user's path handled by a library that breaks on gs://."""
  bad = [f"{module}:{line} {kind} in {where}" for module, line, where, kind in all_findings()
         if (module, where, kind) not in ALLOWED and module not in ALLOWED_MODULES]
  assert not bad, ("use vmsst.base.files (local and gs:// alike) or allow-list with the reason the "
                   "path is provably local:\n" + "\n".join(bad))


def test_every_allowed_entry_is_still_there_and_has_a_reason():
  """A stale allow-list entry would quietly allow the next such call in that function."""
  found = all_findings()
  present = {(module, where, kind) for module, _, where, kind in found}
  assert sorted(set(ALLOWED) - present) == []
  assert sorted(set(ALLOWED_MODULES) - {module for module, *_ in found}) == []
  assert all(reason.strip() for reason in [*ALLOWED.values(), *ALLOWED_MODULES.values()])


def test_the_guard_sees_what_it_should(tmp_path):
  """Calls are found through aliases and nesting; strings and comments are not calls."""
  source = tmp_path / "probe.py"
  source.write_text(
      "import shutil\nfrom pathlib import Path as P\nimport numpy as np\nimport os\n"
      "Alias = str | P\n"
      "# open(x)\ns = 'os.listdir(d)'\n"
      "class A:\n  def f(self, d: P) -> P:\n    return P(d), np.savez(d), os.path.exists(d)\n"
      "def g(d, gz):\n  opener = gzip.open if gz else open\n  with opener(d) as f:\n"
      "    return f.read()\n", encoding="utf-8")
  tree = ast.parse(source.read_text())
  imports, names = _imports(tree)
  scope = _Scope(names)
  scope.visit(tree)
  assert [kind for _, kind in imports] == ["import shutil"]
  assert [(where, kind) for _, where, kind in scope.found] == [
      ("A.f", "P"), ("A.f", "np.savez"), ("A.f", "os.path.exists"), ("g", "gzip.open"),
      ("g", "open")]


# vmsst/base/files.py itself, on local paths (the bucket side: tests/gcs/test_gcs_commands.py).

def test_bucket_paths_keep_their_scheme():
  assert files.join("gs://b/run", "ckpt", "1") == "gs://b/run/ckpt/1"
  assert files.parent("gs://b/run/config.gin") == "gs://b/run"
  assert files.parent("gs://b/run/") == "gs://b"
  assert files.name("gs://b/run/model.json") == "model.json"
  assert files.abspath("gs://b/run") == "gs://b/run"
  assert files.is_remote("gs://b") and not files.is_remote("gsx/b")


def test_local_paths_behave_as_os_path(tmp_path, monkeypatch):
  monkeypatch.chdir(tmp_path)
  assert files.abspath("run") == os.path.join(str(tmp_path), "run")
  assert files.join("a", "b") == os.path.join("a", "b")
  assert files.parent("a/b/c.txt") == "a/b"
  assert files.name("a/b/c.txt") == "c.txt"


def test_write_read_list_glob_and_remove(tmp_path):
  files.write_text(tmp_path / "d" / "x.txt", "héllo\n")
  files.write_bytes(tmp_path / "d" / "y.bin", b"\x00\x01")
  files.makedirs(tmp_path / "d" / "sub")
  assert files.read_text(tmp_path / "d" / "x.txt") == "héllo\n"
  assert files.read_bytes(tmp_path / "d" / "y.bin") == b"\x00\x01"
  assert files.listdir(tmp_path / "d") == ["sub", "x.txt", "y.bin"]
  assert files.glob(str(tmp_path / "d" / "*.txt")) == [str(tmp_path / "d" / "x.txt")]
  assert files.isfile(tmp_path / "d" / "x.txt") and not files.isfile(tmp_path / "d" / "sub")
  assert files.isdir(tmp_path / "d" / "sub") and files.size(tmp_path / "d" / "y.bin") == 2
  files.remove(tmp_path / "d" / "x.txt")
  files.remove(tmp_path / "d" / "x.txt")  # absent: nothing
  assert not files.exists(tmp_path / "d" / "x.txt")
  files.rmtree(tmp_path / "d")
  assert not files.exists(tmp_path / "d")


def test_copytree_copy_and_rename(tmp_path):
  files.write_text(tmp_path / "src" / "a.txt", "a")
  files.write_text(tmp_path / "src" / "deep" / "b.txt", "b")
  files.copytree(tmp_path / "src", tmp_path / "dst")
  assert files.read_text(tmp_path / "dst" / "deep" / "b.txt") == "b"
  assert [(os.path.relpath(root, tmp_path / "dst"), sorted(names))
          for root, _, names in files.walk(tmp_path / "dst")] == [(".", ["a.txt"]),
                                                                  ("deep", ["b.txt"])]
  files.copy(tmp_path / "dst" / "a.txt", tmp_path / "c.txt")
  files.rename(tmp_path / "dst", tmp_path / "moved")
  assert files.read_text(tmp_path / "moved" / "a.txt") == files.read_text(tmp_path / "c.txt")
  assert not files.exists(tmp_path / "dst")


def test_npy_and_npz_round_trip(tmp_path):
  array = np.arange(12, dtype=np.float32).reshape(3, 4)
  files.save_npy(tmp_path / "out" / "x.npy", array)
  np.testing.assert_array_equal(files.load_npy(tmp_path / "out" / "x.npy"), array)
  mapped = files.load_npy(tmp_path / "out" / "x.npy", mmap=True)
  assert isinstance(mapped, np.memmap)
  np.testing.assert_array_equal(mapped, array)
  files.save_npz(tmp_path / "y.npz", a=array, b=np.array([1, 2]))
  loaded = files.load_npz(tmp_path / "y.npz")
  np.testing.assert_array_equal(loaded["a"], array)
  assert loaded["b"].tolist() == [1, 2]


def test_gz_text_is_read_and_written_transparently(tmp_path):
  with files.open_text(tmp_path / "x.txt.gz", "w") as f:
    f.write("ein\nzwei\n")
  with gzip.open(tmp_path / "x.txt.gz", "rt", encoding="utf-8") as f:
    assert f.read() == "ein\nzwei\n"
  with files.open_text(tmp_path / "x.txt.gz") as f:
    assert f.read().splitlines() == ["ein", "zwei"]


def test_local_copy_and_output_are_the_path_itself_when_local(tmp_path):
  with files.local_copy(tmp_path / "a") as local:
    assert local == str(tmp_path / "a")
  with files.local_output(tmp_path / "dir", directory=True) as local:
    assert local == str(tmp_path / "dir") and os.path.isdir(local)


@pytest.mark.parametrize("mode", ["w", "a"])
def test_open_text_modes(tmp_path, mode):
  with files.open_text(tmp_path / "x.txt", mode, newline="") as f:
    f.write("a\r\nb")
  assert files.read_bytes(tmp_path / "x.txt") == b"a\r\nb"
