"""The one home for file access: every path a user gives may be local or `gs://`.

Pods keep everything in Cloud Storage (model directories, data, vocabularies,
outputs, caches), so nothing outside this module applies `open`, `os.path`,
`os.makedirs`, `os.listdir`, `glob`, `shutil`, `pathlib.Path` or
`np.save`/`np.load` to such a path (tests/test_files.py enforces it, with an
allow-list for what is provably local, such as the checkout's own gin files).

Built on `etils.epath`, not `tf.io.gfile` directly, because:
- it needs no TensorFlow: `train` runs where TensorFlow is absent (an
  accelerator image), and the Python API's `import vmsst` stays light;
- it is what orbax uses for checkpoint directories, so a checkpoint and the
  files beside it take the same route;
- where TensorFlow is installed it routes `gs://` through `tf.io.gfile`, the
  same client seqio and TFDS read data with (one set of credentials, one
  endpoint, one proxy for tests), and through fsspec/gcsfs where it is not.
Local paths go to the operating system directly (no TensorFlow import).

`pathlib` collapses `gs://b/x` to `gs:/b/x` and `os.path.abspath` prefixes it
with the working directory: both write into a local folder named `gs:`,
silently. `join`, `parent`, `name` and `abspath` here keep the scheme.
"""

import bz2
import contextlib
import gzip
import io
import os
import posixpath
import shutil
import tempfile
from typing import IO, Iterator

import numpy as np
from etils import epath

PathLike = str | os.PathLike

REMOTE_SCHEMES = ("gs://", "s3://")


def is_remote(path: PathLike) -> bool:
  """True for a bucket path (`gs://…`), where only this module may touch it."""
  return os.fspath(path).startswith(REMOTE_SCHEMES)


def as_path(path: PathLike, *parts: str) -> epath.Path:
  """An `epath.Path` for `path` joined with `parts` (local or bucket): pathlib's API, gs:// kept."""
  return epath.Path(join(path, *parts) if parts else os.fspath(path))


def join(path: PathLike, *parts: str) -> str:
  """`os.path.join` that keeps `gs://` (a bucket path joins with '/')."""
  base = os.fspath(path)
  return posixpath.join(base, *parts) if is_remote(base) else os.path.join(base, *parts)


def parent(path: PathLike) -> str:
  """The directory holding `path`; `gs://b/x/y` → `gs://b/x`; `/` → `/`."""
  base = os.fspath(path).rstrip("/") or os.fspath(path)
  return posixpath.dirname(base) if is_remote(base) else os.path.dirname(base)


def name(path: PathLike) -> str:
  """The last component of `path` (its file name)."""
  return posixpath.basename(os.fspath(path).rstrip("/"))


def abspath(path: PathLike) -> str:
  """A local path made absolute; a bucket path unchanged (never `<cwd>/gs:/…`)."""
  path = os.fspath(path)
  return path if is_remote(path) else os.path.abspath(os.path.expanduser(path))


def resolve(path: PathLike) -> str:
  """A local path made absolute with its links resolved (one key per directory); a bucket path unchanged."""
  path = os.fspath(path)
  return path if is_remote(path) else os.path.realpath(os.path.expanduser(path))


def exists(path: PathLike) -> bool:
  """As `os.path.exists` (an empty path is none, not the working directory `epath` makes it)."""
  return bool(os.fspath(path)) and as_path(path).exists()


def isdir(path: PathLike) -> bool:
  return bool(os.fspath(path)) and as_path(path).is_dir()


def isfile(path: PathLike) -> bool:
  if not is_remote(path):
    return os.path.isfile(path)
  path = as_path(path)
  return path.exists() and not path.is_dir()


def listdir(path: PathLike) -> list[str]:
  """Sorted names in a directory (not paths); a bucket prefix's 'subdirectories' included."""
  return sorted(child.name for child in as_path(path).iterdir())


def glob(pattern: PathLike) -> list[str]:
  """Sorted paths matching a shell pattern in its last components (local or bucket)."""
  pattern = os.fspath(pattern)
  if is_remote(pattern):
    base, rest = _split_pattern(pattern)
    return sorted(os.fspath(p) for p in as_path(base).glob(rest))
  import glob as glob_lib  # pylint: disable=import-outside-toplevel
  return sorted(glob_lib.glob(os.path.expanduser(pattern)))


def _split_pattern(pattern: str) -> tuple[str, str]:
  """`gs://b/dir/*.txt` → (`gs://b/dir`, `*.txt`): the fixed prefix and the pattern."""
  parts = pattern.split("/")
  fixed = next((i for i, part in enumerate(parts) if any(c in part for c in "*?[")), len(parts))
  return "/".join(parts[:fixed]), "/".join(parts[fixed:])


