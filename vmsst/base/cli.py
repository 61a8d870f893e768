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

Quiet by default (console.py): `console.quiet_startup()` at the top of a
command's module and `console.quiet_logs()`, run by `user_errors`; the paths
a command is given are checked before any model loads (path_checks.py).
"""

import difflib
import functools
import os
import sys
from typing import Callable, Iterable, Sequence

from absl import app
from absl import flags

from vmsst.base import console
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
    console.quiet_logs()
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

  A command whose stderr is a file (a log) shows no progress bars (`console.hide_progress`).
  """
  console.hide_progress_in_logs(not sys.stderr.isatty())
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
