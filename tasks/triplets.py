r"""Builds English triplets from STSb (query-tower tuning).

  python -m vmsst_tasks.triplets --stsb_dir=../shared/data/stsb --output=runs/triplets

writes train.tsv, validation.tsv and test.tsv (anchor<TAB>positive<TAB>negative,
from STSb train, dev and test) and prints the build counts;

  python -m vmsst_tasks.triplets --msmarco=msmarco-triplets.jsonl.gz --output=runs/msmarco_triplets

writes the MSMARCO splits of query-tower tuning (Vasilyev et al. 2022, §2.2).

The rules and formats: tasks/sources/triplet_sets.py.
"""

from vmsst.base import cli  # pylint: disable=g-bad-import-order
from vmsst.base import path_checks  # pylint: disable=g-bad-import-order
from vmsst.base import console  # pylint: disable=g-bad-import-order


def _define_flags() -> None:
  """The command's flags, defined before its imports so `--help` answers without them."""
  from absl import flags as absl_flags  # pylint: disable=import-outside-toplevel
  absl_flags.DEFINE_string("stsb_dir", "../shared/data/stsb", "The STS Benchmark folder.")
  absl_flags.DEFINE_string("msmarco", None, "msmarco-triplets.jsonl.gz: write the query-tower "
                           "paper's MSMARCO splits instead of STSb's.")
  absl_flags.DEFINE_string("output", None, "Where train/validation/test.tsv go.", required=True)
  absl_flags.DEFINE_integer("seed", 0, "Seed of the same_file / any_file negative draws.")


if __name__ == "__main__":  # the command, not an import: before TensorFlow and JAX load
  console.quiet_startup()
  _define_flags()
  cli.answer_help()  # before seqio and TensorFlow

# pylint: disable=wrong-import-position
from typing import Sequence

from absl import flags

from vmsst_tasks.sources import triplet_sets
from vmsst.base import files


# ---------------------------------------------------------------- command

FLAGS = flags.FLAGS


def main(argv: Sequence[str]) -> None:
  cli.check_no_arguments(argv)
  if FLAGS.msmarco:
    path_checks.check_input_file("msmarco", FLAGS.msmarco, "the sentence-transformers "
                                 "msmarco-triplets.jsonl.gz")
  path_checks.check_output_path("output", FLAGS.output, directory=True)
  try:
    splits = _build_splits()
  except (FileNotFoundError, ValueError) as e:  # the message names the file and the fix
    raise cli.UserError(str(e)) from e
  output = files.as_path(FLAGS.output)
  for name, (rows, note) in splits.items():
    triplet_sets.write_tsv(output / f"{name}.tsv", rows)
    print(f"{output / f'{name}.tsv'}: {note}")


def _build_splits() -> dict[str, tuple[list[triplet_sets.Triplet], object]]:
  """{split: (its triplets, what to print of them)}: every split built before any is written,
  so a bad input leaves no partial output behind."""
  if FLAGS.msmarco:
    return {name: (rows, f"{len(rows)} triplets")
            for name, rows in triplet_sets.msmarco_splits(FLAGS.msmarco).items()}
  return {name: triplet_sets.stsb_triplets(FLAGS.stsb_dir, split, seed=FLAGS.seed)
          for name, split in triplet_sets.STSB_SPLITS.items()}


if __name__ == "__main__":
  cli.run(main)
