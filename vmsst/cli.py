"""What every command shares: a user's mistake is one `error:` line, exit 2.

A traceback is for bugs. A missing file, an empty input, a flag with the
wrong value or a gin macro typed wrong is the user's to fix, so the command
prints one line naming the file or flag and the fix, and exits with 2 (as
argparse and absl do for a bad flag):

  from vmsst import cli

  def main(argv):
    if not os.path.exists(FLAGS.input):
      raise cli.UserError(f"--input={FLAGS.input} does not exist; give a text file.")

  app.run(cli.user_errors(main))
"""

import functools
import sys
from typing import Callable, Sequence

USAGE_EXIT_CODE = 2
INTERRUPTED_EXIT_CODE = 130  # 128 + SIGINT, as shells report Ctrl-C


class UserError(Exception):
  """Bad input a user can fix; the message names the file or flag and the fix."""


def user_errors(main: Callable[[Sequence[str]], object]) -> Callable[[Sequence[str]], object]:
  """`main` with UserError printed as `error: <message>` on stderr and exit 2.

  Ctrl-C (KeyboardInterrupt) is one `interrupted` line and exit 130, not a
  traceback (training catches the first Ctrl-C itself and saves first).
  """

  @functools.wraps(main)
  def wrapped(argv: Sequence[str]):
    try:
      return main(argv)
    except UserError as e:
      print(f"error: {e}", file=sys.stderr)
      sys.exit(USAGE_EXIT_CODE)
    except KeyboardInterrupt:
      print("interrupted (Ctrl-C)", file=sys.stderr)
      sys.exit(INTERRUPTED_EXIT_CODE)

  return wrapped
