"""Cosine similarity of embeddings: the one scoring rule every benchmark shares."""

import numpy as np


def normalize(x: np.ndarray) -> np.ndarray:
  """Rows of float [n, d] scaled to unit L2 norm (zero rows stay zero)."""
  x = np.asarray(x, np.float32)
  return x / np.linalg.norm(x, axis=-1, keepdims=True).clip(1e-12)


def paired_cosine(a: np.ndarray, b: np.ndarray) -> np.ndarray:
  """float32 [n]: cosine of row i of `a` with row i of `b`."""
  return np.sum(normalize(a) * normalize(b), axis=-1)


def cosine_matrix(a: np.ndarray, b: np.ndarray) -> np.ndarray:
  """float32 [n, m] of all cosines; for small sets (see neighbors.py for large)."""
  return normalize(a) @ normalize(b).T
