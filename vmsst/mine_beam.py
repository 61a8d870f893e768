r"""Mines translation pairs as an Apache Beam pipeline.

For sides past one machine (10^8 sentences and more): read and deduplicate
(any text files or globs, local or gs://), embed with the exported SavedModel
(a RunInference model handler, a task per shard), train the IVF cells on a
sample, search both ways in key shards, margins per shard, one-to-one and
threshold (vmsst/mining/beam_pipeline.py has the stages). Every stage writes
its files under --output with a `_DONE` marker, so running the same command
again resumes after the last finished stage.

  python -m vmsst.mine_beam --src='news.de.*' --trg='news.en.*' --saved_model=EXPORT \
      --output=mined/ --index=ivf --shards=8 --runner=DirectRunner

  # Dataflow (Beam's own flags, written --name=value, go to the runner):
  python -m vmsst.mine_beam --src='gs://B/de/*' --trg='gs://B/en/*' --saved_model=gs://B/export \
      --output=gs://B/mined --index=ivf --sq8 --shards=256 --runner=DataflowRunner \
      --project=P --region=us-central1 --temp_location=gs://B/tmp --setup_file=./setup.py

  # Dask (a Slurm or Kubernetes cluster; launch/slurm_mine.sh starts one on Slurm):
  python -m vmsst.mine_beam --src='/shared/de/*' --trg='/shared/en/*' --saved_model=EXPORT \
      --output=/shared/mined --index=ivf --shards=64 --runner=DaskRunner \
      --dask_client_address=tcp://SCHEDULER:8786

--margin, --retrieval, --k, --threshold and the IVF flags mean what they
mean for `python -m vmsst.mine` and give its pairs (exact search: the same
pairs; IVF: those of one index over the same rows). Output: --output/pairs.tsv,
`score<TAB>src<TAB>trg` by score descending, and pairs.json (counts, recall).
Lines that are empty, repeated, not UTF-8 or hold a TAB are skipped and
counted in the summary.
"""

from vmsst.base import cli  # pylint: disable=g-bad-import-order
from vmsst.base import console  # pylint: disable=g-bad-import-order

if __name__ == "__main__":  # the command, not an import: before TensorFlow loads
  console.quiet_startup()

# pylint: disable=wrong-import-position
import sys
from typing import Sequence

from absl import flags

from vmsst.base import files
from vmsst.mining import bitext
from vmsst.mining import approximate

FLAGS = flags.FLAGS
_BEAM_ARGS: list[str] = []


def _define_flags() -> None:
  flags.DEFINE_string("src", None, "Source sentence files: comma-separated paths or globs, "
                      "local or gs://, one sentence per line (.gz read as such).")
  flags.DEFINE_string("trg", None, "Target sentence files, as --src.")
  flags.DEFINE_string("output", None, "Directory of the stages' files and pairs.tsv; a rerun "
                      "resumes there.")
  flags.DEFINE_string("saved_model", None, "SavedModel exported by python -m vmsst.export.")
  flags.DEFINE_string("src_language", None, "Language of --src: a two-tower export embeds it "
                      "with that language's tower.")
  flags.DEFINE_string("trg_language", None, "Language of --trg, as --src_language.")
  flags.DEFINE_integer("batch_size", 256, "Sentences per RunInference batch.", lower_bound=1)
  flags.DEFINE_enum("margin", "ratio", list(bitext.MARGINS), "As python -m vmsst.mine.")
  flags.DEFINE_enum("retrieval", "max", list(bitext.RETRIEVALS), "As python -m vmsst.mine.")
  flags.DEFINE_integer("k", 4, "Neighbours per sentence for the margin and the candidates.")
  flags.DEFINE_float("threshold", None, "Keep pairs scoring >= this (default: all).")
  flags.DEFINE_enum("index", "exact", list(bitext.INDEXES), "exact: brute force per key "
                    "shard; ivf: faiss inverted file trained once per side.")
  flags.DEFINE_integer("nlist", 0, "--index=ivf: k-means cells (0: 4 * sqrt(sentences)).")
  flags.DEFINE_integer("nprobe", approximate.IvfOptions.nprobe, "--index=ivf: cells per query.")
  flags.DEFINE_integer("pq", 0, "--index=ivf: bytes per key (product quantization).")
  flags.DEFINE_bool("sq8", False, "--index=ivf: one byte per dimension.")
  flags.DEFINE_integer("train_size", 0, "--index=ivf: sentences sampled to train the cells "
                       "(0: 64 per cell, at least 100,000).")
  flags.DEFINE_integer("shards", 4, "Sentence shards per side: the unit of embedding and of "
                       "search (2 x shards search tasks).", lower_bound=1)
  flags.DEFINE_integer("recall_sample", 1000, "--index=ivf: queries per direction whose exact "
                       "neighbours measure recall@k (0 skips it).", lower_bound=0)
  flags.mark_flags_as_required(["src", "trg", "output"])


def split_argv(argv: Sequence[str]) -> tuple[list[str], list[str]]:
  """(this command's arguments, Beam's): a --name=value whose name is not ours is Beam's."""
  ours, beam = [argv[0]], []
  for arg in argv[1:]:
    name = arg.lstrip("-").split("=")[0]
    known = name in FLAGS or (name.startswith("no") and name[2:] in FLAGS)
    (ours if known or not arg.startswith("--") else beam).append(arg)
  return ours, beam


def main(argv: Sequence[str]) -> None:
  cli.check_no_arguments(argv)
  from apache_beam.options.pipeline_options import PipelineOptions  # pylint: disable=import-outside-toplevel
  from vmsst.mining import beam_pipeline  # pylint: disable=import-outside-toplevel
  settings = beam_pipeline.Settings(
      margin=FLAGS.margin, retrieval=FLAGS.retrieval, k=FLAGS.k, threshold=FLAGS.threshold,
      index=FLAGS.index, shards=FLAGS.shards, recall_sample=FLAGS.recall_sample,
      batch_size=FLAGS.batch_size, ivf=approximate.IvfOptions(
          nlist=FLAGS.nlist, nprobe=FLAGS.nprobe, pq=FLAGS.pq, sq8=FLAGS.sq8,
          train_size=FLAGS.train_size))
  if FLAGS.saved_model and not files.exists(files.join(FLAGS.saved_model, "saved_model.pb")):
    raise cli.UserError(f"--saved_model={FLAGS.saved_model} holds no saved_model.pb; give the "
                        "directory `python -m vmsst.export` wrote.")
  handlers = None if not FLAGS.saved_model else {
      side: beam_pipeline.SavedModelHandler(FLAGS.saved_model, language, FLAGS.batch_size)
      for side, language in (("src", FLAGS.src_language), ("trg", FLAGS.trg_language))}
  try:
    summary = beam_pipeline.run({"src": FLAGS.src, "trg": FLAGS.trg}, FLAGS.output, settings,
                                PipelineOptions(beam_pipeline.beam_arguments(_BEAM_ARGS)),
                                handlers)
  except (FileNotFoundError, ValueError) as e:
    raise cli.UserError(str(e)) from e
  print(beam_pipeline.describe(summary))


if __name__ == "__main__":
  _define_flags()
  cli.answer_help()  # before split_argv, which passes --help on to Beam's options
  _ARGV, _BEAM_ARGS[:] = split_argv(sys.argv)
  cli.run(main, _ARGV)
