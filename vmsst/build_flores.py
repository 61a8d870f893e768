r"""Builds a FLORES-layout task from held-out NTREX-128.

    python -m vmsst.build_flores --data_dir=../shared/data --output=runs/eval_tasks

Writes OUTPUT/flores/devtest/<code>.devtest, which
`python -m vmsst.evaluate --suite=flores --data_dir=OUTPUT` reads; what is
written and why is in vmsst/build_data/flores.py.
"""

from vmsst.base import cli  # pylint: disable=g-bad-import-order
from vmsst.base import console  # pylint: disable=g-bad-import-order

if __name__ == "__main__":  # the command, not an import: before TensorFlow and JAX load
  console.quiet_startup()

# pylint: disable=wrong-import-position
from typing import Sequence

from absl import flags

from vmsst.base import files
from vmsst.build_data import builder_main
from vmsst.build_data import flores
from vmsst_tasks.sources import pair_readers


def _has_ntrex_documents(data_dir: str) -> None:
  if not files.isfile(files.join(data_dir, pair_readers.NTREX_DIR, "DOCUMENT_IDS.tsv")):
    raise cli.UserError(f"--data_dir={data_dir} has no {pair_readers.NTREX_DIR}/DOCUMENT_IDS.tsv; "
                        "give the root of the shared corpora (../shared/data from the "
                        "repository, see its README.md).")


def main(argv: Sequence[str]) -> None:
  builder_main.run(argv, lambda config: flores.build(config.data_dir, config.output),
                   check_data=_has_ntrex_documents, written=f"{flores.TASK_DIR}/{flores.SPLIT}",
                   indent=None)


if __name__ == "__main__":
  flags.DEFINE_string("data_dir", None, "Directory holding ntrex128/.", required=True)
  flags.DEFINE_string("output", None, "Where flores/devtest/ is written.", required=True)
  cli.run(main)
