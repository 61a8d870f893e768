r"""Trains a model from a run file (gin/runs/*.gin).

  python -m vmsst.train --gin_file=gin/runs/vmsst_cpu.gin
  python -m vmsst.train --gin_file=gin/runs/vmsst_cpu.gin \
      --gin.MODEL_DIR="'runs/x'" --gin.TRAIN_STEPS=2000

A run file (gin/runs/*.gin) names the objective, sizes, data and MODEL_DIR;
`--gin.X=Y` overrides any macro or parameter (strings in inner quotes).
Rerunning the command resumes from MODEL_DIR's latest checkpoint; Ctrl-C
saves the current step and exits 130, SIGTERM exits 75. See
vmsst/training/loop.py.
"""

import sys

from vmsst.base import cli
from vmsst.base import console
from vmsst.base import gin_utils
from vmsst.training import configurables
from vmsst.training import flags as train_flags

GIN_FLAGS = gin_utils.define_flags()
# `python -m vmsst.train.pretokenize` (an old name, from when vmsst.train was a package) looks for
# a submodule here: an empty __path__ lets that search reach vmsst/base/old_names.py, which
# names the command now. Nothing lives below this module.
__path__ = []  # pylint: disable=invalid-name

if __name__ == "__main__":  # the command: before seconds of TensorFlow and JAX imports
  console.quiet_startup()
  cli.show_in_help(train_flags, names=gin_utils.FLAG_NAMES)
  cli.check_early(lambda: gin_utils.check_gin_files(sys.argv, required=True))  # --help answered here

# pylint: disable=wrong-import-position
import contextlib
from typing import Sequence

import jax

from vmsst.training import checkpointing
from vmsst.base import files
from vmsst.base import run_directory
from vmsst.base.gin_utils import gin
from vmsst.training import distributed
from vmsst.training import loop
from vmsst.training import preflight


def main(argv: Sequence[str]) -> None:
  """Joins the job if asked, parses the run, trains; a mistake is one `error:` line."""
  del argv
  checkpointing.quiet_orbax_logs()
  peers = {"coordinator_address": train_flags.COORDINATOR_ADDRESS.value,
           "num_processes": train_flags.NUM_PROCESSES.value,
           "process_id": train_flags.PROCESS_ID.value}
  if train_flags.DISTRIBUTED.value or any(v is not None for v in peers.values()):
    distributed.initialize_distributed(
        **peers, peer_timeout_seconds=train_flags.PEER_TIMEOUT_SECONDS.value)
  configurables.parse_flags()
  preflight.check_paths()
  model_dir = gin.query_parameter("train.model_dir")
  model_dir = model_dir if isinstance(model_dir, str) else gin.query_parameter("%MODEL_DIR")
  fresh = not files.exists(model_dir)
  try:
    result = loop.train(resume_with_changes=train_flags.RESUME_WITH_CHANGES.value)
  except (checkpointing.IncompatibleCheckpointError, checkpointing.NoUsableCheckpointError) as e:
    _remove_if_unused(model_dir, fresh)
    raise cli.UserError(str(e)) from e
  except BaseException:
    _remove_if_unused(model_dir, fresh)
    raise
  if jax.process_index() == 0 and result["retrieval"]:
    print("Held-out retrieval accuracy (%, mean of both directions):")
    for name, value in sorted(result["retrieval"].items()):
      print(f"  {name:40s} {value:6.2f}")


def _remove_if_unused(model_dir: str, fresh: bool) -> None:
  """A run that failed before its first checkpoint leaves no MODEL_DIR it created (a bucket's too)."""
  if (fresh and jax.process_index() == 0
      and not run_directory.checkpoint_steps(run_directory.of(model_dir).checkpoints)):
    with contextlib.suppress(OSError):
      files.rmtree(model_dir)


if __name__ == "__main__":
  cli.run(main, argv=gin_utils.rewrite_gin_args(sys.argv))
