"""Approximate k-nearest-neighbour search by cosine (faiss IVF) for corpus-scale mining.

An exact search costs O(n * m * d): at 10^6 x 10^6 it is hours on a small
CPU, at 10^8 x 10^8 years. LASER mines web-scale corpora the way this module
does: the keys go into an inverted-file index (k-means cells trained on a
sample of the keys), each query scans only the `nprobe` cells nearest to it,
and the margin scores are computed on those approximate neighbours. The
cost per query falls from m to about m * nprobe / nlist key comparisons.

Memory is bounded by the index, never by n x m: the keys are added and the
queries searched in blocks, so both may be `.npy` files memory-mapped from
disk (np.load(..., mmap_mode="r")); only one block of each is resident
beside the index. IVF-Flat keeps the m x d float32 keys (4 GB at 10^6, d =
512 is 2 GB); `sq8` keeps one byte per dimension (faiss's 8-bit scalar
quantizer: 512 MB at 10^6, d = 512), a quarter of the bytes each query
scans, which is what bounds a scan on a CPU (bench/RESULTS.md: half the
search time, the same recall); `pq` > 0 keeps `pq` bytes per key (IVF-PQ,
64 bytes per key = 64 MB at 10^6, 6.4 GB at 10^8). With either code,
RERANK * k candidates are re-scored by their exact cosines from the keys (a
gather of rows per query from the memory map), of which the k best are
kept: the margin sees true cosines of approximate neighbours.

Scaling: faiss runs the search on all CPU cores (OpenMP), not over JAX
devices; beyond one machine the queries split into independent shards
(each searches the same index) and the keys into index shards whose top-k
lists merge exactly as `neighbors.knn` merges its device slices.

Rows come back as `neighbors.knn` returns them: cosines descending, ties by
the lower key index, indices int64. A row that found fewer than k
neighbours (possible only with tiny cells and nprobe) is an error naming
the fix.
"""

import dataclasses

import numpy as np
import tqdm

from vmsst.evaluation import similarity

TRAIN_PER_CELL = 64  # k-means sample per cell (faiss asks for 39 to 256)
RERANK = 4  # IVF-PQ / SQ8: candidates per neighbour re-scored by exact cosine


