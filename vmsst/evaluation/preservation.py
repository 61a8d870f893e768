r"""Query-tower tuning: triplet improvement, and multilingual quality before vs after.

The command is `python -m vmsst.preservation`.

Everything is measured as the dual encoder is deployed (Vasilyev et al. 2022,
§2.2): the query side (a triplet's anchor, an XNLI premise, an STS pair's
first sentence, a Tatoeba query) by the query tower, the document side
(positive, negative, hypothesis, second sentence, Tatoeba candidates) by the
document tower. Before tuning both towers are the original model; after it,
the query tower is the tuned one and the document tower the frozen copy
saved in the tuned run's checkpoint (`encoding.restore.restore_document_tower`),
never the tuned tower.

Triplets. N_e counts the held-out triplets the original model ranks wrongly
(s(a, p) <= s(a, n), ties are errors: pair_ranking.triplet_errors), N_e' the
same after tuning. The improvement is I = (N_e − N_e') / N_e (§3.2, Eq. 1;
None when N_e = 0), for cosine and for Euclidean ranking (the paper's c% and
d%). Default held-out triplets: STSb test built by tasks/sources/triplet_sets.py
(training uses STSb train).

Preservation. Every language pair gives one comparison per check, with a
two-tailed z-test at |z| > 1.96 (§3.2: "Z-value for two-tailed test exceeds
1.96"):
  * xnli: the paper's error counts (pair_ranking: every entailment pair
    against every neutral / contradiction pair, 2,788,900 comparisons each on
    the test split), by cosine and by distance (the paper's c+/- and d+/-),
    per premise-hypothesis language pair;
  * sts: STSb-multi-mt Spearman correlation per ordered language pairing
    (not in the paper: an extra multilingual view);
  * tatoeba: retrieval accuracy per language, xx→eng and eng→xx (likewise).
Error rates and accuracies use the two-proportion z-test with the pooled
proportion, n = the comparisons (the paper does not give its z formula; this
is the textbook one). It treats before and after as independent samples
although they share the items; for positively correlated paired outcomes
this overstates the variance of the difference, so it errs towards "no
change" (a paired McNemar test would be sharper). Correlations use Fisher's
z, atanh(r₂) − atanh(r₁) over sqrt(c/(n₁ − 3) + c/(n₂ − 3)), c = 1.06 for
Spearman (Fieller, Hartley & Pearson 1957), likewise independent-sample.
Each row's verdict is better / worse / same; the counts of significantly
better and worse pairs are reported per check and overall (the paper's
"+/−" cells).
"""

import math
import pathlib
from typing import Mapping, NamedTuple, Sequence

import numpy as np
from scipy import stats

from vmsst.base import cli
from vmsst.base import files
from vmsst.encoding import protocol
from vmsst.evaluation import pair_ranking
from vmsst.encoding import similarity
from vmsst.evaluation import sts
from vmsst.base import sts_files
from vmsst.evaluation import tatoeba

CRITICAL_Z = 1.96
SPEARMAN_VARIANCE = 1.06


class Towers(NamedTuple):
  """The two sides of a dual encoder as deployed."""
  queries: protocol.UniqueSentences
  documents: protocol.UniqueSentences


def improvement(errors_before: int, errors_after: int) -> float | None:
  """I = (N_e − N_e') / N_e; None when the original made no error."""
  return (errors_before - errors_after) / errors_before if errors_before else None


def two_proportion_z(count_before: int, n_before: int, count_after: int, n_after: int) -> float:
  """z of p_after − p_before with the pooled proportion (0 when both are 0 or 1)."""
  pooled = (count_before + count_after) / (n_before + n_after)
  se = math.sqrt(pooled * (1 - pooled) * (1 / n_before + 1 / n_after))
  return (count_after / n_after - count_before / n_before) / se if se else 0.0


