"""Pair-ranking error counts: is the right sentence strictly closer than the wrong one?

The checks of query-tower tuning (Vasilyev et al. 2022, §2.2, Table 1), each
by cosine and by Euclidean distance of the raw, unnormalized embeddings (the
paper's c and d columns):
  * Triplets (anchor, positive, negative): an error when the positive is not
    strictly closer to the anchor than the negative (cos(a, p) <= cos(a, n);
    |a − p| >= |a − n|). Ties count as errors (the paper: "if the positive
    does not turn out to be closer"), and identical vectors (e.g. a
    collapsed encoder) must not score as perfect.
  * XNLI, as the paper counts it: every entailment pair (premise, hypothesis)
    is compared with every neutral pair and with every contradiction pair of
    the file, whatever their premises (the test split's 1,670 pairs per
    label give 1670 × 1670 = 2,788,900 comparisons each, Table 1); an error
    when the entailment pair's sentences are not strictly closer to each
    other than the other pair's. The counts are vectorised: each pair's
    similarity is looked up in the sorted similarities of the other label
    (np.searchsorted), O(n log n) time and O(n) memory.

Asymmetric (a dual encoder as deployed, §2.2): the anchor / premise is the
query, embedded by `encoder`; the positive, negative and hypothesis are
documents, embedded by `documents` (default: the same encoder). For a
query-tower-tuned model, `documents` is its frozen document tower
(vmsst/evaluation/preservation.py).

Folder layout (a data root; either part may be absent, not both):
  <root>/triplets/*.tsv          anchor<TAB>positive<TAB>negative per line
  <root>/xnli_<lang>/test.tsv    premise<TAB>hypothesis<TAB>label per line,
                                 label in {entailment, neutral, contradiction}
Blank lines are skipped and counted; any other malformed line is an error.
`folder` may also be one `xnli_<lang>/` folder: its parent is then the root,
so the sibling languages (and triplets/) are evaluated with it.
Each language gives the pair <lang>-<lang>. XNLI is row-aligned across
languages, so when several languages have the same number of rows (and the
same labels row by row) every ordered pair l1-l2 is also evaluated with the
premise in l1 and the hypothesis in l2 (the paper's 15 × 15 = 225 pairs).
Every rate is ×100 (lower is better); a rate with no comparisons is None.
"""

import pathlib
from typing import Mapping, NamedTuple, Sequence

import numpy as np

from vmsst.base import files
from vmsst.encoding import protocol
from vmsst.encoding import similarity
from vmsst.base import text_files

LABELS = ("entailment", "neutral", "contradiction")
COMPARISONS = ("entailment_vs_neutral", "entailment_vs_contradiction")
TRIPLETS_DIR = "triplets"
XNLI_PREFIX = "xnli_"


class NliRow(NamedTuple):
  """One labelled pair of an NLI file."""
  premise: str
  hypothesis: str
  label: str
  line: int  # 1-based, in its file: for error messages.


# ---------------------------------------------------------------- the metrics


def _rate(errors: int, total: int) -> float | None:
  return 100.0 * errors / total if total else None


def triplet_errors(anchor: np.ndarray, positive: np.ndarray, negative: np.ndarray) -> dict:
  """Errors of float [n, d] anchor/positive/negative embeddings (row i is one triplet).

  Returns:
    {"n", "cosine_errors", "cosine_error_rate", "euclidean_errors",
     "euclidean_error_rate"}; rates ×100, ties are errors.
  """
  anchor, positive, negative = (np.asarray(x, np.float32) for x in (anchor, positive, negative))
  cosine = int(np.sum(similarity.paired_cosine(anchor, positive)
                      <= similarity.paired_cosine(anchor, negative)))
  euclidean = int(np.sum(np.linalg.norm(anchor - positive, axis=-1)
                         >= np.linalg.norm(anchor - negative, axis=-1)))
  n = len(anchor)
  return {"n": n, "cosine_errors": cosine, "cosine_error_rate": _rate(cosine, n),
          "euclidean_errors": euclidean, "euclidean_error_rate": _rate(euclidean, n)}


