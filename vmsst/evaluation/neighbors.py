"""Exact k-nearest-neighbour search by cosine in bounded memory.

Mining (mining.py) needs the k nearest targets of every source sentence and
the reverse, on sets as large as 10^6 x 10^6, where the full similarity
matrix (4 TB in float32) cannot exist. `knn` therefore walks the keys in
fixed-size blocks for each block of queries and keeps only a running top-k:
memory is O(query_block * key_block + (n_queries + n_keys) * d + n_queries * k).

Two interchangeable backends give the same exact answer:
  * "jax": a jitted block kernel (one compile per block shape) computing
    the block's cosines, its top-k, and the merge with the running top-k.
  * "faiss": `faiss.IndexFlatIP` over L2-normalized float32 keys (exact,
    brute force), searched in query blocks.

Ties are broken deterministically by the lower key index first. In the jax
backend this follows from `jax.lax.top_k`, which returns the lower position
first among equal values: key blocks are visited in increasing order and the
running top-k is placed before the new block's candidates, so position order
is key-index order in every merge. faiss rows are re-sorted by (score
descending, index ascending) so their order matches; which of several keys
tied at the k-th place faiss keeps is its own choice (the lower index in the
faiss-cpu versions tested, see tests/evaluation/test_neighbors.py).
"""

import functools
from typing import Literal

import jax
import jax.numpy as jnp
import numpy as np

from vmsst.evaluation import similarity

Backend = Literal["jax", "faiss"]


def knn(queries: np.ndarray, keys: np.ndarray, k: int, *, query_block: int = 2048,
        key_block: int = 8192, backend: Backend = "jax") -> tuple[np.ndarray, np.ndarray]:
  """The k keys nearest by cosine to every query, best first.

  Args:
    queries: float [nq, d] embeddings; need not be normalized.
    keys: float [nk, d] embeddings; need not be normalized.
    k: neighbours per query, 1 <= k <= nk.
    query_block: queries per block (the last block is zero-padded).
    key_block: keys per block, raised to k if smaller (a block must hold a
      full top-k); the last block is padded and its padding masked to -inf.
    backend: "jax" (streamed block kernel) or "faiss" (IndexFlatIP).

  Returns:
    (scores float32 [nq, k], indices int64 [nq, k]): cosines in descending
    order and the keys' row indices; equal cosines list the lower index first.

  Raises:
    ValueError: on non-2-D inputs, mismatched widths, k out of range or an
      unknown backend.
  """
  queries, keys = _check(queries, keys, k, query_block, key_block)
  if backend == "jax":
    return _knn_jax(queries, keys, k, query_block, max(k, key_block))
  if backend == "faiss":
    return _knn_faiss(queries, keys, k, query_block)
  raise ValueError(f"knn backend must be 'jax' or 'faiss', got {backend!r}.")


def _check(queries, keys, k, query_block, key_block) -> tuple[np.ndarray, np.ndarray]:
  """Validated float32 views of the inputs; raises ValueError saying what to fix."""
  queries = np.asarray(queries, np.float32)
  keys = np.asarray(keys, np.float32)
  if queries.ndim != 2 or keys.ndim != 2:
    raise ValueError(f"knn needs 2-D [n, d] arrays, got queries {queries.shape} and "
                     f"keys {keys.shape}.")
  if queries.shape[1] != keys.shape[1]:
    raise ValueError(f"queries have width {queries.shape[1]} but keys {keys.shape[1]}; "
                     "embed both with the same encoder.")
  if not 1 <= k <= len(keys):
    raise ValueError(f"k={k} nearest neighbours requested but there are {len(keys)} keys; "
                     f"pass 1 <= k <= {len(keys)}.")
  if query_block < 1 or key_block < 1:
    raise ValueError(f"block sizes must be positive, got query_block={query_block}, "
                     f"key_block={key_block}.")
  return queries, keys