@dataclasses.dataclass(frozen=True)
class IvfOptions:
  """Index geometry; the defaults measured recall@4 >= 0.98 (bench/mining.py).

  Attributes:
    nlist: k-means cells; 0 picks 4 * sqrt(m) (faiss's guideline), at most m / 39.
    nprobe: cells scanned per query (recall rises, speed falls with it).
    pq: bytes per key for product quantization; 0 keeps the keys exact (IVF-Flat).
    sq8: one byte per dimension (8-bit scalar quantization) instead of float32 keys.
    train_size: keys sampled to train the cells (and the PQ codebooks); 0 takes
      TRAIN_PER_CELL per cell, at least 100,000 (`training_keys`).
    block: rows added or searched per call (bounds the resident copy of a memmap).
    seed: for the training sample and k-means.
  """
  nlist: int = 0
  nprobe: int = 16
  pq: int = 0
  sq8: bool = False
  train_size: int = 0
  block: int = 65_536
  seed: int = 0

  def check(self, num_keys: int, dim: int) -> None:
    """Raises ValueError naming the flag to change, for geometry faiss would reject."""
    if self.nlist < 0 or self.train_size < 0 or self.nprobe < 1 or self.block < 1:
      raise ValueError(f"--nlist={self.nlist} and --train_size={self.train_size} must be >= 0 "
                       f"(0: automatic) and --nprobe={self.nprobe} must be >= 1.")
    if self.pq and self.sq8:
      raise ValueError(f"--pq={self.pq} and --sq8 are two codes for the keys; pass one.")
    if self.pq and (self.pq < 0 or dim % self.pq):
      raise ValueError(f"--pq={self.pq} must divide the embedding width {dim} "
                       f"(e.g. --pq={_divisor_near(dim, 64)}); --pq=0 keeps exact keys.")
    if self.cells(num_keys) > num_keys:
      raise ValueError(f"--nlist={self.nlist} exceeds the {num_keys} keys; pass --nlist=0 "
                       "(automatic) or use --index=exact for so few sentences.")

  def training_keys(self, num_keys: int) -> int:
    """Keys sampled for k-means: `train_size`, or TRAIN_PER_CELL per cell (>= 100,000).

    At 10^6 keys (4,000 cells) a 10^5 sample is 25 points per cell, below
    faiss's floor of 39, and recall@4 stopped at 0.96 however many cells were
    probed (0.97 at nprobe 64); 64 per cell gave 0.996 at nprobe 16 for the
    same search time (bench/RESULTS.md, corpus-scale mining).
    """
    wanted = self.train_size or max(100_000, TRAIN_PER_CELL * self.cells(num_keys))
    return min(num_keys, wanted)

  def cells(self, num_keys: int) -> int:
    """The number of cells for `num_keys` keys."""
    if self.nlist:
      return self.nlist
    return max(1, min(int(4 * np.sqrt(num_keys)), num_keys // 39))


def _divisor_near(dim: int, target: int) -> int:
  return min((q for q in range(1, dim + 1) if dim % q == 0), key=lambda q: abs(q - target))


def build_index(keys: np.ndarray, options: IvfOptions, progress: str | None = None):
  """A trained faiss IVF index over the L2-normalized keys, added block by block."""
  import faiss  # pylint: disable=import-outside-toplevel
  num_keys, dim = keys.shape
  options.check(num_keys, dim)
  cells = options.cells(num_keys)
  quantizer = faiss.IndexFlatIP(dim)
  if options.pq:
    index = faiss.IndexIVFPQ(quantizer, dim, cells, options.pq, 8, faiss.METRIC_INNER_PRODUCT)
  elif options.sq8:
    index = faiss.IndexIVFScalarQuantizer(quantizer, dim, cells, faiss.ScalarQuantizer.QT_8bit,
                                          faiss.METRIC_INNER_PRODUCT)
  else:
    index = faiss.IndexIVFFlat(quantizer, dim, cells, faiss.METRIC_INNER_PRODUCT)
  index.cp.seed = options.seed
  rng = np.random.default_rng(options.seed)
  sample = np.sort(rng.choice(num_keys, options.training_keys(num_keys), replace=False))
  index.train(similarity.normalize(keys[sample]))
  index.quantizer_trains_alone = 0
  for start in tqdm.tqdm(range(0, num_keys, options.block), desc=progress and f"{progress} add",
                         disable=progress is None, leave=False):
    index.add(similarity.normalize(keys[start:start + options.block]))
  index.nprobe = min(options.nprobe, cells)
  return index


def knn(queries: np.ndarray, keys: np.ndarray, k: int, options: IvfOptions = IvfOptions(),
        progress: str | None = None, index=None) -> tuple[np.ndarray, np.ndarray]:
  """Approximate (float32 [n, k] cosines, int64 [n, k] key rows), as `neighbors.knn` returns.

  `queries` and `keys` may be memory-mapped; neither is copied whole. `index`:
  `build_index(keys, options)` when the caller built it already (a benchmark
  timing the build apart); built here otherwise.
  """
  if not 1 <= k <= len(keys):
    raise ValueError(f"k={k} needs 1 <= k <= {len(keys)} keys.")
  if queries.shape[1] != keys.shape[1]:
    raise ValueError(f"queries are {queries.shape[1]}-wide but keys {keys.shape[1]}; embed "
                     "both sides with the same encoder.")
  if index is None:
    index = build_index(keys, options, progress)
  scores = np.empty((len(queries), k), np.float32)
  indices = np.empty((len(queries), k), np.int64)
  # Codes rank coarsely: take RERANK * k candidates and keep the k best by true cosine.
  coded = bool(options.pq or options.sq8)
  candidates = min(RERANK * k, len(keys)) if coded else k
  for start in tqdm.tqdm(range(0, len(queries), options.block),
                         desc=progress and f"{progress} search", disable=progress is None,
                         leave=False):
    block = similarity.normalize(queries[start:start + options.block])
    block_scores, block_indices = index.search(block, candidates)
    if (block_indices < 0).any():
      row = start + int(np.flatnonzero((block_indices < 0).any(axis=1))[0])
      raise ValueError(f"query row {row} found fewer than k={k} neighbours in its "
                       f"{index.nprobe} cells; raise --nprobe or lower --nlist.")
    if coded:  # true cosines of the approximate neighbours
      block_scores = _exact_cosines(block, block_indices, keys)
    order = np.lexsort((block_indices, -block_scores), axis=1)
    order = order[:, :k]
    scores[start:start + len(block)] = np.take_along_axis(block_scores, order, axis=1)
    indices[start:start + len(block)] = np.take_along_axis(block_indices, order, axis=1)
  return scores, indices


def _exact_cosines(queries: np.ndarray, indices: np.ndarray, keys: np.ndarray,
                   chunk: int = 2048) -> np.ndarray:
  """float32 [q, c]: cosine of each unit query with its c candidate keys, read from `keys`.

  In chunks of queries, so the gathered [chunk, c, d] candidates stay small
  (a whole 65,536-query block at c = 16, d = 512 would be 2 GiB).
  """
  scores = np.empty(indices.shape, np.float32)
  for start in range(0, len(queries), chunk):
    part = indices[start:start + chunk]
    rows = np.unique(part)  # sorted: a memory map reads them in file order
    exact = similarity.normalize(keys[rows])[np.searchsorted(rows, part)]
    scores[start:start + chunk] = np.einsum("qd,qkd->qk", queries[start:start + chunk], exact)
  return scores
