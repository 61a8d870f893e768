"""The paths a command is given, checked before any model loads: one `error:` line naming the
flag, what is wrong and what to give.

Local and bucket (gs://) paths alike, through the one file-access module;
writability is tried, not read off mode bits (a bucket has none, and root
passes every mode check).
"""

import os
import tempfile

from vmsst.base import cli
from vmsst.base import files


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
    raise cli.UserError(f"--{flag}={path} does not exist; give {what}.")
  if files.isdir(path):
    raise cli.UserError(f"--{flag}={path} is a directory; give {what}.")
  if not files.is_remote(path) and not os.access(path, os.R_OK):
    raise cli.UserError(f"--{flag}={path} is not readable; give {what} you can read.")


def check_data_dir(flag: str, path: str) -> None:
  """`--flag=path` is a directory of corpora (local or in a bucket).

  Raises:
    UserError: naming the flag and where the shared corpora live.
  """
  if not files.isdir(path):
    raise cli.UserError(f"--{flag}={path} is not a directory; give the root of the shared corpora "
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
    raise cli.UserError(f"--{flag}={path} is a directory; give a file name in it, e.g. "
                    f"{os.path.join(path, 'out')}.")
  if directory and files.exists(path) and not files.isdir(path):
    raise cli.UserError(f"--{flag}={path} is a file; give a directory (a new one is created).")
  parent = files.parent(files.abspath(path))
  while not files.exists(parent):
    parent = files.parent(parent)
  if not files.isdir(parent):
    raise cli.UserError(f"--{flag}={path}: {parent} is a file, so no {kind} can be made under it; "
                    "give a path in a directory.")
  blocked = path if files.isfile(path) else parent
  if not _writable(blocked):
    raise cli.UserError(f"--{flag}={path}: {blocked} is not writable; give a path you can write.")


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