def makedirs(path: PathLike) -> None:
  """Creates `path` and its parents; nothing if it exists."""
  as_path(path).mkdir(parents=True, exist_ok=True)


def open(path: PathLike, mode: str = "r", *, newline: str | None = None) -> IO:  # pylint: disable=redefined-builtin
  """Opens a local or bucket file; text is UTF-8. Writing to a bucket commits at close.

  A bucket file is a full `io` object (buffered, `writelines`, line iteration,
  text decoding) over the client's file, which has only read/write/close.
  """
  if not is_remote(path):
    return io.open(os.fspath(path), mode, encoding=None if "b" in mode else "utf-8",
                   newline=None if "b" in mode else newline)
  kind = mode.replace("b", "").replace("t", "")
  raw = _BucketFile(as_path(path), kind)
  buffered = io.BufferedReader(raw) if kind == "r" else io.BufferedWriter(raw)
  return buffered if "b" in mode else io.TextIOWrapper(buffered, encoding="utf-8",
                                                      newline=newline)


class _BucketFile(io.RawIOBase):
  """The raw `io` stream of one bucket object, over the client epath opens."""

  def __init__(self, path: epath.Path, kind: str):
    super().__init__()
    if kind == "r" and not path.exists():  # TensorFlow's client would fail only at the read
      raise FileNotFoundError(f"No such file: {path}")
    self._kind, opened = kind, path.open(kind + "b")
    if not hasattr(opened, "read"):  # etils' TensorFlow backend: a context manager of a GFile
      self._context, opened = opened, opened.__enter__()
    self._file = opened

  def readable(self) -> bool:
    return self._kind == "r"

  def writable(self) -> bool:
    return self._kind != "r"

  def readinto(self, buffer) -> int:
    data = self._file.read(len(buffer))
    buffer[:len(data)] = data
    return len(data)

  def readall(self) -> bytes:
    return self._file.read()  # one call, not one per 8 KiB

  def write(self, data) -> int:
    self._file.write(bytes(data))
    return len(data)

  def close(self) -> None:
    if not self.closed:
      context = getattr(self, "_context", None)
      if context is not None:
        context.__exit__(None, None, None)
      else:
        self._file.close()
    super().close()


def open_compressed(path: PathLike, mode: str = "rb") -> IO[bytes]:
  """A binary file, (de)compressed when its name ends in `.gz` or `.bz2` (read or write)."""
  path, mode = os.fspath(path), mode[0] + "b"
  if path.endswith(".gz"):
    compressed = gzip.GzipFile(fileobj=open(path, mode), mode=mode)
    # Closed with the gzip stream (as when gzip opens a file name itself): a bucket
    # object is written at that close.
    compressed.myfileobj = compressed.fileobj
    return compressed
  if path.endswith(".bz2"):
    compressed = bz2.BZ2File(open(path, mode), mode)
    compressed._closefp = True  # pylint: disable=protected-access  # as gzip's myfileobj above
    return compressed
  return open(path, mode)


def open_text(path: PathLike, mode: str = "r", *, newline: str | None = None) -> IO[str]:
  """A UTF-8 text file, gunzipped when its name ends in `.gz` (read and write)."""
  path = os.fspath(path)
  if path.endswith((".gz", ".bz2")):
    return io.TextIOWrapper(open_compressed(path, mode), encoding="utf-8", newline=newline)
  return open(path, mode, newline=newline)


def read_text(path: PathLike) -> str:
  with open(path) as f:
    return f.read()


def read_bytes(path: PathLike) -> bytes:
  with open(path, "rb") as f:
    return f.read()


def write_text(path: PathLike, text: str) -> None:
  """Writes `text`, creating the parent directory."""
  makedirs(parent(path) or ".")
  with open(path, "w") as f:
    f.write(text)


def write_bytes(path: PathLike, data: bytes) -> None:
  makedirs(parent(path) or ".")
  with open(path, "wb") as f:
    f.write(data)


def copy(source: PathLike, destination: PathLike, *, overwrite: bool = True) -> None:
  """Copies one file (local ↔ bucket in any direction)."""
  if is_remote(source) == is_remote(destination):
    as_path(source).copy(as_path(destination), overwrite=overwrite)
    return
  with open(source, "rb") as src, open(destination, "wb") as dst:
    shutil.copyfileobj(src, dst, length=16 << 20)