def all_pairs_errors(right: np.ndarray, wrong: np.ndarray) -> dict:
  """Every (right i, wrong j) comparison of two score lists; an error when right_i <= wrong_j.

  Scores are "higher is closer" (cosines, or minus distances). Counted
  without the [n, m] matrix: for each right_i, the wrong scores >= it are
  m − (the number below it), read off the sorted wrong scores.

  Args:
    right: float [n], e.g. the similarities of the entailment pairs.
    wrong: float [m], e.g. those of the neutral pairs.
  Returns:
    {"errors", "comparisons" (= n·m), "error_rate" (×100, None when n·m = 0)}.
  """
  right, wrong = np.asarray(right, np.float64), np.sort(np.asarray(wrong, np.float64))
  below = np.searchsorted(wrong, right, side="left")
  errors = int(np.sum(len(wrong) - below))
  comparisons = len(right) * len(wrong)
  return {"errors": errors, "comparisons": comparisons, "error_rate": _rate(errors, comparisons)}


MEASURES = ("cosine", "distance")


def pair_scores(premises: np.ndarray, hypotheses: np.ndarray) -> dict[str, np.ndarray]:
  """{"cosine": cos(p_i, h_i), "distance": −|p_i − h_i|} float [n]: higher is closer."""
  premises, hypotheses = np.asarray(premises, np.float32), np.asarray(hypotheses, np.float32)
  return {"cosine": similarity.paired_cosine(premises, hypotheses),
          "distance": -np.linalg.norm(premises - hypotheses, axis=-1)}


def nli_errors(premises: np.ndarray, hypotheses: np.ndarray, labels: Sequence[str]) -> dict:
  """The paper's XNLI counts: every entailment pair against every neutral / contradiction pair.

  Args:
    premises, hypotheses: float [n, d], row i = pair i (premise by the query
      encoder, hypothesis by the document encoder).
    labels: [n] labels from LABELS.
  Returns:
    {"entailment_vs_neutral": {"cosine": all_pairs_errors, "distance": ...},
     "entailment_vs_contradiction": {...}, "labels": {label: pairs}}.
  """
  labels = np.asarray(labels)
  scores = pair_scores(premises, hypotheses)
  entailed = labels == "entailment"
  results = {f"entailment_vs_{other}": {
      measure: all_pairs_errors(scores[measure][entailed], scores[measure][labels == other])
      for measure in MEASURES} for other in LABELS[1:]}
  return {**results, "labels": {label: int(np.sum(labels == label)) for label in LABELS}}


# ---------------------------------------------------------------- reading


def read_triplets(path: str | pathlib.Path) -> tuple[list[tuple[str, str, str]], int]:
  """([(anchor, positive, negative)], blank lines skipped) of a triplet TSV."""
  rows, blank = text_files.read_tsv(files.as_path(path), 3, "anchor, positive, negative")
  return [tuple(r[1:]) for r in rows], blank


def read_nli(path: str | pathlib.Path) -> tuple[list[NliRow], int]:
  """([NliRow], blank lines skipped) of a premise<TAB>hypothesis<TAB>label file."""
  path = files.as_path(path)
  rows, blank = text_files.read_tsv(path, 3, "premise, hypothesis, label")
  for number, _, _, label in rows:
    if label not in LABELS:
      raise ValueError(f"{path}:{number}: label {label!r} is not one of {LABELS}; relabel or "
                       f"delete the line.")
  return [NliRow(premise, hypothesis, label, number)
          for number, premise, hypothesis, label in rows], blank


def find_nli_files(root: pathlib.Path, split: str = "test") -> dict[str, pathlib.Path]:
  """{lang: root/xnli_<lang>/<split>.tsv} for every such file."""
  return {p.parent.name[len(XNLI_PREFIX):]: p
          for p in sorted(root.glob(f"{XNLI_PREFIX}*/{split}.tsv"))}


