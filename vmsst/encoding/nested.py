"""Nested (Matryoshka) embeddings at inference: the first k dimensions of a vector.

A model trained with nested sizes (vmsst/objectives/nested.py) embeds a
sentence in its first k dimensions too. Truncating keeps the prefix; the
vectors are then renormalised where the caller normalises (`Encoder.encode(...,
normalize=True)`, `embed --normalize`) and compared by cosine everywhere else,
so a prefix is used exactly as the full vector is. `TruncatedEncoder` wraps any
encoder of the protocol, so every suite, `embed`, `score` and `mine` take
`--truncate_dim` through the one encoder they build.
"""

from typing import Sequence

import numpy as np

from vmsst.base import cli


def truncate(embeddings: np.ndarray, truncate_dim: int | None) -> np.ndarray:
  """embeddings [..., d] -> [..., k]: the first k = truncate_dim dimensions (None: all).

  Raises:
    cli.UserError: k outside 1..d, naming --truncate_dim.
  """
  if truncate_dim is None:
    return embeddings
  dim = embeddings.shape[-1]
  if not 1 <= truncate_dim <= dim:
    raise cli.UserError(f"--truncate_dim={truncate_dim}: the model's embeddings have {dim} "
                        f"dimensions; give a size from 1 to {dim} (a nested size of the model "
                        "keeps most of its quality).")
  return np.ascontiguousarray(embeddings[..., :truncate_dim])


class TruncatedEncoder:
  """Any encoder (protocol.Encoder) whose vectors are cut to their first `truncate_dim`."""

  def __init__(self, encoder, truncate_dim: int):
    if truncate_dim < 1:
      raise cli.UserError(f"--truncate_dim={truncate_dim} must be positive.")
    self.encoder, self.truncate_dim = encoder, truncate_dim
    self.name = encoder.name

  def encode(self, sentences: Sequence[str], **options) -> np.ndarray:
    return truncate(self.encoder.encode(sentences, **options), self.truncate_dim)

  def __getattr__(self, name):
    """Everything else (tower_of, max_seq_length, count_truncated, ...) is the wrapped
    encoder's, so a truncated encoder is used exactly as the one it wraps."""
    if name == "encoder":
      raise AttributeError(name)
    return getattr(self.encoder, name)
