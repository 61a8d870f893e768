"""What a process shows on its console: start-up probes and library chatter off, progress bars
out of log files.

A command calls `quiet_startup()` at the top of its module (before TensorFlow
or JAX load) and `quiet_logs()` runs under every command (`cli.user_errors`):
what a user acts on (progress, metrics, data counts, warnings) stays, probing
and per-save chatter go; `--verbosity` is absl's (-1: warnings only, 1:
debug, chatter included). The Python API calls `quiet_imports()`.
"""

import contextlib
import glob
import importlib.abc
import importlib.util
import logging as python_logging  # record levels (absl's constants differ)
import os
import sys

from absl import logging


# Device files of the accelerators JAX could use: NVIDIA GPUs, TPU VMs, AMD GPUs.
_ACCELERATOR_DEVICES = ("/dev/nvidia[0-9]*", "/dev/accel[0-9]*", "/dev/vfio/[0-9]*", "/dev/kfd")


def has_accelerator() -> bool:
  """Whether this machine shows an accelerator's device file (else JAX can only use the CPU)."""
  return any(glob.glob(pattern) for pattern in _ACCELERATOR_DEVICES)


def quiet_startup() -> None:
  """Start-up chatter off: CUDA/TPU probes without an accelerator, TensorFlow's load lines.

  Call before TensorFlow or JAX is imported (a command's `__main__`; the
  Python API through `vmsst.encoding.api`). Without an accelerator
  JAX_PLATFORMS=cpu stops JAX's "Unable to initialize backend 'tpu'" probe
  and cuInit error, and TF_CPP_MIN_LOG_LEVEL=3 TensorFlow's `failed call to
  cuInit` (TensorFlow only feeds data here); the lines TensorFlow's C++ prints
  while it loads (oneDNN, "Could not find cuda drivers", twice: two libraries)
  come before any setting applies, so its import runs with stderr muted.
  With an accelerator, or `--verbosity=1`, nothing changes. A variable the
  user set wins.
  """
  quiet_imports()


def quiet_imports() -> None:
  """quiet_startup's part for any process, the Python API's included (no tqdm change).

  Without an accelerator: JAX on the CPU (unless JAX_PLATFORMS is set),
  TensorFlow's C++ logging off and its import muted.
  """
  if has_accelerator():
    return
  os.environ.setdefault("JAX_PLATFORMS", "cpu")  # read when JAX first picks a backend
  os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
  verbose = any(arg in ("--verbosity=1", "-v=1") for arg in sys.argv)
  if not verbose and "tensorflow" not in sys.modules and not any(
      isinstance(finder, _MutedImport) for finder in sys.meta_path):
    sys.meta_path.insert(0, _MutedImport("tensorflow"))


_BARS_HIDDEN = False  # a command whose stderr is not a terminal (cli.run)


def hide_progress_in_logs(hidden: bool) -> None:
  """Whether this process's bars are hidden because its stderr is a file (cli.run decides)."""
  global _BARS_HIDDEN  # pylint: disable=global-statement
  _BARS_HIDDEN = hidden


def hide_progress(hidden: bool = False) -> bool:
  """tqdm's `disable=` for a bar: `hidden`, or always in a command whose stderr is a file.

  A log file would otherwise collect a bar's carriage-return frames, run
  together with the log's lines; metrics and counts are logged anyway. The
  Python API keeps its bars (show_progress_bar=True) wherever it runs.
  """
  return hidden or _BARS_HIDDEN


@contextlib.contextmanager
def _stderr_muted():
  """File descriptor 2 to /dev/null (C++ writes it directly, past sys.stderr)."""
  sys.stderr.flush()
  saved = os.dup(2)
  try:
    with open(os.devnull, "w") as devnull:
      os.dup2(devnull.fileno(), 2)
    yield
  finally:
    os.dup2(saved, 2)
    os.close(saved)


class _MutedImport(importlib.abc.MetaPathFinder):
  """Imports one top-level module with stderr muted; an import error is still raised.

  It stays in place until the module is really imported: a probe such as
  `importlib.util.find_spec("tensorflow")` (etils.epath asks it for every path)
  finds a spec without importing, and the import that follows must still be muted.
  """

  def __init__(self, name: str):
    self.name = name
    self._searching = False

  def find_spec(self, fullname, path=None, target=None):
    del path, target
    if fullname != self.name or self._searching:
      return None
    self._searching = True  # the other finders answer the inner look-up
    try:
      spec = importlib.util.find_spec(fullname)
    finally:
      self._searching = False
    if spec is not None and spec.loader is not None:
      exec_module = spec.loader.exec_module

      def muted(module):
        if self in sys.meta_path:
          sys.meta_path.remove(self)
        with _stderr_muted():
          exec_module(module)

      spec.loader.exec_module = muted
    return spec


def quiet_logs() -> None:
  """Drops log records that a user cannot act on from the console (absl handler filter).

  Idempotent. `--verbosity=1` (debug) keeps them all.
  """
  # TensorFlow's logger also prints through a handler of its own ("INFO:tensorflow:..."):
  # a filter on the logger stops a record before any handler sees it.
  # The "absl" logger: the Python API, where no absl handler is installed.
  for target in (logging.get_absl_handler(), python_logging.getLogger("tensorflow"),
                 python_logging.getLogger("absl")):
    if not any(isinstance(f, _Chatter) for f in target.filters):
      target.addFilter(_Chatter())


class _Chatter:
  """absl-handler filter for the records below; everything else passes.

  - orbax's INFO lines (about 22 per restore, several per save) and its
    "Metadata file does not exist" warning on every restore (an item saved
    without per-item metadata; the restore reads the tree's own metadata);
  - TensorFlow's INFO lines (SavedModel writing in `export`: signature
    renames, sharding callbacks, assets, fingerprint);
  - faiss's loader INFO lines (which instruction set it loads, including a
    ModuleNotFoundError for the variants it tries first);
  - seqio's "uncached FunctionDataset ... overfitting" warning: our sources
    are deterministic for a seed and a resumed run restores the stream's
    saved position (tasks/pipeline/input_pipeline.py), or skips to its step,
    so a restart neither reshuffles nor repeats data, which is what that
    warning is about.
  """

  def filter(self, record) -> bool:
    if logging.get_verbosity() >= logging.DEBUG:  # --verbosity=1: everything
      return True
    if record.levelno <= python_logging.INFO and any(
        library in record.pathname for library in ("/orbax/", "/tensorflow/", "/faiss/")):
      return False
    if "/orbax/" in record.pathname and str(record.msg).startswith("Metadata file does not exist"):
      return False
    return "Using an uncached FunctionDataset for training" not in str(record.msg)