def fisher_z(r_before: float, n_before: int, r_after: float, n_after: int, *,
             variance: float = SPEARMAN_VARIANCE) -> float:
  """z of atanh(r_after) − atanh(r_before); correlations in [−1, 1] (not ×100)."""
  clip = lambda r: float(np.clip(r, -0.999999, 0.999999))
  se = math.sqrt(variance / (n_before - 3) + variance / (n_after - 3))
  return (math.atanh(clip(r_after)) - math.atanh(clip(r_before))) / se


def verdict(z: float, *, higher_is_better: bool) -> str:
  """"better" / "worse" when |z| > 1.96 (two-tailed, 5%), else "same"."""
  if abs(z) <= CRITICAL_Z:
    return "same"
  return "better" if (z > 0) == higher_is_better else "worse"


def _row(check: str, pair: str, before: float, after: float, z: float, n: int,
         higher_is_better: bool) -> dict:
  return {"check": check, "pair": pair, "before": before, "after": after, "z": z,
          "p_value": float(2 * stats.norm.sf(abs(z))), "n": n,
          "verdict": verdict(z, higher_is_better=higher_is_better)}


# ---------------------------------------------------------------- per-suite rows


def xnli_rows(before: Mapping, after: Mapping) -> list[dict]:
  """Rows of two pair_ranking.evaluate results (error rates ×100, lower is better).

  One row per language pair, comparison (vs neutral, vs contradiction) and
  measure (cosine, distance): the paper's four XNLI columns.
  """
  rows = []
  for pair, b in before["xnli"].items():
    a = after["xnli"][pair]
    for what in pair_ranking.COMPARISONS:
      for measure in pair_ranking.MEASURES:
        eb, ea = b[what][measure], a[what][measure]
        if not eb["comparisons"]:
          continue
        z = two_proportion_z(eb["errors"], eb["comparisons"], ea["errors"], ea["comparisons"])
        rows.append(_row(f"xnli {what} {measure}", pair, eb["error_rate"], ea["error_rate"], z,
                         eb["comparisons"], higher_is_better=False))
  return rows


def sts_rows(before: Mapping, after: Mapping) -> list[dict]:
  """Rows of two sts.evaluate_stsb_multi_mt results (Spearman ×100, higher is better)."""
  rows = []
  for pair, b in before["pairs"].items():
    a = after["pairs"][pair]
    z = fisher_z(b["spearman"] / 100, b["n"], a["spearman"] / 100, a["n"])
    rows.append(_row("sts spearman", pair, b["spearman"], a["spearman"], z, b["n"],
                     higher_is_better=True))
  return rows


def tatoeba_rows(before: Mapping, after: Mapping) -> list[dict]:
  """Rows of two tatoeba.evaluate results (accuracy ×100, higher is better)."""
  rows = []
  for code, b in before.items():
    if code.startswith("_"):
      continue
    a, n = after[code], b["n"]
    for key, pair in (("xx2en", f"{code}-eng"), ("en2xx", f"eng-{code}")):
      hits_b, hits_a = round(b[key] * n / 100), round(a[key] * n / 100)
      rows.append(_row(f"tatoeba {key}", pair, b[key], a[key],
                       two_proportion_z(hits_b, n, hits_a, n), n, higher_is_better=True))
  return rows


def count_verdicts(rows: Sequence[Mapping]) -> dict:
  """{"all": {"better", "worse", "same"}, "<check>": {...}} over the rows."""
  counts = {}
  for row in rows:
    for key in ("all", row["check"]):
      counts.setdefault(key, {"better": 0, "worse": 0, "same": 0})[row["verdict"]] += 1
  return counts


# ---------------------------------------------------------------- running


def cosine_triplet_loss(anchor: np.ndarray, positive: np.ndarray, negative: np.ndarray,
                        margin: float) -> float:
  """Mean max(0, m − cos(a, p) + cos(a, n)) over rows of float [n, d] arrays."""
  hinge = (margin - similarity.paired_cosine(anchor, positive)
           + similarity.paired_cosine(anchor, negative))
  return float(np.mean(np.maximum(hinge, 0.0)))


