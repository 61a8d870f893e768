"""Quantized embeddings, one home: precisions, their layouts, and the int8 calibration.

The precisions and layouts are sentence-transformers' (`quantize_embeddings`),
so a vector written here is read there and vice versa (tests hold them equal):

  float32   float32 [n, d]               as encoded (4 d bytes a vector)
  int8      int8 [n, d]                  bucket of each value in its dimension's
  uint8     uint8 [n, d]                 calibrated range, 256 buckets (d bytes);
                                         int8 is uint8 - 128
  binary    int8 [n, ceil(d / 8)]        the sign bits (value > 0), packed
  ubinary   uint8 [n, ceil(d / 8)]       big-endian by np.packbits (d / 8 bytes);
                                         binary is ubinary - 128

int8 and uint8 need each dimension's range (min, max). Taken from the vectors
being quantized, the buckets would change with every batch, so one sentence
could get different codes in two calls; they come instead from a calibration
set, once per model: `python -m vmsst.calibrate` (or `export --calibration`)
writes `Calibration` beside the model (`run_directory.CALIBRATION`), and
`Encoder.encode(precision=)`, `embed --precision`, `mine --precision` and the
SavedModel's quantized signatures read it. The calibration keeps the ranges of
the raw and of the L2-normalised vectors, since `normalize` changes them.
"""

import dataclasses
import json

import numpy as np

from vmsst.base import files
from vmsst.base import run_directory

PRECISIONS = ("float32", "int8", "uint8", "binary", "ubinary")
CALIBRATED = ("int8", "uint8")  # the precisions that need a calibration
CALIBRATE_COMMAND = "python -m vmsst.calibrate --model_dir=MODEL_DIR --input=SENTENCES.txt"
FORMAT_VERSION = 1


def calibration_dir(*, model_dir: str | None = None, saved_model: str | None = None
                    ) -> str | None:
  """Where a model keeps its calibration: its directory, or a SavedModel's assets.extra/."""
  if model_dir:
    return model_dir
  return files.join(saved_model, "assets.extra") if saved_model else None


def check_precision(precision: str) -> None:
  """Raises ValueError naming the choices for a precision that is not one of PRECISIONS."""
  if precision not in PRECISIONS:
    raise ValueError(f"precision={precision!r}; pick one of {', '.join(PRECISIONS)}.")


def output_dtype(precision: str) -> np.dtype:
  """The dtype `quantize` returns for `precision`."""
  check_precision(precision)
  return np.dtype({"float32": np.float32, "int8": np.int8, "binary": np.int8}.get(
      precision, np.uint8))


