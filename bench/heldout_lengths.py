"""How much of each held-out sentence a vocabulary and a sequence length keep.

The CPU recipe search (docs/cpu_recipe.md) found NTREX news sentences far
longer than the runs' 32 pieces: the encoder then sees a different share of
the English sentence and of its translation (a Hindi line needs ~1.8x the
pieces of its English source), so retrieval compares different spans. This
prints, per held-out set (tasks/sources/heldout.py, the training loop's evaluation),
the median pieces of each side and the share of sentences longer than each
`--lengths` value (the model's input holds length - 1 pieces plus EOS).

  python bench/heldout_lengths.py --vocabulary=runs/vocab/spm.model --lengths=32,64,96
"""

from vmsst.base import console  # pylint: disable=g-bad-import-order

console.quiet_startup()  # before JAX loads: with libtpu installed, no TPU probe on a CPU machine

from absl import app, flags
import numpy as np
import sentencepiece as spm

from vmsst_tasks.sources import heldout

FLAGS = flags.FLAGS


def _define_flags() -> None:
  """Defined when run as a script, so tests can import several bench modules."""
  flags.DEFINE_string("vocabulary", None, "SentencePiece .model file.",
                      required=True)
  flags.DEFINE_string("data_dir", "../shared/data", "Root of the shared corpora.")
  flags.DEFINE_list("lengths", ["32", "64"], "Sequence lengths to report the cut at.")
  flags.DEFINE_integer("max_pairs", 500, "Pairs per held-out set (as in training).")


def piece_counts(processor: spm.SentencePieceProcessor, sentences: list[str]) -> np.ndarray:
  """Pieces per sentence, int [N]."""
  return np.array([len(ids) for ids in processor.encode(sentences)], np.int64)


def cut_share(counts: np.ndarray, length: int) -> float:
  """Percent of sentences with more pieces than a length-`length` input holds."""
  return float(np.mean(counts > length - 1) * 100) if counts.size else 0.0


def report(processor: spm.SentencePieceProcessor, sets: dict, lengths: list[int]) -> list[str]:
  """One line per set: median pieces and cut share of the source and target sides."""
  cuts = "  ".join(f"cut@{n:<3d}" for n in lengths)
  lines = [f"{'set':32s} {'median src/tgt':>14s}  src {cuts}  |  tgt {cuts}"]
  for name, (sources, targets) in sets.items():
    src, tgt = piece_counts(processor, sources), piece_counts(processor, targets)
    src_cut = "  ".join(f"{cut_share(src, n):6.1f}%" for n in lengths)
    tgt_cut = "  ".join(f"{cut_share(tgt, n):6.1f}%" for n in lengths)
    median = f"{np.median(src):.0f}/{np.median(tgt):.0f}"
    lines.append(f"{name:32s} {median:>14s}  src {src_cut}  |  tgt {tgt_cut}")
  return lines


def main(argv):
  del argv
  processor = spm.SentencePieceProcessor(model_file=FLAGS.vocabulary)
  sets = heldout.retrieval_sets(FLAGS.data_dir, FLAGS.max_pairs)
  print(f"vocabulary {FLAGS.vocabulary}: {processor.get_piece_size()} pieces")
  print("\n".join(report(processor, sets, [int(n) for n in FLAGS.lengths])))


if __name__ == "__main__":
  _define_flags()
  app.run(main)
