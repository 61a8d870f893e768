"""Pair-ranking error counts: is the right sentence strictly closer than the wrong one?

The query-tower-tuning seed's checks, two kinds:
  * Triplets (anchor, positive, negative): an error when the positive is not
    strictly closer to the anchor than the negative, by cosine
    (cos(a, p) <= cos(a, n)) and by Euclidean distance of the raw, unnormalized
    embeddings (|a − p| >= |a − n|). Ties count as errors: an encoder that
    cannot tell the two apart has not ranked them, and identical vectors
    (e.g. a collapsed encoder) must not score as perfect.
  * XNLI-style: rows (premise, hypothesis, label) are grouped by premise. For
    each premise with an entailment hypothesis, cos(premise, entailed) is
    compared with cos(premise, h) for every neutral and every contradiction
    hypothesis h of that premise (every entailed × other pair when there are
    several); an error when the entailed one is not strictly more similar.
    Premises lacking a label are skipped for the comparisons that need it and
    counted. Exact duplicate rows are counted once (and counted as skipped).
    The (premise, entailed, contradiction) triplets of the same comparisons
    are also scored with the triplet rule, which adds the Euclidean view.

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
premise in l1 and the hypothesis in l2; the groups are l1's premises.
Every rate is ×100 (lower is better); a rate with no comparisons is None.
"""

import collections
import pathlib
from typing import Mapping, NamedTuple, Sequence

import numpy as np

from vmsst.evaluation import encoders
from vmsst.evaluation import similarity
from vmsst.evaluation import text_files

LABELS = ("entailment", "neutral", "contradiction")
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


def premise_groups(premises: Sequence[str]) -> list[list[int]]:
  """Row indices grouped by premise text, groups in order of first occurrence."""
  groups = collections.defaultdict(list)
  for index, premise in enumerate(premises):
    groups[premise].append(index)
  return list(groups.values())


def nli_comparisons(cosines: np.ndarray, labels: Sequence[str],
                    groups: Sequence[Sequence[int]]) -> dict:
  """Entailed-vs-other comparisons within each premise group.

  Args:
    cosines: float [n], cos(premise, hypothesis) of each row.
    labels: [n] labels from LABELS.
    groups: row indices sharing a premise.

  Returns:
    {"entailment_vs_neutral": {"errors", "comparisons", "error_rate"},
     "entailment_vs_contradiction": {...}, "triplet_rows": [(entailed row,
     contradiction row)], "skipped": {"premises_without_<label>": count}}.
  """
  errors, totals = collections.Counter(), collections.Counter()
  skipped = collections.Counter({f"premises_without_{label}": 0 for label in LABELS})
  triplets = []
  for group in groups:
    by_label = {label: [i for i in group if labels[i] == label] for label in LABELS}
    for label in LABELS:
      skipped[f"premises_without_{label}"] += not by_label[label]
    for other in LABELS[1:]:
      for e in by_label["entailment"]:
        for o in by_label[other]:
          totals[other] += 1
          errors[other] += bool(cosines[e] <= cosines[o])
          if other == "contradiction":
            triplets.append((e, o))
  results = {f"entailment_vs_{other}": {"errors": errors[other], "comparisons": totals[other],
                                        "error_rate": _rate(errors[other], totals[other])}
             for other in LABELS[1:]}
  return {**results, "triplet_rows": triplets, "skipped": dict(skipped)}


# ---------------------------------------------------------------- reading


def read_triplets(path: str | pathlib.Path) -> tuple[list[tuple[str, str, str]], int]:
  """([(anchor, positive, negative)], blank lines skipped) of a triplet TSV."""
  rows, blank = text_files.read_tsv(pathlib.Path(path), 3, "anchor, positive, negative")
  return [tuple(r[1:]) for r in rows], blank


def read_nli(path: str | pathlib.Path) -> tuple[list[NliRow], int]:
  """([NliRow], blank lines skipped) of a premise<TAB>hypothesis<TAB>label file."""
  path = pathlib.Path(path)
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


def _dedupe(premises: Sequence[str], hypotheses: Sequence[str],
            labels: Sequence[str]) -> list[int]:
  """Indices of the first occurrence of each (premise, hypothesis, label) row."""
  first = {}
  for index, key in enumerate(zip(premises, hypotheses, labels)):
    first.setdefault(key, index)
  return sorted(first.values())


def evaluate_nli(encoder: encoders.UniqueSentences, premise_rows: Sequence[NliRow],
                 hypothesis_rows: Sequence[NliRow], *, desc: str = "xnli") -> dict:
  """Comparisons and triplets of aligned rows: premises from one file, hypotheses from another."""
  keep = _dedupe([r.premise for r in premise_rows], [r.hypothesis for r in hypothesis_rows],
                 [r.label for r in premise_rows])
  premises = [premise_rows[i].premise for i in keep]
  hypotheses = [hypothesis_rows[i].hypothesis for i in keep]
  labels = [premise_rows[i].label for i in keep]
  premise_vectors = encoder.encode(premises, desc=f"{desc} premises")
  hypothesis_vectors = encoder.encode(hypotheses, desc=f"{desc} hypotheses")
  groups = premise_groups(premises)
  results = nli_comparisons(similarity.paired_cosine(premise_vectors, hypothesis_vectors),
                            labels, groups)
  entailed, contradicted = np.array(results.pop("triplet_rows"), np.int64).reshape(-1, 2).T
  results["triplets"] = triplet_errors(premise_vectors[entailed], hypothesis_vectors[entailed],
                                       hypothesis_vectors[contradicted])
  results["skipped"]["duplicate_rows"] = len(premise_rows) - len(keep)
  return {"rows": len(premise_rows), "premises": len(groups), **results}


