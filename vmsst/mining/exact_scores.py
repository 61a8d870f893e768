"""The float64 re-score that makes every neighbour list independent of how it was searched.

A float32 product rounds differently with the geometry of the search (a key
shard's matmul against a key block's, one device slice against eight), so two
searches over the same vectors disagreed in the last float32 bit, flipped
near-ties and mined different pairs (docs/results/beam_mining/README.md). So
the float32 search (neighbors.py, approximate.py) only proposes candidates:
k + TIE_MARGIN keys (`candidates`: a key that float32 rounding pushed just past
the k-th place is still there), each joined by the lowest rows holding the
same vector (twin_rows.py). Each candidate is re-scored from the float32
vectors in float64 by one fixed computation per (query, key) and ordered by
(cosine descending, key row ascending) (`best_k`): the same scores and order
however the keys are blocked, split over devices or sharded over machines.
`approximate.merge_top_k` merges shards' lists by the same rule.
"""

import numpy as np

TIE_MARGIN = 4  # float32 candidates past k, re-scored in float64 (`candidates`)
RESCORE_BLOCK = 1024  # queries re-scored at a time: [1024, k', d] float64 gathered rows


def candidates(k: int, num_keys: int) -> int:
  """Keys the float32 search proposes per query for the float64 re-score to keep k of.

  Float32 rounding moves a cosine by about 1e-7, so a key among the true k
  best can rank below keys within 1e-7 of it; with TIE_MARGIN more
  candidates it is lost only when more than TIE_MARGIN such near-equal keys
  all outrank it in float32.
  """
  return min(num_keys, k + TIE_MARGIN)


def rescore(queries: np.ndarray, keys: np.ndarray, found: np.ndarray,
            k: int) -> tuple[np.ndarray, np.ndarray]:
  """The k best of each query's candidate keys by float64 cosine, ties to the lower row.

  Why float64 and this computation: every (query, key) cosine is the sum over
  d of exact products of the rows normalized in float64, reduced along one
  contiguous axis (numpy's fixed pairwise order), so it depends on the two
  rows only, never on which other rows were searched with them; identical
  vectors score identically and the lower row wins.

  Args:
    queries: float [n, d] rows as searched (need not be unit; memory-mapped is fine).
    keys: float [m, d] rows (or anything indexable by a sorted int array, as
      beam_pipeline.ShardedRows).
    found: int [n, c] candidate key rows, c >= k; -1 marks no candidate (kept
      last, as -1 with cosine -inf).
    k: rows kept.

  Returns:
    (float64 [n, k] cosines descending, int64 [n, k] key rows).
  """
  found = np.asarray(found, np.int64)
  scores = np.empty((len(found), k), np.float64)
  rows = np.empty((len(found), k), np.int64)
  for start in range(0, len(found), RESCORE_BLOCK):
    part = found[start:start + RESCORE_BLOCK]
    safe = np.where(part < 0, 0, part)
    unique = np.unique(safe)  # sorted: a memory map is read in file order
    gathered = _unit64(keys[unique])[np.searchsorted(unique, safe)]  # [q, c, d]
    block = _unit64(queries[start:start + len(part)])
    cosines = np.sum(block[:, None, :] * gathered, axis=-1)
    cosines = np.where(part < 0, -np.inf, cosines)
    scores[start:start + len(part)], rows[start:start + len(part)] = best_k(cosines, part, k)
  return scores, rows


def best_k(scores: np.ndarray, rows: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
  """Each row's k best (score, key row) by score descending, then key row ascending.

  The one order of every list here, whether one search made it or shards'
  lists were merged (approximate.merge_top_k).
  """
  order = np.lexsort((rows, -scores), axis=1)[:, :k]
  return np.take_along_axis(scores, order, axis=1), np.take_along_axis(rows, order, axis=1)


def _unit64(rows) -> np.ndarray:
  """float64 [r, d]: rows scaled to unit L2 norm (zero rows stay zero), row by row."""
  rows = np.asarray(rows, np.float64)
  norms = np.sqrt(np.sum(rows * rows, axis=-1, keepdims=True))
  return rows / np.maximum(norms, 1e-12)