def copytree(source: PathLike, destination: PathLike) -> None:
  """Copies a directory tree file by file (local ↔ bucket in any direction)."""
  for root, _, names in walk(source):
    relative = os.fspath(root)[len(os.fspath(source).rstrip("/")):].lstrip("/")
    target = join(destination, relative) if relative else os.fspath(destination)
    makedirs(target)
    for file_name in names:
      copy(join(root, file_name), join(target, file_name))


def walk(top: PathLike) -> Iterator[tuple[str, list[str], list[str]]]:
  """(directory, subdirectory names, file names) top-down, as `os.walk`."""
  for root, dirs, names in as_path(top).walk():
    yield os.fspath(root), list(dirs), list(names)


def find(top: PathLike) -> list[str]:
  """Every file below `top` (recursively), sorted: `rglob` for local and bucket paths alike.

  epath refuses `**` patterns (thousands of requests on a bucket); one walk lists a prefix.
  """
  return sorted(join(root, name) for root, _, names in walk(top) for name in names)


def rename(source: PathLike, destination: PathLike) -> None:
  """Moves a file or directory; an existing destination file is replaced (as `os.replace`).

  A bucket has no directories and no atomic rename: a bucket 'directory' is
  copied object by object, then removed; a bucket file is copied over the
  destination (each object write is atomic), then removed.
  """
  if is_remote(source) and isdir(source):
    copytree(source, destination)
    rmtree(source)
    return
  as_path(source).replace(as_path(destination))


def remove(path: PathLike) -> None:
  """Removes a file; nothing if it is absent."""
  path = as_path(path)
  if path.exists():
    path.unlink()


def rmtree(path: PathLike) -> None:
  """Removes a directory tree; nothing if it is absent."""
  path = as_path(path)
  if path.exists():
    path.rmtree()


def size(path: PathLike) -> int:
  return as_path(path).stat().length


def save_npy(path: PathLike, array: np.ndarray) -> None:
  """`np.save` to a local or bucket path (the bytes are written through this module)."""
  buffer = io.BytesIO()
  np.save(buffer, array, allow_pickle=False)
  write_bytes(path, buffer.getvalue())


def load_npy(path: PathLike, *, mmap: bool = False) -> np.ndarray:
  """`np.load` of one array; `mmap` maps a local file (a bucket file is read whole)."""
  if mmap and not is_remote(path):
    return np.load(os.fspath(path), mmap_mode="r", allow_pickle=False)
  return np.load(io.BytesIO(read_bytes(path)), allow_pickle=False)


def save_npz(path: PathLike, **arrays: np.ndarray) -> None:
  """`np.savez` to a local or bucket path."""
  buffer = io.BytesIO()
  np.savez(buffer, **arrays)
  write_bytes(path, buffer.getvalue())


def save_npz_compressed(path: PathLike, **arrays: np.ndarray) -> None:
  """`np.savez_compressed` to a local or bucket path."""
  buffer = io.BytesIO()
  np.savez_compressed(buffer, **arrays)
  write_bytes(path, buffer.getvalue())


def load_npz(path: PathLike) -> dict[str, np.ndarray]:
  """Every array of an `.npz` (no pickle)."""
  with np.load(io.BytesIO(read_bytes(path)), allow_pickle=False) as data:
    return {key: data[key] for key in data.files}


@contextlib.contextmanager
def local_copy(path: PathLike) -> Iterator[str]:
  """A local path holding `path`'s content, for libraries that read only the local disk.

  A local path is given as it is; a bucket file or directory is copied into a
  temporary directory removed on exit.
  """
  if not is_remote(path):
    yield os.fspath(path)
    return
  with tempfile.TemporaryDirectory(prefix="vmsst-") as tmp:
    local = os.path.join(tmp, name(path))
    if isdir(path):
      copytree(path, local)
    else:
      copy(path, local)
    yield local


@contextlib.contextmanager
def local_output(path: PathLike, *, directory: bool = False) -> Iterator[str]:
  """A local path to write into, uploaded to `path` on success (a bucket) or `path` itself.

  For libraries that write only to the local disk (TensorFlow's SavedModel
  writer handles gs:// itself; safetensors, faiss and matplotlib do not).
  """
  if not is_remote(path):
    if directory:
      makedirs(path)
    yield os.fspath(path)
    return
  with tempfile.TemporaryDirectory(prefix="vmsst-") as tmp:
    local = os.path.join(tmp, name(path))
    if directory:
      os.makedirs(local)
    yield local
    if directory:
      copytree(local, path)
    else:
      copy(local, path)
