"""Bitext mining: nearest neighbours both ways, margin scores, candidates, one-to-one pairs.

`neighbourhoods` (both directions, by the exact search of neighbors.py or
the approximate one of approximate.py), margin scores, candidates, one-to-one
selection and `mine` (two embedding matrices -> pairs): the library behind
`python -m vmsst.mine`, the BUCC evaluation (vmsst/evaluation/bucc.py) and
xsim (vmsst/evaluation/parallel.py).

Scores follow Artetxe & Schwenk (2019), "Margin-based parallel corpus mining
with multilingual sentence embeddings". With NN_k(x) the k targets nearest to
source x by cosine and NN_k(y) the k sources nearest to target y,

    avg(x, y)      = sum_{z in NN_k(x)} cos(x, z) / 2k + sum_{z in NN_k(y)} cos(y, z) / 2k
    ratio(x, y)    = cos(x, y) / avg(x, y)
    distance(x, y) = cos(x, y) - avg(x, y)

Candidates are retrieved `forward` (each source keeps its best-scoring target
among its k nearest), `backward` (each target its best source), `max` (the
union of both, kept greedily by score while neither side is used:
`one_to_one`) or `intersect` (mutual best matches). Ties are deterministic:
among equal cosines the earlier sentence is the nearer neighbour; among equal
scores forward candidates come before backward ones, then by row.
"""

import dataclasses

import numpy as np

from vmsst.mining import approximate
from vmsst.mining import neighbors
from vmsst.mining import quantized

SCORINGS = ("cosine", "ratio", "distance")
CANDIDATE_RETRIEVALS = ("forward", "backward", "max", "intersect")
INDEXES = ("exact", "ivf")
# `python -m vmsst.mine`'s names -> the scorings and retrievals above.
MARGINS = {"ratio": "ratio", "distance": "distance", "absolute": "cosine"}
RETRIEVALS = {"max": "max", "fwd": "forward", "bwd": "backward", "intersect": "intersect"}


@dataclasses.dataclass(frozen=True)
class Neighbourhoods:
  """k nearest neighbours in both directions, all mining needs (O((n + m) k) memory).

  Attributes:
    forward_scores: float64 [n, k] cosines of each source's k nearest targets, descending.
    forward_indices: int64 [n, k] those targets' rows.
    backward_scores: float64 [m, k] cosines of each target's k nearest sources, descending.
    backward_indices: int64 [m, k] those sources' rows.
  """
  forward_scores: np.ndarray
  forward_indices: np.ndarray
  backward_scores: np.ndarray
  backward_indices: np.ndarray


def neighbourhoods(source: np.ndarray, target: np.ndarray, k: int = 4, *,
                   progress: bool = False, index: str | None = None,
                   ivf: approximate.IvfOptions | None = None, backend: str = "jax",
                   quantized_search: quantized.QuantizedSearch | None = None,
                   **knn_options) -> Neighbourhoods:
  """Both directions' k nearest neighbours of float [n, d] sources and float [m, d] targets.

  index "exact" (the default without `ivf`): blockwise. The jax backend
  reduces each block of the cosine matrix along rows and columns at once
  (`neighbors.knn_both`), half the FLOPs of searching each direction; faiss
  (`backend="faiss"`) searches twice, as LASER does. Same answer, same ties.
  knn_options (query_block, key_block, devices) tune it.
  index "ivf" (the default with `ivf`): one faiss IVF index per side answers
  approximately, as LASER mines at scale (`approximate.knn`; `ivf` its
  geometry, default IvfOptions()). `progress` shows a bar per search.
  quantized_search: search int8 or binary codes instead (exact, or binary
  codes by IndexBinaryIVF), candidates re-ranked by float cosine (quantized.py).

  Raises:
    ValueError: an unknown index, or exact-search options with the IVF one.
  """
  index = index or ("ivf" if ivf is not None else "exact")
  if quantized_search is not None:
    return Neighbourhoods(*quantized.neighbourhoods(source, target, k, quantized_search, index))
  if index == "ivf":
    exact_only = sorted(knn_options) + (["backend"] if backend != "jax" else [])
    if exact_only:
      raise ValueError(f"{exact_only} tune the exact search; the IVF search takes only its "
                       "IvfOptions (--nlist, --nprobe, --sq8, --pq, --train_size, --shards).")
    ivf = ivf or approximate.IvfOptions()
    return Neighbourhoods(
        *approximate.knn(source, target, k, ivf, "src->trg" if progress else None),
        *approximate.knn(target, source, k, ivf, "trg->src" if progress else None))
  if index != "exact":
    raise ValueError(f"--index={index}; pick one of {INDEXES}.")
  if backend == "jax":
    return Neighbourhoods(*neighbors.knn_both(
        source, target, k, progress="k-NN both directions" if progress else None,
        **knn_options))
  forward = neighbors.knn(source, target, k, progress="k-NN source->target" if progress else None,
                          backend=backend, **knn_options)
  backward = neighbors.knn(target, source, k, progress="k-NN target->source" if progress else None,
                           backend=backend, **knn_options)
  return Neighbourhoods(*forward, *backward)