def _knn_jax(queries: np.ndarray, keys: np.ndarray, k: int, query_block: int,
             key_block: int) -> tuple[np.ndarray, np.ndarray]:
  """Host loop over query blocks, and within each over key blocks (streamed)."""
  nq = len(queries)
  query_block = min(query_block, max(nq, 1))
  key_block = min(key_block, len(keys))
  scores = np.empty((nq, k), np.float32)
  indices = np.empty((nq, k), np.int64)
  for start in range(0, nq, query_block):
    block = _padded(similarity.normalize(queries[start:start + query_block]), query_block)
    best_scores = jnp.full((query_block, k), -jnp.inf, jnp.float32)
    best_indices = jnp.zeros((query_block, k), jnp.int32)
    for offset in range(0, len(keys), key_block):
      key_rows = keys[offset:offset + key_block]
      best_scores, best_indices = _merge_block(
          best_scores, best_indices, block, _padded(key_rows, key_block),
          np.int32(offset), np.int32(len(key_rows)), k=k)
    stop = min(start + query_block, nq)
    scores[start:stop] = np.asarray(best_scores)[:stop - start]
    indices[start:stop] = np.asarray(best_indices)[:stop - start]
  return scores, indices


def _padded(rows: np.ndarray, size: int) -> np.ndarray:
  """float32 [size, d]: `rows` followed by zero rows, so every block has one shape."""
  if len(rows) == size:
    return np.ascontiguousarray(rows, np.float32)
  out = np.zeros((size, rows.shape[1]), np.float32)
  out[:len(rows)] = rows
  return out


@functools.partial(jax.jit, static_argnames=("k",))
def _merge_block(best_scores: jax.Array, best_indices: jax.Array, queries: jax.Array,
                 keys: jax.Array, offset: jax.Array, num_valid: jax.Array, *,
                 k: int) -> tuple[jax.Array, jax.Array]:
  """Running top-k merged with one key block's top-k.

  Args:
    best_scores: float32 [bq, k] running top-k cosines (-inf before any block).
    best_indices: int32 [bq, k] their global key indices, all below `offset`.
    queries: float32 [bq, d], unit rows (zero rows for padding).
    keys: float32 [bk, d] raw key block; rows >= num_valid are padding.
    offset: int32 scalar, global index of the block's first key.
    num_valid: int32 scalar, real keys in this block (traced, so the padded
      last block reuses the compiled kernel).
    k: neighbours kept (static).

  Returns:
    The merged (float32 [bq, k], int32 [bq, k]); padding never survives
    because it scores -inf and the keys seen so far number at least k.
  """
  keys = keys / jnp.clip(jnp.linalg.norm(keys, axis=-1, keepdims=True), 1e-12)
  sims = jnp.matmul(queries, keys.T, precision=jax.lax.Precision.HIGHEST)
  sims = jnp.where(jnp.arange(keys.shape[0]) < num_valid, sims, -jnp.inf)
  block_scores, block_positions = jax.lax.top_k(sims, k)
  # Running entries first: top_k prefers lower positions among ties, and every
  # running index is lower than every index of this block.
  scores = jnp.concatenate([best_scores, block_scores], axis=1)
  indices = jnp.concatenate([best_indices, block_positions + offset], axis=1)
  merged, positions = jax.lax.top_k(scores, k)
  return merged, jnp.take_along_axis(indices, positions, axis=1)


def _knn_faiss(queries: np.ndarray, keys: np.ndarray, k: int,
               query_block: int) -> tuple[np.ndarray, np.ndarray]:
  """Exact search with faiss.IndexFlatIP; rows re-sorted to the documented tie order."""
  import faiss  # pylint: disable=import-outside-toplevel
  index = faiss.IndexFlatIP(keys.shape[1])
  index.add(similarity.normalize(keys))
  scores = np.empty((len(queries), k), np.float32)
  indices = np.empty((len(queries), k), np.int64)
  for start in range(0, len(queries), query_block):
    block_scores, block_indices = index.search(
        similarity.normalize(queries[start:start + query_block]), k)
    order = np.lexsort((block_indices, -block_scores), axis=1)
    scores[start:start + query_block] = np.take_along_axis(block_scores, order, axis=1)
    indices[start:start + query_block] = np.take_along_axis(block_indices, order, axis=1)
  return scores, indices
