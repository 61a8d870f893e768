"""What every command shares: a user's mistake is one `error:` line, exit 2.

A traceback is for bugs. A missing file, an empty input, a flag with the
wrong value or a gin macro typed wrong is the user's to fix, so the command
prints one line naming the file or flag and the fix, and exits with 2 (as
argparse and absl do for a bad flag):

  from vmsst.base import cli

  def main(argv):
    if not os.path.exists(FLAGS.input):
      raise cli.UserError(f"--input={FLAGS.input} does not exist; give a text file.")

  cli.run(main)

Quiet by default: `quiet_startup()` (at the top of a command's module, under
`if __name__ == "__main__"`, before TensorFlow or JAX load) and `quiet_logs()`
(run by `user_errors`) keep what a user acts on (progress, metrics, data
counts, warnings) and drop probing and per-save chatter; `--verbosity` is
absl's (-1: warnings only, 1: debug, chatter included).
"""

import contextlib
import difflib
import functools
import glob
import importlib.abc
import importlib.util
import logging as python_logging  # record levels (absl's constants differ)
import os
import sys
import tempfile
from typing import Callable, Iterable, Sequence

from absl import app
from absl import flags
from absl import logging

from vmsst.base import files
from vmsst.base import old_names

USAGE_EXIT_CODE = 2
INTERRUPTED_EXIT_CODE = 130  # 128 + SIGINT, as shells report Ctrl-C


_GIN_CALL_NOTE = "\n  In call to configurable"


class UserError(Exception):
  """Bad input a user can fix; the message names the file or flag and the fix."""


def first_line(error: BaseException, limit: int = 300) -> str:
  """`Type: first line` of an error for a log line: tensorstore's and XLA's run to pages."""
  lines = str(error).strip().splitlines()
  text = f"{type(error).__name__}: {lines[0] if lines else ''}"
  return text if len(text) <= limit else text[:limit] + " ..."


def user_errors(main: Callable[[Sequence[str]], object]) -> Callable[[Sequence[str]], object]:
  """`main` as a command runs it: quiet logs, UserError as `error: <message>` and exit 2.

  Every command's `app.run` takes its main through here, so each drops the
  same chatter (`quiet_logs`). Ctrl-C (KeyboardInterrupt) is one
  `interrupted` line and exit 130, not a traceback (training catches the
  first Ctrl-C itself and saves first).
  """

  @functools.wraps(main)
  def wrapped(argv: Sequence[str]):
    quiet_logs()
    try:
      return main(argv)
    except UserError as e:
      # gin appends "In call to configurable ..." to what a configurable raises: not the user's.
      print(f"error: {str(e).split(_GIN_CALL_NOTE)[0]}", file=sys.stderr)
      sys.exit(USAGE_EXIT_CODE)
    except KeyboardInterrupt:
      print("interrupted (Ctrl-C)", file=sys.stderr)
      sys.exit(INTERRUPTED_EXIT_CODE)

  return wrapped


def old_name(old: str) -> None:
  """A command's old name: `python -m OLD` names what replaced it and runs nothing (exit 2).

  Old names stay answerable so scripts written against them fail with the fix, not with
  Python's "No module named". The table of them is vmsst/base/old_names.py.
  """
  print(f"error: {old_names.message(old)}", file=sys.stderr)
  sys.exit(USAGE_EXIT_CODE)


def run(main: Callable[[Sequence[str]], object], argv: Sequence[str] | None = None) -> None:
  """`app.run` for a command: flag errors and UserErrors both as one `error:` line, exit 2.

  A command whose stderr is a file (a log) shows no progress bars (`hide_progress`).
  """
  global _BARS_HIDDEN
  _BARS_HIDDEN = not sys.stderr.isatty()
  app.run(user_errors(main), argv=argv, flags_parser=parse_flags)