def language_pairs(rows: Mapping[str, Sequence[NliRow]],
                   paths: Mapping[str, pathlib.Path]) -> list[tuple[str, str]]:
  """(l, l) for each language, plus ordered (l1, l2) pairs of row-aligned languages.

  Raises:
    ValueError: two files with the same row count whose labels differ, which
      means they are not the aligned XNLI rows the cross-lingual pairs assume.
  """
  pairs = [(lang, lang) for lang in rows]
  for l1 in rows:
    for l2 in rows:
      if l1 == l2 or len(rows[l1]) != len(rows[l2]):
        continue
      for number, (a, b) in enumerate(zip(rows[l1], rows[l2]), 1):
        if a.label != b.label:
          raise ValueError(f"{paths[l2]}:{b.line}: row {number} is {b.label}, but "
                           f"{a.label} at {paths[l1]}:{a.line}; same-size XNLI files must be "
                           f"row-aligned: remove the misaligned file or pass "
                           f"cross_lingual=False.")
      pairs.append((l1, l2))
  return pairs


# ---------------------------------------------------------------- benchmark


def evaluate_nli(encoder: protocol.UniqueSentences, premise_rows: Sequence[NliRow],
                 hypothesis_rows: Sequence[NliRow], *,
                 documents: protocol.UniqueSentences | None = None, desc: str = "xnli") -> dict:
  """nli_errors of aligned rows: premises from one file (queries), hypotheses from another."""
  documents = documents or encoder
  premise_vectors = encoder.encode([r.premise for r in premise_rows], desc=f"{desc} premises")
  hypothesis_vectors = documents.encode([r.hypothesis for r in hypothesis_rows],
                                        desc=f"{desc} hypotheses")
  return {"rows": len(premise_rows),
          **nli_errors(premise_vectors, hypothesis_vectors, [r.label for r in premise_rows])}


def evaluate(encoder: protocol.UniqueSentences, folder: str | pathlib.Path, *,
             split: str = "test", cross_lingual: bool = True,
             documents: protocol.UniqueSentences | None = None) -> dict:
  """Triplet and XNLI error rates ×100 of every file found under a data root.

  Args:
    encoder: embeds the queries (anchors, premises), float32 [n, d].
    folder: data root holding `triplets/*.tsv` and/or `xnli_<lang>/<split>.tsv`,
      or one `xnli_<lang>/` folder of such a root.
    split: which XNLI file to read from each `xnli_<lang>/`.
    cross_lingual: also evaluate l1-premise / l2-hypothesis pairs.
    documents: embeds the documents (positives, negatives, hypotheses);
      default `encoder` (a symmetric model).

  Returns:
    {"xnli": {"<l1>-<l2>": {"premise_language", "hypothesis_language", "rows",
       "labels": {label: pairs}, "entailment_vs_neutral": {"cosine": {"errors",
       "comparisons", "error_rate"}, "distance": {...}},
       "entailment_vs_contradiction": {...}, "skipped": {"blank_lines"}}},
     "triplets": {"<file name>": {triplet_errors..., "skipped": {"blank_lines"}}},
     "_mean": {"entailment_vs_neutral_cosine", "entailment_vs_neutral_distance",
       "entailment_vs_contradiction_cosine", "entailment_vs_contradiction_distance",
       "triplets_cosine", "triplets_euclidean"}: error rates averaged over
       XNLI pairs (the paper's average over language pairs) and triplet files
       (None when absent)}.
  """
  root = files.as_path(folder)
  if root.name.startswith(XNLI_PREFIX) and (root / f"{split}.tsv").is_file():
    root = root.parent
  nli_paths = find_nli_files(root, split)
  triplet_paths = sorted((root / TRIPLETS_DIR).glob("*.tsv"))
  if not nli_paths and not triplet_paths:
    raise ValueError(f"{root}: found neither {TRIPLETS_DIR}/*.tsv nor "
                     f"{XNLI_PREFIX}<lang>/{split}.tsv; point pair_ranking at a data root "
                     f"holding one of them.")
  documents = documents or encoder
  results = {"xnli": _evaluate_xnli(encoder, documents, nli_paths, cross_lingual),
             "triplets": {p.name: _evaluate_triplet_file(encoder, documents, p)
                          for p in triplet_paths}}
  results["_mean"] = _means(results)
  return results


