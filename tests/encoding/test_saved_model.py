"""A SavedModel keeping the export contract, read as an encoder."""

import numpy as np
import pytest
import tensorflow as tf

from vmsst.encoding import saved_model


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
  encoder = saved_model.SavedModelEncoder(str(tmp_path / "sm"))
  out = encoder.encode(["ab", "ba", "aaa", ""])
  assert out.shape == (4, 16) and out.dtype == np.float32
  np.testing.assert_array_equal(out[0], out[1])  # same characters
  assert out[2][ord("a") % 16] == 3 and out[3].sum() == 0
  assert encoder.name == "sm"


def test_saved_model_without_serving_signature_is_a_clear_error(tmp_path):
  tf.saved_model.save(tf.Module(), str(tmp_path / "bare"))
  with pytest.raises(ValueError, match="no serving_default signature"):
    saved_model.SavedModelEncoder(str(tmp_path / "bare"))
