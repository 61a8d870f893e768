"""Exact-array tests of tasks/registry/feature_converters.py on a hand-made task dataset."""

import numpy as np
import pytest
import tensorflow as tf

from vmsst_tasks.registry.feature_converters import PairFeatureConverter

LENGTHS = {"tokens_a": 4, "tokens_b": 4}


def task_dataset(rows):
  """rows: (tokens_a, tokens_b, lang_a, lang_b) with ragged token lists."""
  def gen():
    for tokens_a, tokens_b, lang_a, lang_b in rows:
      yield {"tokens_a": tokens_a, "tokens_b": tokens_b, "lang_a": lang_a, "lang_b": lang_b}
  seq, scalar = tf.TensorSpec([None], tf.int32), tf.TensorSpec([], tf.int32)
  return tf.data.Dataset.from_generator(
      gen, output_signature={"tokens_a": seq, "tokens_b": seq, "lang_a": scalar, "lang_b": scalar})


ROWS = [([5, 6, 1], [7, 1], 10, 11),
        ([8, 1], [9, 9, 9, 1], 12, 13),
        ([4, 1], [3, 1], 14, 15)]


def test_converts_to_padded_model_features():
  ds = PairFeatureConverter(pack=False)(task_dataset(ROWS), LENGTHS)
  batch = next(ds.batch(3).as_numpy_iterator())
  expected = {
      "tokens_a": [[5, 6, 1, 0], [8, 1, 0, 0], [4, 1, 0, 0]],
      "tokens_b": [[7, 1, 0, 0], [9, 9, 9, 1], [3, 1, 0, 0]],
      "mask_a": [[1, 1, 1, 0], [1, 1, 0, 0], [1, 1, 0, 0]],
      "mask_b": [[1, 1, 0, 0], [1, 1, 1, 1], [1, 1, 0, 0]],
      "lang_a": [10, 12, 14],
      "lang_b": [11, 13, 15],
      "sem_side": [0, 1, 0],
  }
  assert set(batch) == set(expected)
  for key, value in expected.items():
    np.testing.assert_array_equal(batch[key], np.array(value, np.int32), err_msg=key)
    assert batch[key].dtype == np.int32, key


def test_static_shapes_and_sem_side_alternates_across_batches():
  ds = PairFeatureConverter()(task_dataset(ROWS * 4), LENGTHS).batch(4, drop_remainder=True)
  assert ds.element_spec["tokens_a"].shape.as_list() == [4, 4]
  assert ds.element_spec["lang_a"].shape.as_list() == [4]
  assert [b["sem_side"].tolist() for b in ds.as_numpy_iterator()] == [[0, 1, 0, 1]] * 3


def test_scalar_lengths_may_be_given():
  ds = PairFeatureConverter()(task_dataset(ROWS), {**LENGTHS, "lang_a": 1, "lang_b": 1})
  assert len(list(ds)) == 3


def test_too_long_input_fails_length_check():
  ds = PairFeatureConverter()(task_dataset([([5, 6, 7, 8, 1], [1], 1, 2)]), LENGTHS)
  with pytest.raises(tf.errors.InvalidArgumentError, match="tokens_a"):
    list(ds)


def test_rejects_packing_and_missing_features():
  with pytest.raises(ValueError, match="does not pack"):
    PairFeatureConverter(pack=True)
  ds = task_dataset(ROWS).map(lambda ex: {k: v for k, v in ex.items() if k != "lang_b"})
  with pytest.raises(ValueError, match="lang_b"):
    PairFeatureConverter()(ds, LENGTHS)


def test_model_feature_lengths():
  assert PairFeatureConverter().get_model_feature_lengths({"tokens_a": 5, "tokens_b": 7}) == {
      "tokens_a": 5, "tokens_b": 7, "mask_a": 5, "mask_b": 7, "lang_a": 0, "lang_b": 0, "sem_side": 0}