def parse_flags(argv: Sequence[str]) -> list[str]:
  """absl's flag parsing with its errors in the commands' style.

  absl prints "FATAL Flags parsing error: ..." and exits 1 for a missing
  required flag, an unknown flag or a bad value; a command here says
  `error: <what>; see --help` and exits 2 like any other usage error.
  `--help` (absl prints it and exits 1) exits 0: the user asked for it.
  """
  try:
    return flags.FLAGS(argv)
  except flags.Error as e:
    print(f"error: {str(e).rstrip('.')}; see --help.", file=sys.stderr)
    sys.exit(USAGE_EXIT_CODE)
  except SystemExit as e:  # absl's --help printed the help and exits 1: asked for, so 0
    if e.code == 1 and any(arg.split("=")[0] in _HELP_FLAGS for arg in argv[1:]):
      sys.exit(0)
    raise


def check_no_arguments(argv: Sequence[str]) -> None:
  """Every input of a command is a flag: a stray word (a flag without --) is an error.

  Raises:
    UserError: naming the arguments.
  """
  if len(argv) > 1:
    raise UserError(f"unexpected arguments {argv[1:]}; every input is a flag (see --help).")


def did_you_mean(name: str, known: Iterable[str], what: str = "") -> str:
  """"did you mean X?" for the closest of `known` (difflib), else "" or the list of `what`.

  Args:
    name: what the user typed.
    known: the names it could have meant.
    what: when given and nothing is close, the fallback is "<what>: a, b, c."
      (or "<what>: none." when `known` is empty).
  """
  known = sorted(set(known))
  close = difflib.get_close_matches(name, known, n=1)
  if close:
    return f"did you mean {close[0]}?"
  if what:
    return f"{what}: {', '.join(known) or 'none'}."
  return ""


CHECKOUT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def flag_values(argv: Sequence[str], name: str) -> list[str]:
  """Every value of `--name=V` or `--name V` in argv (absl parses them again later)."""
  values = []
  for i, arg in enumerate(argv):
    if arg.startswith(f"--{name}="):
      values.append(arg.split("=", 1)[1])
    elif arg == f"--{name}" and i + 1 < len(argv):
      values.append(argv[i + 1])
  return values


_HELP_FLAGS = ("-h", "-?", "--help", "--helpshort", "--helpfull", "--helpxml", "--only_check_args")


# What `answer_help` answers early: the command's own flags. --helpfull lists every module's
# flags, those its slow imports define too, so `app.run` answers it as before.
_EARLY_HELP_FLAGS = ("-h", "-?", "--help", "--helpshort")


def answer_help() -> None:
  """Prints `--help` and exits 0 now, before the command's slow imports (TensorFlow, JAX).

  A help text loaded TensorFlow for 15 s and 1 GB. Call from the command
  module's `if __name__ == "__main__"` block once every flag its help shows is
  defined (and `show_in_help` has run), above its heavy imports; absl prints
  the same text it would print from `app.run` (the module's docstring and its
  key flags). Without a help flag this does nothing.
  """
  if not any(arg.split("=")[0] in _EARLY_HELP_FLAGS for arg in sys.argv[1:]):
    return
  app.define_help_flags()
  parse_flags(sys.argv)  # absl's --help prints the help and exits; parse_flags makes it 0


def check_early(check: Callable[[], None]) -> None:
  """Runs a command's flag checks before its slow imports (TensorFlow, JAX: seconds).

  Call from the command module's `if __name__ == "__main__"` block above its
  heavy imports, once its flags are defined: answers --help there
  (`answer_help`), parses sys.argv for the flags (`app.run` parses again
  later) and runs `check`; a UserError is the usual one line and exit 2.
  Skipped for flags that do not parse, which `app.run` then reports as usual.
  """
  from absl import flags  # pylint: disable=import-outside-toplevel
  answer_help()
  if any(arg.split("=")[0] in _HELP_FLAGS for arg in sys.argv[1:]):
    return
  try:
    flags.FLAGS(sys.argv, known_only=True)
  except flags.Error:
    return
  try:
    check()
  except UserError as e:
    print(f"error: {e}", file=sys.stderr)
    sys.exit(USAGE_EXIT_CODE)


