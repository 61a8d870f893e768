r"""Mines hard negatives for a corpus's pairs (contrastive).

  python -m vmsst.hard_negatives --model_dir=runs/contrastive_cpu --opus_dir=DIR \
      --output=runs/negatives [--negatives=3] [--candidates=30] \
      [--margin=relative] [--margin_value=0.05]
  python -m vmsst.hard_negatives --model_dir=M --src=corpus.de-en.de --trg=corpus.de-en.en \
      --src_language=de --trg_language=en --output=runs/negatives

reads the training pairs of an OPUS-layout directory (Moses or TSV files,
tasks/sources/opus_readers.py) or of two line-aligned Moses files, embeds every
distinct sentence with the model, and for each pair (a, b) keeps the K
sentences of b's language nearest to a that are neither a translation of a
nor within the margin of the positive (vmsst/mining/negative_selection.py:
--margin=relative keeps cos(a, n) <= p − |p|·m, absolute cos(a, n) <= p − m,
with p = cos(a, b)). Each (lang_a, lang_b) is mined apart, among the
distinct b sentences of its own pairs.

It writes OUTPUT/train.tsv (lang_a, lang_b, a, b, n_1..n_K) and
OUTPUT/mining.json (the options and every count), the task
`vmsst_hard_negatives` reads (tasks/sources/negatives_files.py). Train on it with

  register_families.families = [@hard_negative_tasks]
  hard_negative_tasks.negatives_dir = 'runs/negatives'
  train.mixture_name = 'vmsst_hard_negatives'
  Contrastive.hard_negatives = 3          # or VMSSTContrastive.hard_negatives

Lines the readers skip (empty side, overlong, not UTF-8, a TSV line without
one TAB) are counted by reason and printed; Moses files of different lengths
or an unknown language code are one `error:` line naming the file.
"""

from vmsst.base import cli  # pylint: disable=g-bad-import-order
from vmsst.base import path_checks  # pylint: disable=g-bad-import-order
from vmsst.base import console  # pylint: disable=g-bad-import-order

if __name__ == "__main__":  # the command, not an import: before TensorFlow and JAX load
  console.quiet_startup()

# pylint: disable=wrong-import-position
from typing import Sequence

from absl import flags

from vmsst.base import files
from vmsst.encoding import encoder_flags
from vmsst.mining import hard_negative_rows
from vmsst.mining import negative_selection as selection

FLAGS = flags.FLAGS
def check_flags() -> None:
  """The corpus, output and filter flags, checked before any model loads."""
  moses = [FLAGS[f].value for f in ("src", "trg", "src_language", "trg_language")]
  if bool(FLAGS.opus_dir) == any(moses):
    raise cli.UserError("give either --opus_dir or --src, --trg, --src_language and "
                        "--trg_language (two line-aligned Moses files).")
  if FLAGS.opus_dir and not files.isdir(FLAGS.opus_dir):
    raise cli.UserError(f"--opus_dir={FLAGS.opus_dir} is not a directory; give an OPUS-layout "
                        "directory of Moses or TSV files.")
  if not FLAGS.opus_dir:
    if not all(moses):
      raise cli.UserError("--src, --trg, --src_language and --trg_language go together; give "
                          "all four.")
    for flag in ("src", "trg"):
      path_checks.check_input_file(flag, FLAGS[flag].value, "a UTF-8 text file, one sentence per line")
  if FLAGS.candidates < FLAGS.negatives:
    raise cli.UserError(f"--candidates={FLAGS.candidates} is below --negatives="
                        f"{FLAGS.negatives}; search at least as many neighbours as negatives.")
  path_checks.check_output_path("output", FLAGS.output, directory=True)


def main(argv: Sequence[str]) -> None:
  cli.check_no_arguments(argv)
  check_flags()
  encoder_flags.check_one()
  pairs, read_counts = hard_negative_rows.read_pairs(
      opus_dir=FLAGS.opus_dir, src=FLAGS.src, trg=FLAGS.trg, src_language=FLAGS.src_language,
      trg_language=FLAGS.trg_language)
  if not pairs:
    raise cli.UserError(f"no training pair was kept ({read_counts.report('pairs')}); check the "
                        "corpus flags.")
  from vmsst.encoding import protocol  # pylint: disable=import-outside-toplevel
  from vmsst_tasks.sources import negatives_files as task  # pylint: disable=import-outside-toplevel
  encoder = protocol.UniqueSentences(encoder_flags.from_flags(), batch_size=FLAGS.batch_size)
  encode = lambda sentences, language: encoder.encode(list(sentences), language=language)
  rows, counts = hard_negative_rows.mine_rows(
      pairs, encode, negatives=FLAGS.negatives, candidates=FLAGS.candidates,
      margin=FLAGS.margin, margin_value=FLAGS.margin_value)
  manifest = {"encoder": FLAGS.model_dir or FLAGS.saved_model or FLAGS.encoder,
              "corpus": FLAGS.opus_dir or [FLAGS.src, FLAGS.trg],
              "candidates": FLAGS.candidates, "margin": FLAGS.margin,
              "margin_value": FLAGS.margin_value, "read": read_counts.as_dict(),
              "mined": counts.as_dict()}
  task.write(FLAGS.output, rows, FLAGS.negatives, manifest)
  print(read_counts.report("pairs"))
  print(f"{files.join(FLAGS.output, task.ROWS)}: {len(rows)} pairs, {counts.negatives} negatives "
        f"({counts.short} pairs with fewer than {FLAGS.negatives}); dropped among "
        f"{counts.candidates} neighbours: {counts.translations} translations, {counts.margin} "
        + (f"within the {FLAGS.margin} margin {FLAGS.margin_value}" if FLAGS.margin != "none"
           else "by no margin (--margin=none)"))


def _define_flags() -> None:
  """The encoder flags, the corpus (--opus_dir, or --src/--trg and their languages), --output
  and the negatives' filter: under `__main__` only, so an import defines none."""
  encoder_flags.define()
  flags.DEFINE_string("opus_dir", None, "An OPUS-layout directory: <corpus>.<l1>-<l2>.<l1>/.<l2> "
                      "(Moses) or .tsv files, .gz optional.")
  flags.DEFINE_string("src", None, "Moses side a (instead of --opus_dir), one sentence a line.")
  flags.DEFINE_string("trg", None, "Moses side b, line-aligned with --src.")
  flags.DEFINE_string("src_language", None, "--src's language code (e.g. de).")
  flags.DEFINE_string("trg_language", None, "--trg's language code (e.g. en).")
  flags.DEFINE_string("output", None, "Directory to write train.tsv and mining.json.",
                      required=True)
  flags.DEFINE_integer("negatives", 3, "K: negatives per pair.", lower_bound=1)
  flags.DEFINE_integer("candidates", 30, "Neighbours searched per anchor beyond its "
                       "translations (at least --negatives).", lower_bound=1)
  flags.DEFINE_enum("margin", "relative", list(selection.MARGINS),
                    "Filter against the positive: relative (s <= p - |p|*m), absolute "
                    "(s <= p - m) or none.")
  flags.DEFINE_float("margin_value", 0.05, "m of --margin.", lower_bound=0.0)


if __name__ == "__main__":
  _define_flags()
  cli.run(main)