def triplet_evaluation(before: Towers, after: Towers, triplets: Sequence[tuple[str, str, str]],
                       *, margin: float = 0.1) -> dict:
  """N_e (before), N_e' (after), I and the held-out cosine triplet loss.

  Anchors are queries, positives and negatives documents, each embedded by
  its tower. `margin` is the cosine hinge's m for "loss_before" /
  "loss_after" (the QueryTower training loss, on held-out triplets).
  """
  columns = [list(c) for c in zip(*triplets)]
  embedded = {}
  for when, towers in (("before", before), ("after", after)):
    embedded[when] = (towers.queries.encode(columns[0], "anchors"),
                      towers.documents.encode(columns[1], "positives"),
                      towers.documents.encode(columns[2], "negatives"))
  counts = {when: pair_ranking.triplet_errors(*vectors) for when, vectors in embedded.items()}
  return {**counts, "margin": margin,
          **{f"loss_{when}": cosine_triplet_loss(*vectors, margin)
             for when, vectors in embedded.items()},
          **{f"improvement_{kind}": improvement(counts["before"][f"{kind}_errors"],
                                                counts["after"][f"{kind}_errors"])
             for kind in ("cosine", "euclidean")}}


def stsb_multi_mt(towers: Towers, folder: pathlib.Path, *,
                  languages: Sequence[str] | None = None, split: str = "test") -> dict:
  """sts.evaluate_stsb_multi_mt's "pairs", asymmetric: sentence1 a query, sentence2 a document.

  Pairing l1-l2 scores the query tower's sentence1 of row i in l1 against
  the document tower's sentence2 of row i in l2, with row i's English gold.
  """
  languages = list(languages or sts_files.STSB_MULTI_MT_LANGUAGES)
  english = sts_files.read_stsb_multi_mt(folder, "en", split)
  queries, documents = {}, {}
  for language in languages:
    pairs = sts_files.read_stsb_multi_mt(folder, language, split)
    sts_files.check_aligned(english, pairs, f"stsb-{language}-{split}")
    queries[language] = towers.queries.encode(pairs.sentences1, f"STSb-MT {language} queries")
    documents[language] = towers.documents.encode(pairs.sentences2,
                                                  f"STSb-MT {language} documents")
  return {"pairs": {
      f"{l1}-{l2}": {"lang1": l1, "lang2": l2, **sts.correlations(
          similarity.paired_cosine(queries[l1], documents[l2]), english.gold, f"{l1}-{l2}")}
      for l1 in languages for l2 in languages}}


def tatoeba_retrieval(towers: Towers, folder: pathlib.Path, *,
                      languages: Sequence[str] | None = None) -> dict:
  """tatoeba.evaluate's per-language accuracies, asymmetric: queries by the query tower.

  xx2en retrieves among the document tower's English sentences with the
  query tower's xx sentences; en2xx the other way round.
  """
  present = tatoeba.available_languages(folder)
  missing = sorted(set(languages or ()) - set(present))
  if not present or missing:
    raise FileNotFoundError(f"Tatoeba languages {missing or 'any'} have no files under "
                            f"{folder}; present: {' '.join(present) or 'none'}.")
  results = {}
  for code in languages or present:
    source, english = tatoeba.read_pairs(folder, code)
    embed = lambda tower, texts, what: tower.encode(texts, f"tatoeba {code} {what}")
    xx2en = tatoeba.retrieval_accuracy(embed(towers.queries, source, "queries"),
                                       embed(towers.documents, english, "documents"))
    en2xx = tatoeba.retrieval_accuracy(embed(towers.queries, english, "queries"),
                                       embed(towers.documents, source, "documents"))
    results[code] = {"xx2en": 100 * xx2en, "en2xx": 100 * en2xx, "n": len(source)}
  return results


