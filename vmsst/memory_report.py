r"""`python -m vmsst.memory_report`: the XLA:CPU memory table of `vmsst.compile`, by its old name.

  python -m vmsst.memory_report --gin_file=gin/runs/vmsst_24l_paper.gin \
      --mesh=data:16,model:4 [--batch_size=2048] [--gin.X=Y] \
      [--variants=none,remat,remat_factorized,scan,scan_remat] [--devices=cpu|real]

is `python -m vmsst.compile --topology=cpu` (`--devices=real`: `--topology=local`)
with every variant unless `--variants` names some. On forced CPU devices the
buffer assignment is XLA:CPU's; what a TPU chip holds comes from
`python -m vmsst.compile --topology=v4-128` (the TPU compiler).
"""

import sys

from vmsst import cli
from vmsst import gin_utils  # pylint: disable=g-bad-import-order

if __name__ == "__main__":  # before TensorFlow and JAX load
  cli.quiet_startup()

DEVICES = {"cpu": "cpu", "real": "local"}


def compile_argv(argv: list[str]) -> list[str]:
  """This command's arguments as `vmsst.compile`'s."""
  from vmsst import compile as compile_lib  # pylint: disable=g-import-not-at-top
  devices, rest = "cpu", []
  for arg in argv[1:]:
    if arg.startswith("--devices="):
      devices = arg.removeprefix("--devices=")
    else:
      rest.append(arg)
  if devices not in DEVICES:
    raise cli.UserError(f"--devices={devices}: pick cpu (forced host devices) or real")
  if not any(a.startswith("--variants") for a in rest):
    rest.append("--variants=" + ",".join(compile_lib.VARIANTS))
  return [argv[0], f"--topology={DEVICES[devices]}", *rest]


if __name__ == "__main__":
  from vmsst import compile as _compile  # pylint: disable=g-import-not-at-top
  from vmsst.training import flags as _train_flags  # pylint: disable=g-import-not-at-top (--gin_file)
  cli.run(_compile.main, argv=gin_utils.rewrite_gin_args(cli.user_errors(compile_argv)(sys.argv)))
