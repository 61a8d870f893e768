"""The `main` every builder command shares: its checks, the build, the counts printed.

One place, so the four `vmsst.build_<benchmark>` commands reject a bad
--data_dir or --output the same way before any work.
"""

import json
from typing import Any, Callable, Sequence

from absl import flags

from vmsst.base import cli
from vmsst.base import path_checks
from vmsst.base import files


def run(argv: Sequence[str], build: Callable[[Any], dict], *, written: str | None = None,
        check_data: Callable[[str], None] | None = None, indent: int | None = 2) -> None:
  """A builder command's `main`: its checks before any work, then `build(flags.FLAGS)`.

  No stray arguments; --data_dir a directory (and `check_data(data_dir)`, what a
  builder needs in it); --output a directory that can be made. `build`'s
  FileNotFoundError / ValueError, whose messages name the file and the fix,
  become one `error:` line; its counts are printed as JSON, then what was
  written (`written`, under --output).

  Raises:
    cli.UserError: any of those checks, or what `build` raised.
  """
  cli.check_no_arguments(argv)
  config = flags.FLAGS
  path_checks.check_data_dir("data_dir", config.data_dir)
  if check_data is not None:
    check_data(config.data_dir)
  path_checks.check_output_path("output", config.output, directory=True)
  try:
    counts = build(config)
  except (FileNotFoundError, ValueError) as e:  # the message names the file and the fix
    raise cli.UserError(str(e)) from e
  print(json.dumps(counts, indent=indent))
  if written is not None:
    print(f"Wrote {files.join(config.output, written)}")
