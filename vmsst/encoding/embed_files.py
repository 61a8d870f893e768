"""Embedding a text file into a .npy, and the summary a file command prints.

Shared by the embed, score and mine commands (`python -m vmsst.embed`,
`vmsst.score`, `vmsst.mine`): each reads a file of sentences, one a line,
and writes what it computed beside a one-line summary.
"""

import dataclasses
import pathlib
from typing import Callable, Sequence

from vmsst.base import cli
from vmsst.base import files
from vmsst.base import text_files
from vmsst.encoding import protocol
from vmsst.encoding import quantize
from vmsst.encoding import similarity


def open_output(path: str | pathlib.Path):
  """A UTF-8 text file for writing, "\\n" line ends, parent directories created."""
  files.makedirs(files.parent(path) or ".")
  return files.open_text(path, "w", newline="\n")


@dataclasses.dataclass(frozen=True)
class Summary:
  """What `embed_file` did, for the printed summary.

  Attributes:
    lines: lines read (= rows written).
    distinct: distinct lines, i.e. sentences actually encoded.
    empty: lines empty or only whitespace (embedded as they are).
    dim: embedding width d.
  """
  lines: int
  distinct: int
  empty: int
  dim: int
  truncated: str = ""
  precision: str = "float32"

  @property
  def layout(self) -> str:
    """The written matrix, e.g. "float32 [10, 256]" or "binary: int8 [10, 32]"."""
    shape = f"[{self.lines}, {quantize.code_width(self.precision, self.dim)}]"
    dtype = quantize.output_dtype(self.precision).name
    return (f"{dtype} {shape}" if self.precision == "float32"
            else f"{self.precision}: {dtype} {shape}")

  def __str__(self) -> str:
    return (f"{self.lines} lines -> {self.layout} ({self.distinct} distinct "
            f"encoded; {self.empty} empty line(s) embedded as empty strings{self.truncated})")


def truncation_note(encoder: protocol.UniqueSentences, sentences: Sequence[str]) -> str:
  """"; N of M distinct sentences cut to L pieces (...)" for a summary, or "".

  Only encoders that know their length say it (`count_truncated`,
  `max_seq_length`: our checkpoints and exports); the summary then never
  hides that the model saw less than the line.
  """
  truncation = encoder.truncation(sentences)
  return "" if truncation is None else f"; {truncation}"


def embed_file(get_encoder: Callable[[], protocol.UniqueSentences],
               input_path: str | pathlib.Path, output_path: str | pathlib.Path, *,
               normalize: bool = False, language: str | None = None,
               precision: str = "float32", calibration_dir: str | None = None) -> Summary:
  """Embeds every line of `input_path` and saves float32 [lines, d] to `output_path`.

  Args:
    get_encoder: builds the encoder; called only once the input has been
      read and checked, so bad input fails before a model loads.
    input_path: UTF-8 text, one sentence per line.
    output_path: written exactly there (np.save would append ".npy" to a
      name without it); parents created.
    normalize: scale rows to unit L2 norm.
    language: the lines' language; a two-tower model embeds them with its
      tower (None: tower a, English's).
    precision: "float32", or the quantized layouts of vmsst/encoding/quantize.py
      (int8/uint8 by the calibration in `calibration_dir`).

  Raises:
    ValueError: if the input is not UTF-8 (naming the line) or has no lines
      (there is no [0, d] matrix to infer d from).
  """
  sentences = text_files.read_lines(input_path)
  if not sentences:
    raise ValueError(f"{input_path} has no lines; give a file with one sentence per line.")
  encoder = get_encoder()
  embeddings = encoder.encode(sentences, desc=files.name(input_path), language=language)
  if normalize:
    embeddings = similarity.normalize(embeddings)
  dim = embeddings.shape[1]
  if precision != "float32":
    embeddings = quantize.quantize_with(
        embeddings, precision,
        quantize.load(calibration_dir) if calibration_dir and precision in quantize.CALIBRATED
        else None,
        normalized=normalize or bool(getattr(encoder.encoder, "normalized", False)),
        where=calibration_dir or "this encoder")
  files.save_npy(output_path, embeddings)
  return Summary(lines=len(sentences), distinct=len(set(sentences)),
                 empty=sum(not s.strip() for s in sentences), dim=dim,
                 truncated=truncation_note(encoder, sentences), precision=precision)


def run_file_command(argv: Sequence[str], work: Callable[[], object], done: str) -> None:
  """A command's body: extra arguments refused, bad data a cli.UserError, else a summary.

  Raises:
    cli.UserError: naming the file or flag and the fix (missing or empty
      input, bad lines, a model or SavedModel directory that is not one).
  """
  cli.check_no_arguments(argv)
  try:
    summary = work()
  except (FileNotFoundError, ValueError) as e:
    raise cli.UserError(str(e)) from e
  print(f"{summary}; wrote {done}")
