r"""Builds a MewsC-16-format clustering set from the STSb.

    python -m vmsst.build_clustering --data_dir=../shared/data --output=DIR

Writes DIR/<name>/ in vmsst/evaluation/clustering.py's format; how categories
and texts are chosen is in vmsst/build_data/clustering.py.
"""

from vmsst.base import cli  # pylint: disable=g-bad-import-order
from vmsst.base import console  # pylint: disable=g-bad-import-order

if __name__ == "__main__":  # the command, not an import: before TensorFlow and JAX load
  console.quiet_startup()

# pylint: disable=wrong-import-position
from typing import Sequence

from absl import flags

from vmsst.base import sts_files
from vmsst.build_data import builder_main
from vmsst.build_data import clustering


def main(argv: Sequence[str]) -> None:
  builder_main.run(argv, lambda config: clustering.build_clustering_task(
      config.data_dir, config.output, languages=config.languages,
      max_per_category=config.max_per_category, seed=config.seed))


def _define_flags() -> None:
  """The data root, --output and the sample: under `__main__` only, so an import defines none."""
  flags.DEFINE_string("data_dir", None, "Shared data root (stsb/, stsb-multi-mt/).", required=True)
  flags.DEFINE_string("output", None, "Directory to write <name>/ into.", required=True)
  flags.DEFINE_list("languages", list(sts_files.STSB_MULTI_MT_LANGUAGES),
                    "stsb-multi-mt languages to write.")
  flags.DEFINE_integer("max_per_category", 250, "Sentences sampled per category.")
  flags.DEFINE_integer("seed", 0, "Seed of the per-category sample.")


if __name__ == "__main__":
  _define_flags()
  cli.run(main)
