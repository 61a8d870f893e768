"""Neighbour search over quantized embeddings, re-ranked by the float cosines.

What `bitext.neighbourhoods(precision=...)` runs for `python -m vmsst.mine
--precision`. The keys are held as codes (vmsst/encoding/quantize.py,
sentence-transformers' layouts), so the index is 32x (binary) or 4x (int8)
smaller than float32 keys:

  binary, ubinary   Hamming distance over the packed sign bits, by faiss'
                    IndexBinaryFlat (exact) or IndexBinaryIVF (index="ivf")
  int8, uint8       inner product of the unit-normalised bucket centres
                    (`quantize.dequantize`), by faiss' IndexFlatIP over
                    one block of keys at a time

Codes rank coarsely (a Hamming distance has d + 1 values), so each query
keeps `rescore` x k candidates, and those are re-ranked by the float cosine
of the full vectors (`rescore_multiplier`, as sentence-transformers'
`semantic_search_faiss` does): the k kept and their cosines are then float
ones, and the margin scores of vmsst/mining/bitext.py apply unchanged.
Ties among equal cosines go to the lower index, as in the exact search.
"""

import dataclasses

import numpy as np

from vmsst.encoding import quantize
from vmsst.encoding import similarity
from vmsst.mining import exact_scores

QUERY_BLOCK = 4096  # queries re-ranked at a time: QUERY_BLOCK * candidates * d floats
KEY_BLOCK = 65_536  # int8 keys decoded at a time


@dataclasses.dataclass(frozen=True)
class QuantizedSearch:
  """How to search codes.

  Attributes:
    precision: int8, uint8, binary or ubinary.
    rescore_multiplier: candidates per query kept from the codes, in units of k.
    ranges: float [2, d] int8/uint8 ranges of the unit-normalised vectors;
      None: measured on the two sides themselves.
    nlist, nprobe: index="ivf" (binary only): IndexBinaryIVF cells and cells
      scanned per query (nlist 0: 4 * sqrt(keys)).
  """
  precision: str = "binary"
  rescore_multiplier: int = 4
  ranges: np.ndarray | None = None
  nlist: int = 0
  nprobe: int = 16

  def check(self) -> None:
    if self.precision not in quantize.PRECISIONS[1:]:
      raise ValueError(f"--precision={self.precision}: the quantized search takes one of "
                       f"{', '.join(quantize.PRECISIONS[1:])}.")
    if self.rescore_multiplier < 1:
      raise ValueError(f"--rescore_multiplier={self.rescore_multiplier} must be >= 1.")


def neighbourhoods(source: np.ndarray, target: np.ndarray, k: int, search: QuantizedSearch,
                   index: str = "exact") -> tuple[np.ndarray, ...]:
  """(forward scores, forward indices, backward scores, backward indices), float re-ranked.

  Args:
    source, target: float [n, d] and [m, d] embeddings (the re-rank reads
      the candidates' rows only, so they may be memory-mapped).
    k: neighbours kept per query.
    search: the codes and the candidate depth.
    index: "exact" or "ivf" (binary codes only).
  """
  search.check()
  unit_source, unit_target = similarity.normalize(source), similarity.normalize(target)
  ranges = search.ranges
  if search.precision in quantize.CALIBRATED and ranges is None:
    ranges = quantize.ranges_of(np.concatenate([unit_source, unit_target]))
  codes = [quantize.quantize(side, search.precision, ranges)
           for side in (unit_source, unit_target)]
  forward = _search(codes[0], codes[1], unit_source, unit_target, k, search, ranges, index)
  backward = _search(codes[1], codes[0], unit_target, unit_source, k, search, ranges, index)
  return (*forward, *backward)


def _search(query_codes: np.ndarray, key_codes: np.ndarray, queries: np.ndarray,
            keys: np.ndarray, k: int, search: QuantizedSearch, ranges, index: str):
  """One direction: candidates from the codes, then the k best by float cosine."""
  depth = min(len(keys), max(k, k * search.rescore_multiplier))
  if search.precision.endswith("binary"):
    candidates = _hamming_candidates(query_codes, key_codes, depth, search, index)
  elif index != "exact":
    raise ValueError(f"--index={index} searches float or binary codes; int8 codes are searched "
                     "exactly (--index=exact).")
  else:
    candidates = _int8_candidates(query_codes, key_codes, depth, search.precision, ranges)
  return rerank(queries, keys, candidates, k)


def _hamming_candidates(query_codes, key_codes, depth: int, search: QuantizedSearch,
                        index: str) -> np.ndarray:
  """int64 [n, depth] nearest keys by Hamming distance (faiss binary indexes)."""
  import faiss  # pylint: disable=import-outside-toplevel
  queries = quantize.as_ubinary(query_codes, search.precision)
  keys = quantize.as_ubinary(key_codes, search.precision)
  bits = keys.shape[1] * 8
  if index == "exact":
    flat = faiss.IndexBinaryFlat(bits)
  elif index == "ivf":
    cells = search.nlist or max(1, min(int(4 * np.sqrt(len(keys))), len(keys) // 39))
    flat = faiss.IndexBinaryIVF(faiss.IndexBinaryFlat(bits), bits, cells)
    flat.train(keys)
    flat.nprobe = min(search.nprobe, cells)
  else:
    raise ValueError(f"--index={index}; pick exact or ivf.")
  flat.add(keys)
  _, found = flat.search(np.ascontiguousarray(queries), depth)
  return found.astype(np.int64)


def _int8_candidates(query_codes, key_codes, depth: int, precision: str,
                     ranges: np.ndarray) -> np.ndarray:
  """int64 [n, depth] nearest keys by the cosine of the decoded codes, keys in blocks."""
  import faiss  # pylint: disable=import-outside-toplevel
  queries = similarity.normalize(quantize.dequantize(query_codes, precision, ranges))
  best_scores = np.full((len(queries), 0), -np.inf, np.float32)
  best = np.zeros((len(queries), 0), np.int64)
  for start in range(0, len(key_codes), KEY_BLOCK):
    block = similarity.normalize(quantize.dequantize(key_codes[start:start + KEY_BLOCK],
                                                     precision, ranges))
    flat = faiss.IndexFlatIP(block.shape[1])
    flat.add(block)
    scores, found = flat.search(queries, min(depth, len(block)))
    best_scores = np.concatenate([best_scores, scores], axis=1)
    best = np.concatenate([best, found.astype(np.int64) + start], axis=1)
    order = np.argsort(-best_scores, axis=1, kind="stable")[:, :depth]
    best_scores = np.take_along_axis(best_scores, order, axis=1)
    best = np.take_along_axis(best, order, axis=1)
  return best


def rerank(queries: np.ndarray, keys: np.ndarray, candidates: np.ndarray,
           k: int) -> tuple[np.ndarray, np.ndarray]:
  """The k candidates of highest float cosine: (float64 [n, k] descending, int64 [n, k]).

  candidates: int [n, c] key rows (-1, faiss' filler when fewer keys exist,
  never kept). The exact search's re-score (`exact_scores.rescore`), so equal
  cosines keep the lower key index first and scores equal the exact search's.
  """
  return exact_scores.rescore(queries, keys, candidates, k)
