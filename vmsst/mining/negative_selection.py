"""Hard negatives for training pairs: the nearest non-translations of each anchor, margin-filtered.

For pairs (a_i, b_i) of one language pair, the candidates of anchor a_i are
the distinct b-side sentences of the corpus nearest to it by cosine
(neighbors.knn, exact and blockwise, as every miner here). A candidate is
dropped, in this order, when it is:

  1. a translation of a_i: b_i itself, any sentence that normalises to the
     same text as b_i (case and whitespace: duplicates of it), the b of any
     other pair whose a normalises to a_i's text (a multi-parallel corpus
     pairs one anchor with several translations), or a_i's own text
     (names, numbers, untranslated lines);
  2. too close to the positive, so likely a missed translation or a
     paraphrase (the filters of sentence-transformers' mine_hard_negatives,
     with p = cos(a_i, b_i) and s = cos(a_i, candidate)):
       margin "absolute":  kept iff s <= p − m
       margin "relative":  kept iff s <= p − |p|·m   (m = 0.05: 5% of p below it)
       margin "none":      kept whatever s.

The first K candidates left, nearest first, are the pair's negatives; a pair
with fewer left keeps what it has (counted as `short`).
"""

from typing import Sequence

import numpy as np

from vmsst.base import tallies
from vmsst.mining import neighbors

MARGINS = ("relative", "absolute", "none")


class Counts(tallies.Tally):
  """What one selection did, summed over language pairs (plain JSON with `as_dict`).

  Attributes:
    pairs: anchors searched (one per training pair).
    candidates: neighbours looked at.
    translations: candidates dropped as a translation of their anchor (rule 1).
    margin: candidates dropped by the margin filter (rule 2).
    negatives: negatives kept, over all pairs.
    short: pairs that kept fewer than K.
  """
  NAMES = ("pairs", "candidates", "translations", "margin", "negatives", "short")


def normalized(text: str) -> str:
  """The text duplicates share: case-folded, whitespace runs collapsed."""
  return " ".join(text.casefold().split())


def check_margin(margin: str, value: float) -> None:
  """Raises ValueError on an unknown margin or a negative value."""
  if margin not in MARGINS:
    raise ValueError(f"margin must be one of {MARGINS}, got {margin!r}.")
  if value < 0:
    raise ValueError(f"the margin value must be >= 0, got {value}.")


def margin_keeps(scores: np.ndarray, positive: np.ndarray, margin: str, value: float) -> np.ndarray:
  """bool [n, C]: which candidate scores [n, C] pass the margin below positive scores [n]."""
  check_margin(margin, value)
  if margin == "none":
    return np.ones(scores.shape, bool)
  threshold = positive - (value if margin == "absolute" else np.abs(positive) * value)
  return scores <= threshold[:, None]


def select(anchors: np.ndarray, targets: np.ndarray, positives: np.ndarray,
           translations: Sequence[frozenset[int]], *, negatives: int, candidates: int,
           margin: str = "relative", margin_value: float = 0.05,
           **knn_options) -> tuple[np.ndarray, np.ndarray, Counts]:
  """Each anchor's K negatives among the targets (module docstring).

  Args:
    anchors: float [n, d], one row per pair's a.
    targets: float [m, d], the distinct b-side sentences.
    positives: int [n], the row of each pair's b in `targets`.
    translations: per pair, the target rows that are translations of its a
      (rule 1; its positive included or not: it is always excluded).
    negatives: K.
    candidates: neighbours searched beyond each anchor's translations
      (sentence-transformers' range_max); at least K.
    margin, margin_value: rule 2.
    knn_options: neighbors.knn's (backend, query_block, key_block, devices).

  Returns:
    (indices int64 [n, K]: target rows, nearest first, -1 past what was
     kept; scores float32 [n, K]: their cosines, nan past; Counts).
  """
  check_margin(margin, margin_value)
  if negatives < 1 or candidates < negatives:
    raise ValueError(f"need 1 <= negatives <= candidates, got {negatives} and {candidates}.")
  excluded = [t | {int(p)} for t, p in zip(translations, positives)]
  k = min(candidates + max(map(len, excluded), default=0), len(targets))
  scores, indices = neighbors.knn(anchors, targets, k, **knn_options)
  positive = _cosines(anchors, targets[positives])
  translation = np.array([[int(j) in rows for j in row] for row, rows in zip(indices, excluded)],
                         bool).reshape(indices.shape)
  passes = margin_keeps(scores, positive, margin, margin_value)
  keep = ~translation & passes
  order = np.cumsum(keep, axis=1)  # the kept candidate's rank among the kept, 1-based
  keep &= order <= negatives
  out_indices = np.full((len(anchors), negatives), -1, np.int64)
  out_scores = np.full((len(anchors), negatives), np.nan, np.float32)
  rows, columns = np.nonzero(keep)
  out_indices[rows, order[rows, columns] - 1] = indices[rows, columns]
  out_scores[rows, order[rows, columns] - 1] = scores[rows, columns]
  kept = keep.sum(axis=1)
  counts = Counts(pairs=len(anchors), candidates=int(indices.size),
                  translations=int(translation.sum()), margin=int((~translation & ~passes).sum()),
                  negatives=int(kept.sum()), short=int((kept < negatives).sum()))
  return out_indices, out_scores, counts


def _cosines(a: np.ndarray, b: np.ndarray) -> np.ndarray:
  """Row-wise cosine of float [n, d] and [n, d] -> float32 [n]."""
  a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
  norms = np.maximum(np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1), 1e-12)
  return (np.sum(a * b, axis=1) / norms).astype(np.float32)
