r"""Query-tower tuning: triplet improvement, and multilingual quality before vs after.

  python -m vmsst.evaluation.preservation --before=runs/contrastive_cpu \
      --after=runs/query_tower_cpu --data_dir=../shared/data --output=runs/preservation

Triplets. N_e counts the held-out triplets the original model ranks wrongly
(s(a, p) <= s(a, n), ties are errors: pair_ranking.triplet_errors), N_e' the
same with the anchor (the query) from the tuned query tower and positive and
negative (the documents) from the frozen document tower. The document tower
is an exact copy of the original model, so the original model encodes the
documents in both counts. The improvement is I = (N_e − N_e') / N_e
(None when N_e = 0), for cosine and for Euclidean ranking. Default held-out
triplets: STSb test built by tasks/triplets.py (training uses STSb train).

Preservation. The evaluation suite of #3 runs on the original and on the
tuned encoder (the query tower, as `vmsst.evaluate` sees it); every language
pair gives one comparison with a two-tailed z-test at |z| > 1.96:
  * xnli: XNLI-style error counts (pair_ranking), entailed vs neutral and
    entailed vs contradiction, per premise-hypothesis language pair;
  * sts: STSb-multi-mt Spearman correlation per ordered language pairing;
  * tatoeba: retrieval accuracy per language, xx→eng and eng→xx.
Error rates and accuracies use the two-proportion z-test with the pooled
proportion. It treats before and after as independent samples although they
share the items; for positively correlated paired outcomes this overstates
the variance of the difference, so it errs towards "no change" (a paired
McNemar test would be sharper). Correlations use Fisher's z,
atanh(r₂) − atanh(r₁) over sqrt(c/(n₁ − 3) + c/(n₂ − 3)), c = 1.06 for
Spearman (Fieller, Hartley & Pearson 1957), likewise independent-sample.
Each row's verdict is better / worse / same; the counts of significantly
better and worse pairs are reported per check and overall.
"""

import json
import math
import pathlib
from typing import Mapping, Sequence

import numpy as np
from absl import app
from absl import flags
from scipy import stats

from vmsst.evaluation import encoders
from vmsst.evaluation import pair_ranking
from vmsst.evaluation import similarity
from vmsst.evaluation import sts
from vmsst.evaluation import tatoeba