def evaluate(encoder: encoders.UniqueSentences, folder: str | pathlib.Path, *,
             split: str = "test", cross_lingual: bool = True) -> dict:
  """Triplet and XNLI-style error rates ×100 of every file found under a data root.

  Args:
    encoder: embeds sentences (float32 [n, d]).
    folder: data root holding `triplets/*.tsv` and/or `xnli_<lang>/<split>.tsv`,
      or one `xnli_<lang>/` folder of such a root.
    split: which XNLI file to read from each `xnli_<lang>/`.
    cross_lingual: also evaluate l1-premise / l2-hypothesis pairs.

  Returns:
    {"xnli": {"<l1>-<l2>": {"premise_language", "hypothesis_language", "rows",
       "premises", "entailment_vs_neutral": {"errors", "comparisons",
       "error_rate"}, "entailment_vs_contradiction": {...}, "triplets":
       {triplet_errors}, "skipped": {"premises_without_<label>",
       "duplicate_rows", "blank_lines"}}},
     "triplets": {"<file name>": {triplet_errors..., "skipped": {"blank_lines"}}},
     "_mean": {"entailment_vs_neutral", "entailment_vs_contradiction",
       "triplets_cosine", "triplets_euclidean"}: error rates averaged over
       XNLI pairs (the first two) and triplet files (None when absent)}.
  """
  root = pathlib.Path(folder)
  if root.name.startswith(XNLI_PREFIX) and (root / f"{split}.tsv").is_file():
    root = root.parent
  nli_paths = find_nli_files(root, split)
  triplet_paths = sorted((root / TRIPLETS_DIR).glob("*.tsv"))
  if not nli_paths and not triplet_paths:
    raise ValueError(f"{root}: found neither {TRIPLETS_DIR}/*.tsv nor "
                     f"{XNLI_PREFIX}<lang>/{split}.tsv; point pair_ranking at a data root "
                     f"holding one of them.")
  results = {"xnli": _evaluate_xnli(encoder, nli_paths, cross_lingual),
             "triplets": {p.name: _evaluate_triplet_file(encoder, p) for p in triplet_paths}}
  results["_mean"] = _means(results)
  return results


def _evaluate_xnli(encoder, paths: Mapping[str, pathlib.Path], cross_lingual: bool) -> dict:
  read = {lang: read_nli(path) for lang, path in paths.items()}
  rows = {lang: r for lang, (r, _) in read.items()}
  pairs = language_pairs(rows, paths) if cross_lingual else [(lang, lang) for lang in rows]
  results = {}
  for l1, l2 in pairs:
    result = evaluate_nli(encoder, rows[l1], rows[l2], desc=f"xnli {l1}-{l2}")
    result["skipped"]["blank_lines"] = read[l1][1] + (read[l2][1] if l2 != l1 else 0)
    results[f"{l1}-{l2}"] = {"premise_language": l1, "hypothesis_language": l2, **result}
  return results


def _evaluate_triplet_file(encoder, path: pathlib.Path) -> dict:
  triplets, blank = read_triplets(path)
  if not triplets:
    raise ValueError(f"{path}: no triplets; add anchor<TAB>positive<TAB>negative lines or "
                     f"remove the file.")
  vectors = [encoder.encode(list(column), desc=f"triplets {path.name}")
             for column in zip(*triplets)]
  return {**triplet_errors(*vectors), "skipped": {"blank_lines": blank}}


def _mean(values: list) -> float | None:
  values = [v for v in values if v is not None]
  return float(np.mean(values)) if values else None


def _means(results: Mapping) -> dict:
  xnli, triplets = results["xnli"].values(), results["triplets"].values()
  return {
      "entailment_vs_neutral": _mean([r["entailment_vs_neutral"]["error_rate"] for r in xnli]),
      "entailment_vs_contradiction": _mean(
          [r["entailment_vs_contradiction"]["error_rate"] for r in xnli]),
      "triplets_cosine": _mean([r["cosine_error_rate"] for r in triplets]),
      "triplets_euclidean": _mean([r["euclidean_error_rate"] for r in triplets]),
  }


# ---------------------------------------------------------------- report


def _pct(value: float | None) -> str:
  return "–" if value is None else f"{value:.1f}"


def table(results: Mapping) -> str:
  """Markdown: XNLI pairs, then triplet files; error rates ×100 (lower is better)."""
  blocks = []
  if results["xnli"]:
    lines = ["| XNLI pair | e ≤ n err % | e ≤ c err % | triplet cos err % | "
              "triplet euclid err % | premises | skipped premises |",
              "|---|---:|---:|---:|---:|---:|---:|"]
    for pair, r in results["xnli"].items():
      skipped = sum(v for k, v in r["skipped"].items() if k.startswith("premises_"))
      lines.append(f"| {pair} | {_pct(r['entailment_vs_neutral']['error_rate'])} | "
                   f"{_pct(r['entailment_vs_contradiction']['error_rate'])} | "
                   f"{_pct(r['triplets']['cosine_error_rate'])} | "
                   f"{_pct(r['triplets']['euclidean_error_rate'])} | {r['premises']} | "
                   f"{skipped} |")
    blocks.append("\n".join(lines))
  if results["triplets"]:
    lines = ["| triplet file | n | cosine err % | euclid err % |", "|---|---:|---:|---:|"]
    for name, r in results["triplets"].items():
      lines.append(f"| {name} | {r['n']} | {_pct(r['cosine_error_rate'])} | "
                   f"{_pct(r['euclidean_error_rate'])} |")
    blocks.append("\n".join(lines))
  return "\n\n".join(blocks)
