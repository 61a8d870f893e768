"""Quantized embeddings: sentence-transformers' layouts exactly, the calibration saved and read."""

import uuid

import numpy as np
import pytest
# torch, transformers and sentence-transformers load in the tests that use them: each xdist
# worker imports every test module to collect it, whichever tier it runs.

from vmsst.base import files
from vmsst.base import run_directory
from vmsst.encoding import quantize


def _embeddings(rows=300, dim=37, seed=0):
  """Float32 vectors with a constant dimension, zeros and ties to exercise every edge."""
  rng = np.random.default_rng(seed)
  vectors = rng.normal(size=(rows, dim)).astype(np.float32) * rng.uniform(0.1, 3, dim)
  vectors[:, 3] = 0.25  # a constant dimension: step 0 in sentence-transformers' formula
  vectors[::7, 5] = 0.0  # exact zeros: not > 0, so a 0 bit
  return vectors.astype(np.float32)


@pytest.mark.parametrize("precision", quantize.PRECISIONS)
def test_layouts_equal_sentence_transformers_quantize_embeddings(precision):
  from sentence_transformers.util import quantization as st_quantization  # pylint: disable=import-outside-toplevel
  calibration, vectors = _embeddings(seed=0), _embeddings(rows=50, seed=1) * 1.3  # some outside
  ranges = quantize.ranges_of(calibration)
  ours = quantize.quantize(vectors, precision, ranges if precision in quantize.CALIBRATED
                           else None)
  theirs = st_quantization.quantize_embeddings(vectors, precision,
                                               calibration_embeddings=calibration)
  assert ours.dtype == theirs.dtype == quantize.output_dtype(precision)
  assert ours.shape == theirs.shape == (50, quantize.code_width(precision, 37))
  np.testing.assert_array_equal(ours, theirs)
  assert ours[0].nbytes == quantize.bytes_per_vector(precision, 37)


def test_bytes_per_vector_are_4d_d_and_d_over_8():
  assert [quantize.bytes_per_vector(p, 256) for p in quantize.PRECISIONS] == [1024, 256, 256,
                                                                              32, 32]


def test_int8_without_ranges_and_unknown_precisions_are_errors_naming_the_fix():
  with pytest.raises(ValueError, match="vmsst.calibrate"):
    quantize.quantize(_embeddings(), "int8")
  with pytest.raises(ValueError, match="ubinary"):
    quantize.quantize(_embeddings(), "int4")
  with pytest.raises(ValueError, match=r"\(2, 37\)"):
    quantize.quantize(_embeddings(), "uint8", np.zeros((2, 8), np.float32))
  with pytest.raises(ValueError, match="float"):
    quantize.quantize(np.zeros((2, 8), np.int8), "binary")


def test_binary_and_ubinary_differ_by_128_and_unpack_to_the_signs():
  vectors = _embeddings()
  binary, ubinary = (quantize.quantize(vectors, p) for p in ("binary", "ubinary"))
  np.testing.assert_array_equal(quantize.as_ubinary(binary, "binary"), ubinary)
  np.testing.assert_array_equal(quantize.unpacked_signs(binary, "binary", 37),
                                np.where(vectors > 0, 1.0, -1.0))


def test_dequantized_int8_is_within_one_step_of_the_vector_inside_the_range():
  vectors = _embeddings()
  ranges = quantize.ranges_of(vectors)
  back = quantize.dequantize(quantize.quantize(vectors, "int8", ranges), "int8", ranges)
  step = (ranges[1] - ranges[0]) / 255
  assert np.all(np.abs(back - vectors) <= step + 1e-6)


def _round_trip(directory):
  from sentence_transformers.util import quantization as st_quantization  # pylint: disable=import-outside-toplevel
  calibration = quantize.calibrate(_embeddings(), "calibration.txt")
  quantize.save(directory, calibration)
  loaded = quantize.load(directory)
  np.testing.assert_array_equal(loaded.ranges, calibration.ranges)
  np.testing.assert_array_equal(loaded.normalized_ranges, calibration.normalized_ranges)
  assert (loaded.sentences, loaded.source, loaded.dimension) == (300, "calibration.txt", 37)
  unit = _embeddings() / np.linalg.norm(_embeddings(), axis=1, keepdims=True)
  np.testing.assert_array_equal(
      quantize.quantize_with(unit, "int8", loaded, normalized=True, where=directory),
      st_quantization.quantize_embeddings(unit, "int8", calibration_embeddings=unit))


def test_calibration_round_trips_exactly_and_quantizes_as_sentence_transformers(tmp_path):
  _round_trip(str(tmp_path))
  assert quantize.load(str(tmp_path / "none")) is None


def test_a_calibration_in_a_bucket_round_trips(gcs):
  _round_trip(gcs.path(f"calibration-{uuid.uuid4().hex[:8]}", "model"))


def test_a_broken_calibration_file_names_itself_and_the_command(tmp_path):
  files.write_text(str(tmp_path / run_directory.CALIBRATION), '{"ranges": [[1, 2]]}')
  with pytest.raises(ValueError, match=f"{run_directory.CALIBRATION}.*vmsst.calibrate"):
    quantize.load(str(tmp_path))
  with pytest.raises(ValueError, match="has no quantization.json.*vmsst.calibrate"):
    quantize.quantize_with(_embeddings(), "uint8", None, normalized=False, where="MODEL")


def test_raw_ranges_are_cut_to_a_truncated_width():
  vectors = _embeddings()
  calibration = quantize.calibrate(vectors, "x")
  np.testing.assert_array_equal(
      quantize.quantize_with(vectors[:, :16], "uint8", calibration, normalized=False, where=""),
      quantize.quantize(vectors, "uint8", calibration.ranges)[:, :16])