CRITICAL_Z = 1.96
SPEARMAN_VARIANCE = 1.06


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
  """Rows of two pair_ranking.evaluate results (error rates ×100, lower is better)."""
  rows = []
  for pair, b in before["xnli"].items():
    a = after["xnli"][pair]
    for what in ("entailment_vs_neutral", "entailment_vs_contradiction"):
      eb, ea = b[what], a[what]
      if not eb["comparisons"]:
        continue
      z = two_proportion_z(eb["errors"], eb["comparisons"], ea["errors"], ea["comparisons"])
      rows.append(_row(f"xnli {what}", pair, eb["error_rate"], ea["error_rate"], z,
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


def triplet_evaluation(original: encoders.UniqueSentences, tuned: encoders.UniqueSentences,
                       triplets: Sequence[tuple[str, str, str]], *, margin: float = 0.1) -> dict:
  """N_e (original everywhere), N_e' (tuned anchors, original documents), I, held-out loss.

  `margin` is the cosine hinge's m for "loss_before" / "loss_after" (the
  QueryTower training loss, on held-out triplets).
  """
  anchors, positives, negatives = (list(c) for c in zip(*triplets))
  documents = [original.encode(positives, "positives"), original.encode(negatives, "negatives")]
  anchors_before, anchors_after = (e.encode(anchors, "anchors") for e in (original, tuned))
  before = pair_ranking.triplet_errors(anchors_before, *documents)
  after = pair_ranking.triplet_errors(anchors_after, *documents)
  return {"before": before, "after": after, "margin": margin,
          "loss_before": cosine_triplet_loss(anchors_before, *documents, margin),
          "loss_after": cosine_triplet_loss(anchors_after, *documents, margin),
          **{f"improvement_{kind}": improvement(before[f"{kind}_errors"],
                                                after[f"{kind}_errors"])
             for kind in ("cosine", "euclidean")}}


def evaluate(original: encoders.Encoder, tuned: encoders.Encoder, data_dir: str | pathlib.Path,
             *, triplets: Sequence[tuple[str, str, str]] | None = None,
             sts_languages: Sequence[str] | None = None,
             tatoeba_languages: Sequence[str] | None = None, margin: float = 0.1,
             progress: bool = True) -> dict:
  """The triplet counts and every preservation row; a missing data folder is skipped and named.

  Returns:
    {"triplets": triplet_evaluation | None, "rows": [row], "counts":
     count_verdicts(rows), "skipped": [folder names not found]}.
  """
  data_dir = pathlib.Path(data_dir)
  original, tuned = (encoders.UniqueSentences(e, progress=progress) for e in (original, tuned))
  if triplets is None and (data_dir / "stsb").is_dir():
    from tasks import triplets as triplets_lib  # pylint: disable=import-outside-toplevel
    triplets = triplets_lib.stsb_triplets(data_dir / "stsb", "test")[0]
  results = {"triplets": (triplet_evaluation(original, tuned, triplets, margin=margin)
                          if triplets else None),
             "rows": [], "skipped": []}
  suites = {
      "xnli_de": (lambda enc, folder: pair_ranking.evaluate(enc, folder), xnli_rows),
      "stsb-multi-mt": (lambda enc, folder: sts.evaluate_stsb_multi_mt(
          enc, folder, languages=sts_languages), sts_rows),
      tatoeba.FOLDER: (lambda enc, folder: tatoeba.evaluate(
          enc, folder, languages=tatoeba_languages), tatoeba_rows),
  }
  for folder, (run, rows) in suites.items():
    if not (data_dir / folder).is_dir():
      results["skipped"].append(folder)
      continue
    results["rows"] += rows(run(original, data_dir / folder), run(tuned, data_dir / folder))
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


FLAGS = flags.FLAGS


def main(argv: Sequence[str]) -> None:
  del argv
  from vmsst import inference  # pylint: disable=import-outside-toplevel
  original = inference.CheckpointEncoder.from_model_dir(FLAGS.before)
  tuned = inference.CheckpointEncoder.from_model_dir(FLAGS.after)
  triplets = pair_ranking.read_triplets(FLAGS.triplets)[0] if FLAGS.triplets else None
  results = evaluate(original, tuned, FLAGS.data_dir, triplets=triplets,
                     sts_languages=FLAGS.sts_languages,
                     tatoeba_languages=FLAGS.tatoeba_languages, margin=FLAGS.margin)
  output = pathlib.Path(FLAGS.output)
  output.mkdir(parents=True, exist_ok=True)
  (output / "preservation.json").write_text(json.dumps(results, indent=1))
  (output / "preservation.md").write_text(report(results))
  print(report(results))


if __name__ == "__main__":
  flags.DEFINE_string("before", None, "The original model directory.", required=True)
  flags.DEFINE_string("after", None, "The query-tower-tuned model directory.", required=True)
  flags.DEFINE_string("data_dir", "../shared/data", "Root of the evaluation data.")
  flags.DEFINE_string("triplets", None, "Held-out triplet TSV (default: STSb test built).")
  flags.DEFINE_list("sts_languages", None, "STSb-multi-mt languages (default: all 11).")
  flags.DEFINE_list("tatoeba_languages", None, "Tatoeba codes (default: all present).")
  flags.DEFINE_float("margin", 0.1, "m of the held-out cosine triplet loss (QueryTower.margin).")
  flags.DEFINE_string("output", None, "Directory for preservation.json / .md.", required=True)
  app.run(main)
