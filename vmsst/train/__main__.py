"""`python -m vmsst.train`: see vmsst/train/__init__.py."""

import sys

from absl import app

from vmsst import cli
from vmsst import train

if __name__ == "__main__":
  app.run(cli.user_errors(train.main), argv=train.rewrite_gin_args(sys.argv))
