"""Truncated (nested) embeddings at inference: the first k dimensions, any encoder."""

import numpy as np
import pytest

from vmsst.base import cli
from vmsst.encoding import nested
from vmsst.encoding import protocol
from vmsst.encoding.api import Encoder

TABLE = {"a": [3.0, 4.0, 12.0, 1.0], "b": [1.0, 0.0, 0.0, 2.0]}


def test_truncate_keeps_the_first_k_dimensions_and_names_the_flag_when_out_of_range():
  x = np.arange(8, dtype=np.float32).reshape(2, 4)
  np.testing.assert_array_equal(nested.truncate(x, 2), [[0, 1], [4, 5]])
  assert nested.truncate(x, None) is x
  for k in (0, 5):
    with pytest.raises(cli.UserError, match="truncate_dim"):
      nested.truncate(x, k)


def test_encoder_encode_truncates_then_renormalises_when_asked():
  encoder = Encoder(protocol.PrecomputedEncoder(TABLE), dimension=4)
  np.testing.assert_array_equal(encoder.encode(["a", "b"], truncate_dim=2), [[3, 4], [1, 0]])
  np.testing.assert_allclose(encoder.encode("a", truncate_dim=2, normalize=True), [0.6, 0.8])
  assert encoder.encode([], truncate_dim=3).shape == (0, 3)


def test_truncated_encoder_wraps_any_encoder_for_the_suites_and_commands():
  wrapped = nested.TruncatedEncoder(protocol.PrecomputedEncoder(TABLE, name="table"), 3)
  assert wrapped.name == "table" and wrapped.table is not None  # the rest is the inner's
  unique = protocol.UniqueSentences(wrapped, batch_size=2, progress=False)
  np.testing.assert_array_equal(unique.encode(["b", "a", "b"]), [[1, 0, 0], [3, 4, 12], [1, 0, 0]])
