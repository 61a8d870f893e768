"""Exact k-nearest-neighbour search by cosine in bounded memory, sharded over devices.

Mining (bucc.py, vmsst.mine) needs the k nearest targets of every source sentence and
the reverse, on sets as large as 10^6 x 10^6, where the full similarity
matrix (4 TB in float32) cannot exist. `knn` therefore walks the keys in
fixed-size blocks for each block of queries and keeps only a running top-k:
memory is O(query_block * key_block + (n_queries + n_keys) * d + n_queries * k).

Two interchangeable backends give the same exact answer:
  * "jax": a jitted block kernel (one compile per block shape and device
    set). Each key block is split evenly over the devices (a 1-D mesh with
    axis "keys", `jax.shard_map`): every device scores the whole query block
    against its slice, takes its own top-k, and the D per-device top-k lists
    are merged with the running top-k. Per device the block costs
    O(query_block * key_block / D) memory and 1/D of the FLOPs.
  * "faiss": `faiss.IndexFlatIP` over L2-normalized float32 keys (exact,
    brute force, threaded by OpenMP), searched in query blocks.

Mining needs both directions; `knn_both` computes each block of the cosine
matrix once and reduces it along rows and columns (half the FLOPs of two
`knn` calls; vmsst.mine uses it). Both jax paths reduce blocks with
`top_k_by_chunks`, an exact top-k at about half the cost of `lax.top_k`, and
normalize the keys once per search and keep them on the devices (one
n_keys x d copy, as faiss's index).

Every answer is re-scored in float64 (exact_scores.py; identical vectors
joined first by twin_rows.py): the float32 search only proposes candidates,
so the same scores and order come out however the keys are blocked, split
over devices or sharded over machines.
"""

import functools
from typing import Literal, Sequence

import jax
import jax.numpy as jnp
import numpy as np
import tqdm
from jax.sharding import Mesh
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from vmsst.base import console
from vmsst.encoding import similarity
from vmsst.mining import exact_scores
from vmsst.mining import twin_rows

Backend = Literal["jax", "faiss"]
_AXIS = "keys"


def knn(queries: np.ndarray, keys: np.ndarray, k: int, *, query_block: int = 2048,
        key_block: int = 8192, backend: Backend = "jax",
        devices: Sequence[jax.Device] | None = None,
        progress: str | None = None) -> tuple[np.ndarray, np.ndarray]:
  """The k keys nearest by cosine to every query, best first.

  Args:
    queries: float [nq, d] embeddings; need not be normalized.
    keys: float [nk, d] embeddings; need not be normalized.
    k: neighbours per query, 1 <= k <= nk.
    query_block: at most this many queries per block (the last block is
      zero-padded); see `block_sizes`.
    key_block: keys per block, balanced and, with D devices, made a multiple
      of D holding at least k keys per device (`block_sizes`); the last
      block is padded and its padding masked to -inf.
    backend: "jax" (streamed block kernel) or "faiss" (IndexFlatIP).
    devices: the devices each key block is split over (jax backend only);
      default all of `jax.local_devices()`. Results do not depend on it.
    progress: a tqdm description to show a bar over query blocks; None hides it.

  Returns:
    (scores float64 [nq, k], indices int64 [nq, k]): cosines in descending
    order (re-scored in float64, `rescore`) and the keys' row indices; equal
    cosines list the lower index first.

  Raises:
    ValueError: on non-2-D inputs, mismatched widths, k out of range or an
      unknown backend.
  """
  queries, keys = _check(queries, keys, k, query_block, key_block)
  depth = exact_scores.candidates(k, len(keys))
  if backend == "jax":
    devices = tuple(devices or jax.local_devices())
    _, found = _knn_jax(queries, keys, depth, query_block, key_block, devices, progress)
  elif backend == "faiss":
    _, found = _knn_faiss(queries, keys, depth, query_block, progress)
  else:
    raise ValueError(f"knn backend must be 'jax' or 'faiss', got {backend!r}.")
  return exact_scores.rescore(queries, keys, twin_rows.with_twins(found, keys, k), k)


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