def evaluate(original: protocol.Encoder, tuned: protocol.Encoder, data_dir: str | pathlib.Path,
             *, documents: protocol.Encoder | None = None,
             triplets: Sequence[tuple[str, str, str]] | None = None,
             sts_languages: Sequence[str] | None = None,
             tatoeba_languages: Sequence[str] | None = None, margin: float = 0.1,
             progress: bool = True) -> dict:
  """The triplet counts and every preservation row; a missing data folder is skipped and named.

  Args:
    original: the model before tuning (both towers before).
    tuned: the tuned query tower.
    documents: the tuned model's frozen document tower (default: `original`,
      which it is a bit-identical copy of).
  Returns:
    {"triplets": triplet_evaluation | None, "rows": [row], "counts":
     count_verdicts(rows), "skipped": [folder names not found]}.
  """
  data_dir = files.as_path(data_dir)
  wrap = lambda e: protocol.UniqueSentences(e, progress=progress)
  original_towers = wrap(original)
  before = Towers(original_towers, original_towers)
  after = Towers(wrap(tuned), original_towers if documents is None else wrap(documents))
  if triplets is None and (data_dir / "stsb").is_dir():
    from vmsst_tasks.sources import triplet_sets  # pylint: disable=import-outside-toplevel
    triplets = triplet_sets.stsb_triplets(data_dir / "stsb", "test")[0]
  results = {"triplets": (triplet_evaluation(before, after, triplets, margin=margin)
                          if triplets else None),
             "rows": [], "skipped": []}
  suites = {
      "xnli_de": (lambda towers, folder: pair_ranking.evaluate(
          towers.queries, folder, documents=towers.documents), xnli_rows),
      "stsb-multi-mt": (lambda towers, folder: stsb_multi_mt(
          towers, folder, languages=sts_languages), sts_rows),
      tatoeba.FOLDER: (lambda towers, folder: tatoeba_retrieval(
          towers, folder, languages=tatoeba_languages), tatoeba_rows),
  }
  for folder, (run, rows) in suites.items():
    if not (data_dir / folder).is_dir():
      results["skipped"].append(folder)
      continue
    results["rows"] += rows(run(before, data_dir / folder), run(after, data_dir / folder))
  results["counts"] = count_verdicts(results["rows"])
  return results


def _cell(value) -> str:
  return "–" if value is None else f"{value:.2f}" if isinstance(value, float) else str(value)


def report(results: Mapping) -> str:
  """Markdown: the triplet counts and I, the verdict counts, every row."""
  lines = ["# Query-tower tuning: triplets and multilingual preservation", ""]
  t = results["triplets"]
  if t:
    lines += ["| ranking | N_e (original) | N_e' (tuned) | triplets | I |", "|---|---|---|---|---|"]
    for kind in ("cosine", "euclidean"):
      lines.append(f"| {kind} | {t['before'][f'{kind}_errors']} | {t['after'][f'{kind}_errors']}"
                   f" | {t['before']['n']} | {_cell(t[f'improvement_{kind}'])} |")
    lines += ["", f"Held-out cosine triplet loss (m = {t['margin']}): "
              f"{t['loss_before']:.4f} before, {t['loss_after']:.4f} after.", ""]
  lines += ["| check | significantly better | significantly worse | same |", "|---|---|---|---|"]
  for check, c in results["counts"].items():
    lines.append(f"| {check} | {c['better']} | {c['worse']} | {c['same']} |")
  lines += ["", "| check | pair | before | after | z | verdict |", "|---|---|---|---|---|---|"]
  lines += [f"| {r['check']} | {r['pair']} | {_cell(r['before'])} | {_cell(r['after'])} | "
            f"{r['z']:.2f} | {r['verdict']} |" for r in results["rows"]]
  if results["skipped"]:
    lines += ["", f"Not found (skipped): {', '.join(results['skipped'])}."]
  return "\n".join(lines) + "\n"


if __name__ == "__main__":
  cli.old_name("vmsst.evaluation.preservation")
