r"""Compares a query-tower-tuned model with its original.

  python -m vmsst.preservation --before=runs/contrastive_cpu \
      --after=runs/query_tower_cpu --data_dir=../shared/data --output=runs/preservation

Writes OUTPUT/preservation.json and preservation.md. What is measured, and
how each z-test is computed, is in vmsst/evaluation/preservation.py.
"""

from vmsst.base import cli  # pylint: disable=g-bad-import-order
from vmsst.base import path_checks  # pylint: disable=g-bad-import-order
from vmsst.base import console  # pylint: disable=g-bad-import-order

if __name__ == "__main__":  # the command, not an import: before TensorFlow and JAX load
  console.quiet_startup()

# pylint: disable=wrong-import-position
import json
from typing import Sequence

from absl import flags

from vmsst.base import files
from vmsst.base import run_directory
from vmsst.evaluation import pair_ranking
from vmsst.evaluation import preservation

FLAGS = flags.FLAGS


def check_flags() -> None:
  """The two model directories, the triplets and --output, checked before either model loads.

  Raises:
    cli.UserError: naming the flag, what is wrong and what to give.
  """
  for flag, what in (("before", "the original MODEL_DIR (python -m vmsst.train)"),
                     ("after", "its query-tower-tuned MODEL_DIR (python -m vmsst.train with "
                               "gin/runs/query_tower_cpu.gin)")):
    path = FLAGS[flag].value
    if not files.exists(run_directory.of(path).model_spec):
      raise cli.UserError(f"--{flag}={path} has no model.json; give {what}.")
  if FLAGS.triplets:
    path_checks.check_input_file("triplets", FLAGS.triplets, "a TSV of anchor<TAB>positive<TAB>negative "
                                 "lines (python -m vmsst_tasks.triplets)")
  path_checks.check_output_path("output", FLAGS.output, directory=True)


def main(argv: Sequence[str]) -> None:
  cli.check_no_arguments(argv)
  check_flags()
  from vmsst.encoding import checkpoint  # pylint: disable=import-outside-toplevel
  from vmsst.encoding import restore  # pylint: disable=import-outside-toplevel
  from vmsst.objectives import query_tower  # pylint: disable=import-outside-toplevel
  original = checkpoint.CheckpointEncoder.from_model_dir(FLAGS.before)
  tuned = checkpoint.CheckpointEncoder.from_model_dir(FLAGS.after)
  documents = checkpoint.CheckpointEncoder(restore.restore_document_tower(FLAGS.after),
                                           name="document_tower")
  triplets = pair_ranking.read_triplets(FLAGS.triplets)[0] if FLAGS.triplets else None
  results = preservation.evaluate(original, tuned, FLAGS.data_dir, documents=documents,
                                  triplets=triplets, sts_languages=FLAGS.sts_languages,
                                  tatoeba_languages=FLAGS.tatoeba_languages,
                                  margin=FLAGS.margin)
  output = files.as_path(FLAGS.output)
  output.mkdir(parents=True, exist_ok=True)
  (output / "preservation.json").write_text(json.dumps(results, indent=1))
  (output / "preservation.md").write_text(preservation.report(results))
  print(preservation.report(results))


def _define_flags() -> None:
  """The two models, the data and --output: under `__main__` only, so an import defines none."""
  flags.DEFINE_string("before", None, "The original model directory.", required=True)
  flags.DEFINE_string("after", None, "The query-tower-tuned model directory.", required=True)
  flags.DEFINE_string("data_dir", "../shared/data", "Root of the evaluation data.")
  flags.DEFINE_string("triplets", None, "Held-out triplet TSV (default: STSb test built).")
  flags.DEFINE_list("sts_languages", None, "STSb-multi-mt languages (default: all 11).")
  flags.DEFINE_list("tatoeba_languages", None, "Tatoeba codes (default: all present).")
  flags.DEFINE_float("margin", 0.1, "m of the held-out cosine triplet loss (QueryTower.margin).")
  flags.DEFINE_string("output", None, "Directory for preservation.json / .md.", required=True)


if __name__ == "__main__":
  _define_flags()
  cli.run(main)