def row_means(cosines: np.ndarray) -> np.ndarray:
  """float64 [r] mean cosine of each row's k neighbours: a row's share of the margin."""
  return cosines.mean(axis=1, dtype=np.float64)


def margin_scores(cosines: np.ndarray, source_means, target_means,
                  scoring: str) -> np.ndarray:
  """float64 scores of candidate pairs given their cosines and their rows' `row_means`.

  All of the same shape (the means gathered at each pair's source and target;
  unused for "cosine"), so a shard of rows is scored as the whole would be. The
  ratio assumes positive neighbourhood means, as the cosines of a useful
  encoder's nearest neighbours are; the distance margin has no such caveat.
  """
  cosines = cosines.astype(np.float64)
  if scoring == "cosine":
    return cosines
  average = (source_means + target_means) / 2
  if scoring == "ratio":
    return cosines / average
  if scoring == "distance":
    return cosines - average
  raise ValueError(f"scoring must be one of {SCORINGS}, got {scoring!r}.")


def best_of_rows(scores: np.ndarray, sources: np.ndarray,
                 targets: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
  """Each row's best-scoring candidate of [r, k] candidates: (int64 [r, 2] pairs, float64 [r]).

  Equal scores: the earlier column, the nearer neighbour by cosine.
  """
  best = np.argmax(scores, axis=1)
  take = lambda a: np.take_along_axis(a, best[:, None], axis=1)[:, 0]
  pairs = np.stack([take(sources), take(targets)], axis=1).astype(np.int64)
  return pairs, take(scores)


def _best_per_row(hood: Neighbourhoods, backward: bool,
                  scoring: str) -> tuple[np.ndarray, np.ndarray]:
  """Each source's (or target's) best-scoring candidate: (int64 [r, 2] pairs, float64 [r])."""
  cosines = hood.backward_scores if backward else hood.forward_scores
  others = hood.backward_indices if backward else hood.forward_indices
  rows = np.broadcast_to(np.arange(len(others))[:, None], others.shape)
  sources, targets = (others, rows) if backward else (rows, others)
  means = (None, None) if scoring == "cosine" else (
      row_means(hood.forward_scores)[sources], row_means(hood.backward_scores)[targets])
  return best_of_rows(margin_scores(cosines, *means, scoring), sources, targets)


def candidates(hood: Neighbourhoods, scoring: str = "ratio",
               retrieval: str = "max") -> tuple[np.ndarray, np.ndarray]:
  """Mined candidate pairs before any threshold.

  Args:
    hood: neighbourhoods of the two sides.
    scoring: "cosine", "ratio" or "distance" (see the module docstring).
    retrieval: "forward", "backward", "max" or "intersect" (see the module
      docstring).

  Returns:
    (pairs int64 [p, 2] of (source row, target row), scores float64 [p]):
    by source row for forward and intersect, by target row for backward,
    by score descending for max. Only max and intersect are one-to-one.
  """
  if retrieval not in CANDIDATE_RETRIEVALS:
    raise ValueError(f"retrieval must be one of {CANDIDATE_RETRIEVALS}, got {retrieval!r}.")
  if retrieval in ("forward", "backward"):
    return _best_per_row(hood, retrieval == "backward", scoring)
  return retrieved(_best_per_row(hood, False, scoring), _best_per_row(hood, True, scoring),
                   retrieval)


def retrieved(forward: tuple[np.ndarray, np.ndarray], backward: tuple[np.ndarray, np.ndarray],
              retrieval: str) -> tuple[np.ndarray, np.ndarray]:
  """`candidates` from every source's and every target's best candidate (`best_of_rows`, rows
  in order): what a sharded miner merges, so its pairs are the one-task miner's."""
  if retrieval in ("forward", "backward"):
    return forward if retrieval == "forward" else backward
  if retrieval == "intersect":
    # backward[0] row j is target j's best (source, j); mutual if it names the same source.
    mutual = backward[0][forward[0][:, 1], 0] == forward[0][:, 0]
    return forward[0][mutual], forward[1][mutual]
  pairs = np.concatenate([forward[0], backward[0]])
  scores = np.concatenate([forward[1], backward[1]])
  keep = one_to_one(pairs, scores)
  return pairs[keep], scores[keep]


def one_to_one(pairs: np.ndarray, scores: np.ndarray) -> np.ndarray:
  """Greedy one-to-one selection: which candidates to keep so no row is used twice.

  Candidates are visited by score descending (equal scores in their given
  order) and kept while neither their source nor their target row has been
  kept. Example: pairs [[0, 0], [1, 0], [1, 1]], scores [0.5, 0.9, 0.7] ->
  [1] ((1, 0) takes source 1 and target 0; both others reuse one of them).

  Args:
    pairs: int [p, 2] of (source row, target row).
    scores: float [p].

  Returns:
    int64 [q] positions into `pairs`, in visiting order (score descending).
  """
  order = np.argsort(-np.asarray(scores, np.float64), kind="stable")
  pairs = np.asarray(pairs).reshape(-1, 2)[order]
  keep, used_sources, used_targets = [], set(), set()
  # Plain ints: a Python loop over numpy scalars is several times slower at 10^6 candidates.
  for position, source, target in zip(order.tolist(), pairs[:, 0].tolist(),
                                      pairs[:, 1].tolist()):
    if source not in used_sources and target not in used_targets:
      keep.append(position)
      used_sources.add(source)
      used_targets.add(target)
  return np.asarray(keep, np.int64)


def mine(source: np.ndarray, target: np.ndarray, *, margin: str = "ratio",
         retrieval: str = "max", k: int = 4, threshold: float | None = None,
         progress: bool = False, index: str = "exact",
         ivf: approximate.IvfOptions | None = None,
         **knn_options) -> tuple[np.ndarray, np.ndarray]:
  """Mined pairs of rows, each row used at most once, best first.

  Args:
    source: float [n, d] embeddings of distinct source sentences.
    target: float [m, d] embeddings of distinct target sentences.
    margin: "ratio", "distance" or "absolute" (`MARGINS`; see the module docstring).
    retrieval: "max", "fwd", "bwd" or "intersect".
    k: neighbours per side for the margin and the candidates; <= min(n, m).
    threshold: keep scores >= threshold; None keeps every pair.
    progress: show a progress bar per search direction.
    index: "exact" (blockwise) or "ivf" (approximate, margins on those
      neighbours); see `neighbourhoods`.
    ivf: the IVF geometry for index="ivf" (default IvfOptions()).
    **knn_options: query_block, key_block, backend, devices for the exact search.

  Returns:
    (pairs int64 [p, 2] of (source row, target row), scores float64 [p]),
    by score descending (ties as in the module docstring).
  """
  check_scoring(margin, retrieval)
  check_k(k, len(source), len(target))
  hood = neighbourhoods(source, target, k, progress=progress, index=index, ivf=ivf,
                        **knn_options)
  return mined_pairs(hood, margin=margin, retrieval=retrieval, threshold=threshold)


def mined_pairs(hood: Neighbourhoods, *, margin: str = "ratio", retrieval: str = "max",
                threshold: float | None = None) -> tuple[np.ndarray, np.ndarray]:
  """`mine`'s pairs and scores from neighbourhoods already searched (exact or approximate)."""
  pairs, scores = candidates(hood, MARGINS[margin], RETRIEVALS[retrieval])
  return selected(pairs, scores, threshold)


def selected(pairs: np.ndarray, scores: np.ndarray,
             threshold: float | None) -> tuple[np.ndarray, np.ndarray]:
  """Candidates kept one-to-one, best first, and at or above the threshold (`mined_pairs`)."""
  keep = one_to_one(pairs, scores)
  pairs, scores = pairs[keep], scores[keep]
  if threshold is not None:
    above = scores >= threshold
    pairs, scores = pairs[above], scores[above]
  return pairs, scores


def check_scoring(margin: str, retrieval: str) -> None:
  if margin not in MARGINS:
    raise ValueError(f"margin must be one of {list(MARGINS)}, got {margin!r}.")
  if retrieval not in RETRIEVALS:
    raise ValueError(f"retrieval must be one of {list(RETRIEVALS)}, got {retrieval!r}.")


def check_k(k: int, num_sources: int, num_targets: int) -> None:
  if not 1 <= k <= min(num_sources, num_targets):
    raise ValueError(f"--k={k} needs at least k distinct sentences on each side, and there "
                     f"are {num_sources} source and {num_targets} target sentences; pass "
                     f"1 <= --k <= {min(num_sources, num_targets)}.")
