r"""Builds a BUCC-2018-format mining task from translations.

    python -m vmsst.build_bucc --data_dir=../shared/data --output=DIR \
        [--pairs=de-en,fr-en,ru-en,zh-en] [--aligned_fraction=0.025] [--seed=0]

Writes DIR/bucc2018/<xx>-en/, which `python -m vmsst.evaluate --suite=bucc`
reads. Every step of the construction is in vmsst/build_data/bucc.py.
"""

from vmsst.base import cli  # pylint: disable=g-bad-import-order
from vmsst.base import console  # pylint: disable=g-bad-import-order

if __name__ == "__main__":  # the command, not an import: before TensorFlow and JAX load
  console.quiet_startup()

# pylint: disable=wrong-import-position
from typing import Sequence

from absl import flags

from vmsst.build_data import bucc
from vmsst.build_data import builder_main


def main(argv: Sequence[str]) -> None:
  builder_main.run(argv, lambda config: bucc.build(
      config.data_dir, config.output, config.pairs, config.aligned_fraction, config.seed,
      near_duplicate_jaccard=config.near_duplicate_jaccard), written=bucc.TASK_DIR)


def _define_flags() -> None:
  """The data root, --output, the pairs and the sample: under `__main__` only, so an import
  defines none."""
  flags.DEFINE_string("data_dir", None, "Directory holding stsb-multi-mt/.", required=True)
  flags.DEFINE_string("output", None, "Where bucc2018/ is written.", required=True)
  flags.DEFINE_list("pairs", list(bucc.DEFAULT_PAIRS), "Language pairs xx-en (BUCC 2018's four).")
  flags.DEFINE_float("aligned_fraction", 0.025, "Gold pairs as a fraction of each side "
                     "(BUCC 2018 training: about 2-3%).")
  flags.DEFINE_integer("seed", 0, "Seed of the shuffles.")
  flags.DEFINE_float("near_duplicate_jaccard", bucc.NEAR_DUPLICATE_JACCARD,
                     "Content-word Jaccard from which English sentences are near-duplicates.")


if __name__ == "__main__":
  _define_flags()
  cli.run(main)
