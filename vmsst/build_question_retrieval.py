r"""Builds question-retrieval sets from STSb and STS16.

    python -m vmsst.build_question_retrieval --data_dir=../shared/data --output=DIR

Writes DIR/question_retrieval/{stsb_multi_mt,sts16_questions}/ in
vmsst/evaluation/question_retrieval.py's format; how queries and the KB are
chosen is in vmsst/build_data/question_retrieval.py.
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
from vmsst.build_data import question_retrieval


def main(argv: Sequence[str]) -> None:
  builder_main.run(argv, lambda config: question_retrieval.build_question_retrieval(
      config.data_dir, config.output, languages=config.languages, min_score=config.min_score,
      kb_splits=config.kb_splits, sts16=config.sts16))


def _define_flags() -> None:
  """The data root, --output, the query languages and the KB: under `__main__` only, so an
  import defines none."""
  flags.DEFINE_string("data_dir", None, "Shared data root (stsb-multi-mt/, sts12-16/).",
                      required=True)
  flags.DEFINE_string("output", None, "Directory to write question_retrieval/ into.",
                      required=True)
  flags.DEFINE_list("languages", list(question_retrieval.STSB_QUERY_LANGUAGES),
                    "stsb-multi-mt query languages.")
  flags.DEFINE_float("min_score", question_retrieval.MIN_SCORE,
                     "Lowest STS score of a query-gold pair.")
  flags.DEFINE_list("kb_splits", list(sts_files.STSB_SPLITS),
                    "stsb-multi-mt splits filling the KB.")
  flags.DEFINE_bool("sts16", True, "Also write the English STS16 question-question set.")


if __name__ == "__main__":
  _define_flags()
  cli.run(main)
