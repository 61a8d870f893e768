"""The encoder contract's wrappers: each sentence once, longest first; precomputed vectors."""

import numpy as np
import pytest

from vmsst.encoding import protocol
from vmsst_testing import HandEncoder


def test_unique_sentences_encodes_each_sentence_once_longest_first():
  inner = HandEncoder()
  unique = protocol.UniqueSentences(inner, batch_size=2, progress=False)
  out = unique.encode(["bb", "a", "bb", "cccc", "a"])
  np.testing.assert_array_equal(out[:, 0], [2, 1, 2, 4, 1])
  assert inner.batches == [["cccc", "bb"], ["a"]]
  unique.encode(["a", "dd"])  # cached sentences are not encoded again
  assert inner.batches[-1] == ["dd"]
  assert unique.encode([]).shape[0] == 0


def test_precomputed_encoder_names_a_missing_sentence():
  encoder = protocol.PrecomputedEncoder({"x": [1.0, 0.0]})
  with pytest.raises(KeyError, match="'y'"):
    encoder.encode(["x", "y"])