def block_sizes(num_queries: int, num_keys: int, k: int, *, query_block: int, key_block: int,
                num_devices: int) -> tuple[int, int]:
  """(queries, keys) per block of the jax backend: balanced, and sharding-ready.

  The blocks a side needs at the requested size are made equal, so the last
  one carries little padding (10,000 keys in blocks of 8,192: two of 5,000,
  not 8,192 + 1,808 padded to 8,192). A key block is then D equal slices of
  at least k keys each, since every device takes a full top-k of its slice.
  Examples (k=4): 53 keys, key_block 8192, 8 devices -> 56 (8 x 7);
  10^6 keys, key_block 8192, 8 devices -> 8136 (123 blocks); 20 keys,
  key_block 2, k=6, 1 device -> 6.
  """
  def balanced(total: int, requested: int) -> int:
    return -(-total // -(-total // requested))  # ceil(total / number of blocks)
  queries = balanced(max(num_queries, 1), query_block)
  per_device = max(-(-balanced(num_keys, key_block) // num_devices), k)
  return queries, per_device * num_devices


def _knn_jax(queries: np.ndarray, keys: np.ndarray, k: int, query_block: int, key_block: int,
             devices: tuple[jax.Device, ...],
             progress: str | None) -> tuple[np.ndarray, np.ndarray]:
  """Host loop over query blocks, and within each over device-resident key blocks."""
  nq = len(queries)
  query_block, key_block = block_sizes(nq, len(keys), k, query_block=query_block,
                                       key_block=key_block, num_devices=len(devices))
  merge = _block_merger(devices, k)
  mesh = Mesh(np.asarray(devices), (_AXIS,))
  key_blocks = _device_key_blocks(keys, key_block, NamedSharding(mesh, P(_AXIS)))
  replicated = NamedSharding(mesh, P())
  empty = jax.device_put((np.full((query_block, k), -np.inf, np.float32),
                          np.zeros((query_block, k), np.int32)), replicated)
  scores = np.empty((nq, k), np.float32)
  indices = np.empty((nq, k), np.int64)
  pending = None  # the previous query block's (start, stop, result), still computing
  starts = range(0, nq, query_block)
  for start in tqdm.tqdm(starts, desc=progress, unit="block", disable=console.hide_progress(progress is None),
                         leave=False):
    # Normalizing and copying this block on the host overlaps the previous
    # block's kernels (dispatch is asynchronous); only then is it collected.
    block = jax.device_put(
        _padded(similarity.normalize(queries[start:start + query_block]), query_block),
        replicated)
    best = empty
    for offset, num_valid, key_rows in key_blocks:
      best = merge(*best, block, key_rows, offset, num_valid)
    if pending is not None:
      _collect(pending, scores, indices)
    pending = (start, min(start + query_block, nq), best)
  if pending is not None:
    _collect(pending, scores, indices)
  return scores, indices


def _device_key_blocks(keys: np.ndarray, key_block: int,
                       sharding: NamedSharding) -> list[tuple[np.int32, np.int32, jax.Array]]:
  """(offset, valid rows, unit rows float32 [key_block, d] split over the devices) per block.

  The keys are normalized and placed on the devices once per search, not once
  per query block: with 10^5 keys and 49 query blocks that saves 49 host
  copies of all keys (about 10 GB of memory traffic at d = 512). The cost is
  one normalized copy of the keys (n_keys * d * 4 bytes, as faiss keeps in
  its index), still independent of n_queries * n_keys.
  """
  blocks = []
  for offset in range(0, len(keys), key_block):
    rows = similarity.normalize(keys[offset:offset + key_block])
    blocks.append((np.int32(offset), np.int32(len(rows)),
                   jax.device_put(_padded(rows, key_block), sharding)))
  return blocks


def _collect(pending, scores: np.ndarray, indices: np.ndarray) -> None:
  """Copies a finished query block's (scores, indices) into the output rows."""
  start, stop, (best_scores, best_indices) = pending
  scores[start:stop] = np.asarray(best_scores)[:stop - start]
  indices[start:stop] = np.asarray(best_indices)[:stop - start]


def _padded(rows: np.ndarray, size: int) -> np.ndarray:
  """float32 [size, d]: `rows` followed by zero rows, so every block has one shape."""
  if len(rows) == size:
    return np.ascontiguousarray(rows, np.float32)
  out = np.zeros((size, rows.shape[1]), np.float32)
  out[:len(rows)] = rows
  return out


@functools.lru_cache(maxsize=None)
def _block_merger(devices: tuple[jax.Device, ...], k: int):
  """The jitted merge step for a device set and k (built once, compiled per block shape).

  Returns:
    merge(best_scores float32 [bq, k], best_indices int32 [bq, k],
          queries float32 [bq, d], keys float32 [bk, d], offset int32, num_valid int32)
    -> the merged (float32 [bq, k], int32 [bq, k]), replicated. `queries` and
    `keys` are unit rows (zero rows for padding); `keys` arrives split in D
    row slices, one per device; everything else is replicated.
  """
  mesh = Mesh(np.asarray(devices), (_AXIS,))
  local_top_k = jax.shard_map(functools.partial(_local_top_k, k=k), mesh=mesh,
                              in_specs=(P(), P(_AXIS), P(), P()),
                              out_specs=(P(None, _AXIS), P(None, _AXIS)))

  def merge(best_scores, best_indices, queries, keys, offset, num_valid):
    # [bq, D * k] in device order, i.e. key order: device i holds lower keys than i + 1.
    block_scores, block_indices = local_top_k(queries, keys, offset, num_valid)
    # Running entries first: top_k prefers lower positions among ties, and every
    # running index is lower than every index of this block.
    scores = jnp.concatenate([best_scores, block_scores], axis=1)
    indices = jnp.concatenate([best_indices, block_indices], axis=1)
    merged, positions = jax.lax.top_k(scores, k)
    return merged, jnp.take_along_axis(indices, positions, axis=1)

  replicated = NamedSharding(mesh, P())
  return jax.jit(merge, in_shardings=(replicated, replicated, replicated,
                                      NamedSharding(mesh, P(_AXIS)), replicated, replicated),
                 out_shardings=(replicated, replicated))


def _local_top_k(queries: jax.Array, keys: jax.Array, offset: jax.Array, num_valid: jax.Array,
                 *, k: int) -> tuple[jax.Array, jax.Array]:
  """One device's top-k over its slice of the key block.

  Args:
    queries: float32 [bq, d], unit rows (zero rows for padding), the whole query block.
    keys: float32 [bk / D, d], this device's slice of the key block, unit rows
      (normalized once per search by `_device_key_blocks`).
    offset: int32 scalar, global index of the block's first key.
    num_valid: int32 scalar, real keys in the whole block; block rows >= num_valid
      are padding (traced, so the padded last block reuses the compiled kernel).
    k: neighbours kept (static, at most bk / D).

  Returns:
    (float32 [bq, k] cosines descending, int32 [bq, k] global key indices);
    padding scores -inf.
  """
  size = keys.shape[0]
  first = jax.lax.axis_index(_AXIS) * size  # this slice's first row within the block
  sims = jax.lax.dot_general(queries, keys, (((1,), (1,)), ((), ())),
                             precision=jax.lax.Precision.HIGHEST)
  rows = first + jnp.arange(size)
  sims = jnp.where(rows < num_valid, sims, -jnp.inf)
  scores, positions = top_k_by_chunks(sims, k)
  return scores, positions + first + offset


def _knn_faiss(queries: np.ndarray, keys: np.ndarray, k: int, query_block: int,
               progress: str | None) -> tuple[np.ndarray, np.ndarray]:
  """Exact search with faiss.IndexFlatIP; rows re-sorted to the documented tie order."""
  import faiss  # pylint: disable=import-outside-toplevel
  index = faiss.IndexFlatIP(keys.shape[1])
  for start in range(0, len(keys), query_block):  # the index's copy is the only full one
    index.add(similarity.normalize(keys[start:start + query_block]))
  scores = np.empty((len(queries), k), np.float32)
  indices = np.empty((len(queries), k), np.int64)
  starts = range(0, len(queries), query_block)
  for start in tqdm.tqdm(starts, desc=progress, unit="block", disable=console.hide_progress(progress is None),
                         leave=False):
    block_scores, block_indices = index.search(
        similarity.normalize(queries[start:start + query_block]), k)
    order = np.lexsort((block_indices, -block_scores), axis=1)
    scores[start:start + query_block] = np.take_along_axis(block_scores, order, axis=1)
    indices[start:start + query_block] = np.take_along_axis(block_indices, order, axis=1)
  return scores, indices


# ------------------------------------------------- both directions from one product

BOTH_BLOCK = 1024  # a [1024, 1024] float32 block (4 MiB) stays in cache: faster than 8192


def knn_both(source: np.ndarray, target: np.ndarray, k: int, *,
             query_block: int = BOTH_BLOCK, key_block: int = BOTH_BLOCK,
             devices: Sequence[jax.Device] | None = None,
             progress: str | None = None) -> tuple[np.ndarray, ...]:
  """`knn(source, target, k)` and `knn(target, source, k)` from one pass of matmuls.

  Mining needs both directions. Two searches compute the cosine matrix twice
  (once transposed); here each [query_block, key_block] block of it is
  computed once and reduced along its rows (each source's nearest targets)
  and along its columns (each target's nearest sources, a running top-k per
  target kept on the devices). Half the FLOPs of two searches, the same
  exact answer and tie order (lower index first). The targets are split in
  D contiguous ranges, one per device, each scanned in blocks of
  key_block / D rows inside one jitted call per source block.

  Args:
    source: float [n, d]; target: float [m, d]; need not be normalized.
    k: neighbours per row, 1 <= k <= min(n, m).
    query_block, key_block: requested block sizes (see `both_block_sizes`).
    devices: as in `knn`.
    progress: a tqdm description for a bar over source blocks.

  Returns:
    (forward scores float64 [n, k], forward indices int64 [n, k],
     backward scores float64 [m, k], backward indices int64 [m, k]), re-scored
    in float64 as `knn`'s.
  """
  source, target = _check(source, target, k, query_block, key_block)
  _check(target, source, k, query_block, key_block)
  forward, backward = _float32_both(source, target, min(exact_scores.candidates(k, len(target)),
                                                        exact_scores.candidates(k, len(source))),
                                    query_block, key_block, devices, progress)
  return (*exact_scores.rescore(source, target, twin_rows.with_twins(forward, target, k), k),
          *exact_scores.rescore(target, source, twin_rows.with_twins(backward, source, k), k))


def _float32_both(source: np.ndarray, target: np.ndarray, k: int, query_block: int,
                  key_block: int, devices: Sequence[jax.Device] | None,
                  progress: str | None) -> tuple[np.ndarray, np.ndarray]:
  """`knn_both`'s float32 pass: (int [n, k] forward, int [m, k] backward candidate rows)."""
  devices = tuple(devices or jax.local_devices())
  n, m = len(source), len(target)
  query_block, per_device, blocks_per_device = both_block_sizes(
      n, m, k, query_block=query_block, key_block=key_block, num_devices=len(devices))
  key_block = per_device * len(devices)
  step = _both_step(devices, k)
  mesh = Mesh(np.asarray(devices), (_AXIS,))
  split, replicated = NamedSharding(mesh, P(_AXIS)), NamedSharding(mesh, P())
  keys = np.zeros((len(devices) * blocks_per_device * per_device, target.shape[1]), np.float32)
  for start in range(0, m, key_block):  # normalized into one padded buffer: one copy of n x d
    stop = min(start + key_block, m)
    keys[start:stop] = similarity.normalize(target[start:stop])
  keys = jax.device_put(keys.reshape(-1, per_device, keys.shape[1]), split)
  columns = jax.device_put((np.full(keys.shape[:2] + (k,), -np.inf, np.float32),
                            np.zeros(keys.shape[:2] + (k,), np.int32)), split)
  forward = (np.empty((n, k), np.float32), np.empty((n, k), np.int64))
  pending = None
  for start in tqdm.tqdm(range(0, n, query_block), desc=progress, unit="block",
                         disable=console.hide_progress(progress is None), leave=False):
    block = jax.device_put(_padded(similarity.normalize(source[start:start + query_block]),
                                   query_block), replicated)
    rows, columns = step(block, np.int32(start), np.int32(n), keys, np.int32(m), *columns)
    if pending is not None:
      _collect(pending, *forward)
    pending = (start, min(start + query_block, n), rows)
  if pending is not None:
    _collect(pending, *forward)
  return forward[1], np.asarray(columns[1]).reshape(-1, k)[:m]


def both_block_sizes(num_queries: int, num_keys: int, k: int, *, num_devices: int,
                     query_block: int = BOTH_BLOCK,
                     key_block: int = BOTH_BLOCK) -> tuple[int, int, int]:
  """(queries per block, keys per device per block, key blocks per device) of `knn_both`.

  Balanced as in `block_sizes`, then rounded up to whole chunks of
  `top_k_by_chunks` (its fast path); a query block holds at least k rows
  since every block's columns take a top-k of them. The compiled step
  depends only on these three numbers (and d, k): a call with the same
  sizes, e.g. the first query block alone against all keys, compiles it.
  """
  query_block, key_block = block_sizes(num_queries, num_keys, k, query_block=query_block,
                                       key_block=key_block, num_devices=num_devices)
  query_block = _round_up(max(query_block, k), _CHUNK)
  per_device = _round_up(key_block // num_devices, _CHUNK)
  return query_block, per_device, -(-num_keys // (per_device * num_devices))


@functools.lru_cache(maxsize=None)
def _both_step(devices: tuple[jax.Device, ...], k: int):
  """The jitted per-source-block step of `knn_both` (compiled per block shape).

  Returns:
    step(queries float32 [bq, d] (replicated), query offset int32, n int32,
         keys float32 [D * nb, bk / D, d] (split over devices on axis 0),
         m int32, column scores float32 [D * nb, bk / D, k],
         column indices int32 [D * nb, bk / D, k])
    -> ((row scores float32 [bq, k], row indices int32 [bq, k]),
        (column scores, column indices) updated; their buffers are donated).
  """
  mesh = Mesh(np.asarray(devices), (_AXIS,))
  scan = jax.shard_map(functools.partial(_scan_key_blocks, k=k), mesh=mesh,
                       in_specs=(P(), P(), P(), P(_AXIS), P(), P(_AXIS), P(_AXIS)),
                       out_specs=((P(None, _AXIS), P(None, _AXIS)), (P(_AXIS), P(_AXIS))))

  def step(queries, query_offset, num_queries, keys, num_keys, column_scores, column_indices):
    (scores, indices), columns = scan(queries, query_offset, num_queries, keys, num_keys,
                                      column_scores, column_indices)
    # [bq, D * k] in device order = key order, so ties keep the lower index.
    merged, positions = jax.lax.top_k(scores, k)
    return (merged, jnp.take_along_axis(indices, positions, axis=1)), columns

  split, replicated = NamedSharding(mesh, P(_AXIS)), NamedSharding(mesh, P())
  return jax.jit(step, in_shardings=(replicated,) * 3 + (split, replicated, split, split),
                 out_shardings=((replicated, replicated), (split, split)),
                 donate_argnums=(5, 6))


def _scan_key_blocks(queries, query_offset, num_queries, keys, num_keys, column_scores,
                     column_indices, *, k: int):
  """One device: its contiguous key range in blocks, row and column top-k of each product.

  Args:
    queries: float32 [bq, d] unit rows (zero padding); rows >= num_queries -
      query_offset are padding.
    keys: float32 [nb, b, d], this device's nb blocks of b unit rows.
    column_scores, column_indices: [nb, b, k] each key's running best sources.
  Returns:
    ((float32 [bq, k], int32 [bq, k]) this device's best keys per query,
     (float32 [nb, b, k], int32 [nb, b, k]) the updated columns).
  """
  num_blocks, size = keys.shape[:2]
  first = jax.lax.axis_index(_AXIS) * num_blocks * size
  query_ids = query_offset + jnp.arange(queries.shape[0])

  def body(best, block):
    b, block_keys, block_scores, block_indices = block
    sims = jax.lax.dot_general(queries, block_keys, (((1,), (1,)), ((), ())),
                               precision=jax.lax.Precision.HIGHEST)
    key_ids = first + b * size + jnp.arange(size)
    row_scores, row_positions = top_k_by_chunks(
        jnp.where(key_ids[None, :] < num_keys, sims, -jnp.inf), k)
    best = _merge(best, (row_scores, key_ids[row_positions]), k)
    col_scores, col_positions = top_k_by_chunks(
        jnp.where(query_ids[:, None] < num_queries, sims, -jnp.inf), k, axis=0)
    column = _merge((block_scores, block_indices), (col_scores, query_ids[col_positions]), k)
    return best, column

  # The running best varies per device (each scans its own keys).
  empty = jax.lax.pcast((jnp.full((queries.shape[0], k), -jnp.inf, jnp.float32),
                         jnp.zeros((queries.shape[0], k), jnp.int32)), (_AXIS,), to="varying")
  return jax.lax.scan(body, empty, (jnp.arange(num_blocks), keys, column_scores,
                                    column_indices))


def _merge(running, new, k: int) -> tuple[jax.Array, jax.Array]:
  """Top-k of [running, new] along the last axis; running (lower indices) first on ties."""
  scores = jnp.concatenate([running[0], new[0]], axis=-1)
  indices = jnp.concatenate([running[1], new[1]], axis=-1)
  merged, positions = jax.lax.top_k(scores, k)
  return merged, jnp.take_along_axis(indices, positions, axis=-1)


# ------------------------------------------------------------- top-k of a block

_CHUNK = 16  # measured fastest of 8-64 for 1024 x 1024 blocks (rows and columns)


def _round_up(value: int, multiple: int) -> int:
  return -(-value // multiple) * multiple


def top_k_by_chunks(scores: jax.Array, k: int, axis: int = 1) -> tuple[jax.Array, jax.Array]:
  """`jax.lax.top_k` of a 2-D block along `axis` (1: each row's, 0: each column's), exact.

  Why: on XLA:CPU `lax.top_k` over a 1024 x 1024 block of cosines takes half
  as long as the matrix product that made it (3 ms against 6.5), and mining
  takes it along rows and columns. Split the axis into chunks of _CHUNK:
  the k best entries lie in the k chunks with the largest maxima (any chunk
  holding one of them has its maximum among the k best), so a fast max
  reduction, a top-k over 1/_CHUNK of the entries and one over the k
  chunks' k * _CHUNK candidates give the same answer at about half the cost
  (rows 3.0 -> 1.6 ms, columns 3.4 -> 1.9 ms, measured). Chunk ids are
  sorted before gathering, so candidates stay in index order and equal
  values keep lax.top_k's order (lower index first). Axes that are not a
  multiple of _CHUNK, or too short to gain, use lax.top_k directly.

  Returns:
    (values [other, k] descending, int32 positions along `axis` [other, k]).
  """
  width = scores.shape[axis]
  if width % _CHUNK or width < 4 * k * _CHUNK:
    return jax.lax.top_k(scores if axis == 1 else scores.T, k)
  if axis == 1:
    tiles = scores.reshape(scores.shape[0], -1, _CHUNK)  # [other, chunks, chunk]
    maxima = tiles.max(axis=2)
  else:
    tiles = scores.reshape(-1, _CHUNK, scores.shape[1])  # [chunks, chunk, other]
    maxima = tiles.max(axis=1).T
  other = jnp.arange(maxima.shape[0])[:, None, None]
  within = jnp.arange(_CHUNK)[None, None, :]
  chunks = jnp.sort(jax.lax.top_k(maxima, k)[1], axis=1)[:, :, None]  # [other, k, 1]
  candidates = tiles[other, chunks, within] if axis == 1 else tiles[chunks, within, other]
  positions = (chunks * _CHUNK + within).reshape(-1, k * _CHUNK)
  values, best = jax.lax.top_k(candidates.reshape(-1, k * _CHUNK), k)
  return values, jnp.take_along_axis(positions, best, axis=1)