def check_input_file(flag: str, path: str, what: str) -> None:
  """`--flag=path` names an existing file (not a directory); checked before any model loads.

  Args:
    flag: the flag's name without dashes, e.g. "input".
    path: its value, local or in a bucket (gs://...).
    what: the fix's object, e.g. "a UTF-8 text file, one sentence per line".

  Raises:
    UserError: naming the flag, what is wrong and what to give.
  """
  if not files.exists(path):
    raise UserError(f"--{flag}={path} does not exist; give {what}.")
  if files.isdir(path):
    raise UserError(f"--{flag}={path} is a directory; give {what}.")
  if not files.is_remote(path) and not os.access(path, os.R_OK):
    raise UserError(f"--{flag}={path} is not readable; give {what} you can read.")


def check_data_dir(flag: str, path: str) -> None:
  """`--flag=path` is a directory of corpora (local or in a bucket).

  Raises:
    UserError: naming the flag and where the shared corpora live.
  """
  if not files.isdir(path):
    raise UserError(f"--{flag}={path} is not a directory; give the root of the shared corpora "
                    "(../shared/data from the repository, see its README.md).")


def check_output_path(flag: str, path: str, *, directory: bool = False) -> None:
  """`--flag=path` can be written, so no work is lost at the end; parents may be missing.

  A file output must not be a directory; a directory output must not be a
  file; either way the nearest existing parent must be a writable directory.

  Raises:
    UserError: naming the flag, what is in the way and the fix.
  """
  if "://" in path:
    return
  kind = "directory" if directory else "file"
  if not directory and files.isdir(path):
    raise UserError(f"--{flag}={path} is a directory; give a file name in it, e.g. "
                    f"{os.path.join(path, 'out')}.")
  if directory and files.exists(path) and not files.isdir(path):
    raise UserError(f"--{flag}={path} is a file; give a directory (a new one is created).")
  parent = files.parent(files.abspath(path))
  while not files.exists(parent):
    parent = files.parent(parent)
  if not files.isdir(parent):
    raise UserError(f"--{flag}={path}: {parent} is a file, so no {kind} can be made under it; "
                    "give a path in a directory.")
  blocked = path if files.isfile(path) else parent
  if not _writable(blocked):
    raise UserError(f"--{flag}={path}: {blocked} is not writable; give a path you can write.")


def _writable(path: str) -> bool:
  """Whether this process can write the file `path` or create a file in the directory `path`.

  Tried, not read off the mode bits: root passes `os.access` everywhere, yet
  cannot write /proc or a read-only mount. An existing file is opened for
  appending (nothing written); in a directory a temporary file is made and removed.
  """
  try:
    if files.isfile(path):
      with files.open(path, "ab"):
        return True
    with tempfile.TemporaryFile(dir=path):
      return True
  except OSError:
    return False


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


_BARS_HIDDEN = False  # set by `run`: a command whose stderr is not a terminal


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
    saved position (tasks/input_pipeline.py), or skips to its step,
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


def show_in_help(module: object | None = None, names: Sequence[str] = ()) -> None:
  """Lists flags under `--help` of the running command, not only under `--helpfull`.

  absl's `--help` shows the key flags of the main module (sys.argv[0]); flags
  defined in another module (the encoder flags, vmsst.train's) are added here.

  Args:
    module: every flag this module defined.
    names: and these flags by name (absl's --verbosity is always added).
  """
  from absl import flags  # pylint: disable=import-outside-toplevel
  shown = list(flags.FLAGS.get_key_flags_for_module(module)) if module is not None else []
  shown += [flags.FLAGS[name] for name in (*names, "verbosity")]  # absl's, every command
  for flag in shown:
    flags.FLAGS.register_key_flag_for_module(sys.argv[0], flag)
