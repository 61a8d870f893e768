r"""Trains a model: `python -m vmsst.train --gin_file=RUN.gin [--gin.MACRO=VALUE ...]`.

  python -m vmsst.train --gin_file=gin/runs/vmsst_cpu.gin
  python -m vmsst.train --gin_file=gin/runs/vmsst_cpu.gin \
      --gin.MODEL_DIR="'runs/x'" --gin.TRAIN_STEPS=2000

A run file (gin/runs/*.gin) names the objective, sizes, data and MODEL_DIR;
`--gin.X=Y` overrides any macro or parameter (strings in inner quotes).
Rerunning the command resumes from MODEL_DIR's latest checkpoint; Ctrl-C
saves the current step and exits 130, SIGTERM exits 75. See
vmsst/train/__init__.py.
"""

import sys

from vmsst import cli
from vmsst import gin_utils  # pylint: disable=g-bad-import-order
from vmsst import train

if __name__ == "__main__":
  cli.show_in_help(train)
  cli.run(train.main, argv=gin_utils.rewrite_gin_args(sys.argv))