def code_width(precision: str, dim: int) -> int:
  """Columns of a quantized [n, ·] matrix of d-wide vectors: d, or ceil(d / 8) packed bits."""
  check_precision(precision)
  return -(-dim // 8) if precision.endswith("binary") else dim


def bytes_per_vector(precision: str, dim: int) -> int:
  """Bytes one d-wide vector takes at `precision` (4 d, d or ceil(d / 8))."""
  return code_width(precision, dim) * output_dtype(precision).itemsize


def ranges_of(embeddings: np.ndarray) -> np.ndarray:
  """float32 [2, d]: each dimension's (min, max) over the rows, the int8 calibration."""
  embeddings = np.asarray(embeddings, np.float32)
  if embeddings.ndim != 2 or len(embeddings) < 2:
    raise ValueError(f"a calibration needs float [n, d] embeddings of n >= 2 sentences, got "
                     f"shape {embeddings.shape}.")
  return np.stack([embeddings.min(axis=0), embeddings.max(axis=0)]).astype(np.float32)


def quantize(embeddings: np.ndarray, precision: str,
             ranges: np.ndarray | None = None) -> np.ndarray:
  """float [n, d] (or [d]) embeddings at `precision`, in sentence-transformers' layout.

  Args:
    embeddings: float vectors, rows are sentences.
    precision: one of PRECISIONS.
    ranges: float [2, d], each dimension's (min, max) (`ranges_of` a
      calibration set); needed by int8 and uint8 only.

  Raises:
    ValueError: an unknown precision, integer input, or int8/uint8 without
      ranges of the vectors' width.
  """
  check_precision(precision)
  embeddings = np.asarray(embeddings)
  if not np.issubdtype(embeddings.dtype, np.floating):
    raise ValueError(f"quantize takes float embeddings, got {embeddings.dtype}.")
  if precision == "float32":
    return embeddings.astype(np.float32)
  if precision.endswith("binary"):
    packed = np.packbits(embeddings > 0, axis=-1)
    return packed if precision == "ubinary" else (packed.astype(np.int16) - 128).astype(np.int8)
  buckets = _buckets(embeddings, ranges, precision)
  return buckets.astype(np.uint8) if precision == "uint8" else (buckets - 128).astype(np.int8)


def _buckets(embeddings: np.ndarray, ranges: np.ndarray | None, precision: str) -> np.ndarray:
  """Each value's bucket 0..255 (as floats) in its dimension's range cut into 255 steps."""
  if ranges is None:
    raise ValueError(f"precision={precision} needs each dimension's range from a calibration "
                     f"set; write one with `{CALIBRATE_COMMAND}`.")
  ranges = np.asarray(ranges, np.float32)
  if ranges.shape != (2, embeddings.shape[-1]):
    raise ValueError(f"the calibration ranges are {ranges.shape}, not (2, "
                     f"{embeddings.shape[-1]}) for {embeddings.shape[-1]}-wide vectors; "
                     f"calibrate this model (`{CALIBRATE_COMMAND}`).")
  starts, steps = bucket_steps(ranges)
  return np.clip(np.floor((embeddings - starts) / steps), 0, 255)


def bucket_steps(ranges: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
  """float32 (starts [d], steps [d]) of the buckets; the SavedModel's graph uses the same."""
  ranges = np.asarray(ranges, np.float32)
  starts = ranges[0]
  steps = (ranges[1] - starts) / 255
  steps = np.where(steps == 0, 1, steps).astype(np.float32)  # a constant dimension: bucket 0
  return starts, steps


def unpacked_signs(codes: np.ndarray, precision: str, dim: int) -> np.ndarray:
  """float32 [n, d] of ±1 from binary/ubinary codes: what a Hamming distance compares."""
  bits = np.unpackbits(as_ubinary(codes, precision), axis=-1)[:, :dim]
  return bits.astype(np.float32) * 2 - 1


def as_ubinary(codes: np.ndarray, precision: str) -> np.ndarray:
  """uint8 packed bits from binary or ubinary codes (faiss' binary indexes take these)."""
  if precision == "ubinary":
    return np.asarray(codes, np.uint8)
  if precision == "binary":
    return (np.asarray(codes).astype(np.int16) + 128).astype(np.uint8)
  raise ValueError(f"as_ubinary takes binary or ubinary codes, not {precision}.")


def dequantize(codes: np.ndarray, precision: str, ranges: np.ndarray) -> np.ndarray:
  """float32 [n, d]: each int8/uint8 code's bucket centre in its dimension's range."""
  if precision not in CALIBRATED:
    raise ValueError(f"dequantize takes int8 or uint8 codes, not {precision}.")
  ranges = np.asarray(ranges, np.float32)
  steps = (ranges[1] - ranges[0]) / 255
  buckets = np.asarray(codes).astype(np.float32) + (128 if precision == "int8" else 0)
  return (ranges[0] + (buckets + 0.5) * steps).astype(np.float32)


@dataclasses.dataclass(frozen=True)
class Calibration:
  """Per-dimension ranges of a model's embeddings over a calibration set.

  Attributes:
    ranges: float32 [2, d], (min, max) of the raw embeddings.
    normalized_ranges: float32 [2, d], the same of the L2-normalised ones.
    sentences: how many distinct sentences they were measured on.
    source: where the sentences came from (a file name), for the record.
  """
  ranges: np.ndarray
  normalized_ranges: np.ndarray
  sentences: int
  source: str

  @property
  def dimension(self) -> int:
    return int(self.ranges.shape[1])

  def ranges_for(self, normalized: bool) -> np.ndarray:
    """The ranges of the vectors as they will be quantized (raw or unit-norm)."""
    return self.normalized_ranges if normalized else self.ranges


def calibrate(embeddings: np.ndarray, source: str) -> Calibration:
  """The calibration of float [n, d] embeddings of a calibration set (n >= 2)."""
  embeddings = np.asarray(embeddings, np.float32)
  norms = np.linalg.norm(embeddings, axis=1, keepdims=True)
  unit = embeddings / np.maximum(norms, np.finfo(np.float32).tiny)
  return Calibration(ranges_of(embeddings), ranges_of(unit), len(embeddings), source)


def save(directory: str, calibration: Calibration) -> str:
  """Writes `run_directory.of(directory).calibration` (JSON, every float exactly); returns its path."""
  path = run_directory.of(directory).calibration
  record = {"format_version": FORMAT_VERSION, "sentences": calibration.sentences,
            "source": calibration.source, "dimension": calibration.dimension,
            # float32 -> Python float is exact, and JSON round-trips a double exactly.
            "ranges": calibration.ranges.tolist(),
            "normalized_ranges": calibration.normalized_ranges.tolist()}
  files.write_text(path, json.dumps(record, indent=1) + "\n")
  return path


def load(directory: str) -> Calibration | None:
  """The calibration saved in `directory`, or None when there is none.

  Raises:
    ValueError: naming the file, when it is not one `save` wrote.
  """
  path = run_directory.of(directory).calibration
  if not files.exists(path):
    return None
  try:
    record = json.loads(files.read_text(path))
    ranges, unit = (np.asarray(record[key], np.float32) for key in ("ranges", "normalized_ranges"))
    calibration = Calibration(ranges, unit, int(record["sentences"]), str(record["source"]))
  except (ValueError, KeyError, TypeError) as e:
    raise ValueError(f"{path} is not a calibration ({e}); rewrite it with "
                     f"`{CALIBRATE_COMMAND}`.") from e
  if ranges.ndim != 2 or ranges.shape[0] != 2 or unit.shape != ranges.shape:
    raise ValueError(f"{path} holds ranges of shape {ranges.shape}, not (2, d); rewrite it "
                     f"with `{CALIBRATE_COMMAND}`.")
  return calibration


def require(calibration: Calibration | None, where: str, precision: str) -> Calibration:
  """`calibration`, or a ValueError saying how to write one for `where`."""
  if calibration is None:
    raise ValueError(f"precision={precision} needs the model's calibration and {where} has no "
                     f"{run_directory.CALIBRATION}; write it with `{CALIBRATE_COMMAND}`.")
  return calibration


def quantize_with(embeddings: np.ndarray, precision: str, calibration: Calibration | None,
                  *, normalized: bool, where: str) -> np.ndarray:
  """`quantize` with the model's saved ranges when the precision needs them.

  The ranges of a wider calibration are cut to the vectors' width when they
  are raw (a prefix of a vector keeps its values, e.g. a truncated
  embedding); unit-norm prefixes were renormalised, so those must match.
  """
  if precision not in CALIBRATED:
    return quantize(embeddings, precision)
  ranges = require(calibration, where, precision).ranges_for(normalized)
  width = np.shape(embeddings)[-1]
  if not normalized and width < ranges.shape[1]:
    ranges = ranges[:, :width]
  return quantize(embeddings, precision, ranges)
