"""Rows holding the same vector: each candidate joined by the lowest rows of its vector.

Identical vectors (sentences cut at the same length, or repeated) tie exactly,
and the lower rows must win; a float32 search may propose any copies of a
large group, so every copy brings its group's lowest rows before the float64
re-score (exact_scores.py). Found by hashing the rows block by block and
comparing the rows whose hashes collide, in bounded memory.
"""

import functools

import numpy as np

TWIN_BLOCK = 8192  # key rows hashed or compared at a time (`_twin_rows`): 32 MiB at d = 512


def with_twins(found: np.ndarray, keys: np.ndarray, k: int) -> np.ndarray:
  """Candidate rows [n, c'] holding, for each candidate, the first k rows of its vector.

  Why: rows that hold the same vector (sentences cut at the same length, or
  repeated) tie exactly, and the lower rows must win; but float32 products
  of equal rows in different blocks or device slices can round apart, so a
  float32 search may propose any k + TIE_MARGIN copies of a large group.
  Every copy proposed brings its group's k lowest rows, so the re-score sees
  them whatever the float32 order. Returns `found` unchanged when no two
  keys are equal; otherwise sorted rows, each once, -1 filling.
  """
  twins = _twin_rows(keys, k)
  if twins is None:
    return found
  found = np.asarray(found, np.int64)
  rows = np.where(found[..., None] >= 0, twins[np.maximum(found, 0)], -1)
  rows = np.sort(rows.reshape(len(found), -1), axis=1)
  repeated = np.zeros(rows.shape, bool)
  repeated[:, 1:] = rows[:, 1:] == rows[:, :-1]
  return np.where(repeated, -1, rows)


def _twin_rows(keys: np.ndarray, k: int, *, block: int = TWIN_BLOCK,
               row_hash=None) -> np.ndarray | None:
  """int64 [m, k]: each key's group of equal rows, its k lowest rows (-1 filling); None
  when every row differs.

  Why hashes: sorting whole rows bytewise (np.unique over the rows as bytes)
  needs a contiguous copy of every key (a memory map of 10^6 x 512 float32
  read whole into memory) and compares d-wide rows at every step. Here the
  keys are read `block` rows at a time and each row reduced to a 64-bit hash
  of its bytes (`_row_hashes`), so only m hashes are sorted. Equal rows hash
  equal, so rows of different hashes differ; rows sharing a hash are
  compared byte for byte (`_equal_rows`) and a collision never joins two
  different vectors. `row_hash` (rows -> uint64 [r]) replaces the hash in tests.
  """
  row_hash = row_hash or _row_hashes
  if not len(keys):
    return None
  hashes = np.concatenate([row_hash(keys[start:start + block])
                           for start in range(0, len(keys), block)])
  by_hash = np.argsort(hashes, kind="stable")  # equal hashes together, rows ascending
  hashes = hashes[by_hash]
  shared = np.zeros(len(keys), bool)
  shared[1:] = hashes[1:] == hashes[:-1]
  shared[:-1] |= shared[1:]
  if not shared.any():
    return None
  rows, hashes = by_hash[shared], hashes[shared]  # rows whose hash another row shares
  first = np.ones(len(rows), bool)
  first[1:] = hashes[1:] != hashes[:-1]
  root = _equal_rows(keys, rows, np.maximum.accumulate(np.where(first, np.arange(len(rows)), 0)),
                     block)
  return _lowest_of_groups(len(keys), rows, root, k)


def _row_hashes(rows: np.ndarray) -> np.ndarray:
  """uint64 [r]: a hash of each row's bytes, sum_j word_j * M_j modulo 2^64.

  Why this one: a row's 4-byte words times fixed odd 64-bit multipliers,
  summed with wrapping, cost one integer pass over the block and depend on
  the bytes only (equal rows, equal hashes, -0.0 and 0.0 apart as np.unique
  over bytes keeps them); collisions are merely rare, `_twin_rows` checks.
  """
  words = _words(rows)
  return words.astype(np.uint64) @ _multipliers(words.shape[1])


@functools.lru_cache(maxsize=8)
def _multipliers(width: int) -> np.ndarray:
  """uint64 [width]: fixed odd multipliers, one per word of a row (seeded: the same each run)."""
  return np.random.default_rng(0x7717).integers(0, 2**64, width, np.uint64, endpoint=False) | 1


def _equal_rows(keys: np.ndarray, rows: np.ndarray, head: np.ndarray,
                block: int) -> np.ndarray:
  """int64 [len(rows)]: for each of `rows`, the lowest of them holding the same bytes.

  rows: key rows grouped by hash, ascending within a group; head: the position in
  `rows` of each one's hash group's first (lowest) row. Each row is compared with
  its group's lowest row, `block` rows at a time in file order (a memory map is
  read in pieces); the few that differ (hash collisions) are grouped among
  themselves by their bytes, as rows of another hash cannot equal them.
  """
  root = rows[head]
  by_row = np.argsort(rows)
  for start in range(0, len(rows), block):
    part = by_row[start:start + block]
    left, right = np.unique(rows[part]), np.unique(root[part])
    # Compared as bytes, not floats: NaN rows are equal, 0.0 and -0.0 are not.
    same = np.all(_words(keys[left])[np.searchsorted(left, rows[part])]
                  == _words(keys[right])[np.searchsorted(right, root[part])], axis=1)
    root[part[~same]] = -1
  differ = np.flatnonzero(root < 0)
  if len(differ):
    order = np.argsort(rows[differ])
    differ = differ[order]
    whole = _words(keys[rows[differ]])
    whole = whole.view(np.dtype((np.void, whole.itemsize * whole.shape[1])))[:, 0]
    _, first, group = np.unique(whole, return_index=True, return_inverse=True)
    root[differ] = rows[differ][first][group.reshape(-1)]
  return root


def _words(rows: np.ndarray) -> np.ndarray:
  """[r, w]: each row's bytes as 4-byte words (uint32; uint8 when a row's bytes do not
  divide by 4), for hashing and exact comparison."""
  words = np.ascontiguousarray(rows).reshape(len(rows), -1).view(np.uint8)
  return words.view(np.uint32) if words.shape[1] % 4 == 0 else words


def _lowest_of_groups(num_keys: int, rows: np.ndarray, root: np.ndarray,
                      k: int) -> np.ndarray | None:
  """int64 [num_keys, k]: each key's group's k lowest rows (-1 filling); None if no group
  has two rows. rows: the keys in groups of more than one possible row; root: each one's
  group's lowest row (a row alone in its group is its own root)."""
  order = np.lexsort((rows, root))
  rows, root = rows[order], root[order]
  first = np.ones(len(rows), bool)
  first[1:] = root[1:] != root[:-1]
  starts = np.flatnonzero(first)
  sizes = np.diff(np.append(starts, len(rows)))
  if sizes.max() == 1:
    return None
  lowest = np.full((num_keys, k), -1, np.int64)
  lowest[:, 0] = np.arange(num_keys)
  group = np.cumsum(first) - 1
  for j in range(k):
    has = sizes[group] > j
    lowest[rows[has], j] = rows[starts[group[has]] + j]
  return lowest