def _evaluate_xnli(encoder, documents, paths: Mapping[str, pathlib.Path],
                   cross_lingual: bool) -> dict:
  read = {lang: read_nli(path) for lang, path in paths.items()}
  rows = {lang: r for lang, (r, _) in read.items()}
  pairs = language_pairs(rows, paths) if cross_lingual else [(lang, lang) for lang in rows]
  results = {}
  for l1, l2 in pairs:
    result = evaluate_nli(encoder, rows[l1], rows[l2], documents=documents,
                          desc=f"xnli {l1}-{l2}")
    blank = read[l1][1] + (read[l2][1] if l2 != l1 else 0)
    results[f"{l1}-{l2}"] = {"premise_language": l1, "hypothesis_language": l2, **result,
                             "skipped": {"blank_lines": blank}}
  return results


def _evaluate_triplet_file(encoder, documents, path: pathlib.Path) -> dict:
  triplets, blank = read_triplets(path)
  if not triplets:
    raise ValueError(f"{path}: no triplets; add anchor<TAB>positive<TAB>negative lines or "
                     f"remove the file.")
  anchors, positives, negatives = (list(column) for column in zip(*triplets))
  vectors = [encoder.encode(anchors, desc=f"triplets {path.name} anchors"),
             documents.encode(positives, desc=f"triplets {path.name} positives"),
             documents.encode(negatives, desc=f"triplets {path.name} negatives")]
  return {**triplet_errors(*vectors), "skipped": {"blank_lines": blank}}


def _mean(values: list) -> float | None:
  values = [v for v in values if v is not None]
  return float(np.mean(values)) if values else None


def _means(results: Mapping) -> dict:
  xnli, triplets = results["xnli"].values(), results["triplets"].values()
  means = {f"{what}_{measure}": _mean([r[what][measure]["error_rate"] for r in xnli])
           for what in COMPARISONS for measure in MEASURES}
  return {**means, "triplets_cosine": _mean([r["cosine_error_rate"] for r in triplets]),
          "triplets_euclidean": _mean([r["euclidean_error_rate"] for r in triplets])}


# ---------------------------------------------------------------- report


def _pct(value: float | None) -> str:
  return "–" if value is None else f"{value:.1f}"


def table(results: Mapping) -> str:
  """Markdown: XNLI pairs, then triplet files; error rates ×100 (lower is better)."""
  blocks = []
  if results["xnli"]:
    lines = ["| XNLI pair | e vs n cos err % | e vs n dist err % | e vs c cos err % | "
             "e vs c dist err % | comparisons each |", "|---|---:|---:|---:|---:|---:|"]
    for pair, r in results["xnli"].items():
      cells = [_pct(r[what][measure]["error_rate"]) for what in COMPARISONS
               for measure in MEASURES]
      lines.append(f"| {pair} | {' | '.join(cells)} | "
                   f"{r['entailment_vs_neutral']['cosine']['comparisons']:,} |")
    blocks.append("\n".join(lines))
  if results["triplets"]:
    lines = ["| triplet file | n | cosine err % | euclid err % |", "|---|---:|---:|---:|"]
    for name, r in results["triplets"].items():
      lines.append(f"| {name} | {r['n']} | {_pct(r['cosine_error_rate'])} | "
                   f"{_pct(r['euclidean_error_rate'])} |")
    blocks.append("\n".join(lines))
  return "\n\n".join(blocks)
