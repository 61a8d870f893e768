"""A model's int8 calibration measured on a file of sentences (`python -m vmsst.calibrate`).

The per-dimension ranges themselves live in quantize.py; this module reads the
calibration set and encodes it, for the calibrate command and for
`python -m vmsst.export --calibration`.
"""

from typing import Callable

from vmsst.base import files
from vmsst.base import text_files
from vmsst.encoding import protocol
from vmsst.encoding import quantize


def calibration_sentences(path: str) -> list[str]:
  """The distinct non-blank lines of `path`, in file order.

  Raises:
    ValueError: naming the file, when it holds fewer than 2 such lines.
  """
  sentences = list(dict.fromkeys(line for line in text_files.read_lines(path) if line.strip()))
  if len(sentences) < 2:
    raise ValueError(f"{path} has {len(sentences)} distinct non-empty lines; a calibration "
                     "needs many (thousands of sentences like those the model will embed).")
  return sentences


def calibrate_file(get_encoder: Callable[[], protocol.UniqueSentences], input_path: str,
                   output_dir: str) -> str:
  """Embeds the calibration set, saves its ranges in `output_dir`; returns a summary."""
  sentences = calibration_sentences(input_path)
  embeddings = get_encoder().encode(sentences, desc=files.name(input_path))
  calibration = quantize.calibrate(embeddings, files.name(input_path))
  files.makedirs(output_dir)
  path = quantize.save(output_dir, calibration)
  return (f"{input_path}: {len(sentences)} distinct sentences -> per-dimension ranges of "
          f"{calibration.dimension} dimensions; wrote {path}")
