"""Statistics of a multi-seed comparison: t-intervals, paired tests, Table 1.

Input, `runs`: objective -> seed -> {"retrieval": {set name: accuracy ×100,
..., "mean": ...}, "score": the paper's Score or None}. Each (objective, seed)
is one training run; runs that share a seed share the data order, the
initialisation seed and the evaluation data, which is what makes pairing by
seed meaningful.

Two paired tests per ordering the paper claims, because they answer different
questions:
  * over seeds (paired t-test, scipy.stats.ttest_rel): does the ordering
    survive training randomness? The unit is a run; with 2-3 seeds the test
    has little power, so an ordering can be real and still not significant.
  * over language pairs (Wilcoxon signed-rank, scipy.stats.wilcoxon, on the
    per-set retrieval accuracy averaged over seeds): does the ordering hold
    across languages? The unit is a held-out set; it does not cover seed
    noise, and the sets share one model, so it is the weaker evidence of the
    two when they disagree.
The Score is one number per run, so it is paired over seeds only. All tests
are two-sided; the sign of the mean difference gives the direction.
"""

import math
from typing import Mapping, Sequence

import numpy as np
from scipy import stats

from vmsst.evaluation import paper_score as score_lib

# (better, worse) as the VMSST paper claims them: Table 1 (VMSST ahead of
# BiTranslation and Contrastive) and Table 4 (the KL term helps).
PAPER_ORDERINGS = (("vmsst", "bitranslation"), ("vmsst", "contrastive"),
                   ("vmsst", "vmsst_no_kl"))
CONFIDENCE = 0.95


def t_interval(values: Sequence[float], confidence: float = CONFIDENCE) -> dict:
  """{"mean", "half_width", "n", "values"}: mean ± t_{n-1} · s / √n (nan for n < 2)."""
  x = np.asarray(values, dtype=np.float64)
  n = len(x)
  half = math.nan
  if n >= 2:
    half = float(stats.t.ppf(0.5 + confidence / 2, n - 1) * x.std(ddof=1) / math.sqrt(n))
  return {"mean": float(x.mean()) if n else math.nan, "half_width": half, "n": n,
          "values": [float(v) for v in x]}


def paired_t(a: Sequence[float], b: Sequence[float], confidence: float = CONFIDENCE) -> dict:
  """Paired t-test of a - b: mean difference, its t-interval, t and two-sided p."""
  a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
  result = {"test": "paired t", "n": len(a), **_difference(a - b, confidence),
            "statistic": math.nan, "p": math.nan}
  if len(a) >= 2 and np.any(a - b != (a - b)[0]):
    test = stats.ttest_rel(a, b)
    result.update(statistic=float(test.statistic), p=float(test.pvalue))
  return result


def paired_wilcoxon(a: Sequence[float], b: Sequence[float],
                    confidence: float = CONFIDENCE) -> dict:
  """Wilcoxon signed-rank test of a - b (zero differences dropped, scipy's default)."""
  a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
  result = {"test": "Wilcoxon signed-rank", "n": len(a), **_difference(a - b, confidence),
            "statistic": math.nan, "p": math.nan}
  if np.count_nonzero(a - b) >= 1:
    test = stats.wilcoxon(a, b)
    result.update(statistic=float(test.statistic), p=float(test.pvalue))
  return result


def _difference(d: np.ndarray, confidence: float) -> dict:
  interval = t_interval(d, confidence)
  return {"mean_difference": interval["mean"], "half_width": interval["half_width"]}


def summarize(runs: Mapping[str, Mapping[int, dict]],
              orderings: Sequence[tuple[str, str]] = PAPER_ORDERINGS) -> dict:
  """{"objectives": {name: {"retrieval": interval, "score": interval, "seeds", "sets"}},
  "tests": [...]} for the objectives present; an ordering is tested when both sides ran."""
  summary = {"confidence": CONFIDENCE, "objectives": {}, "tests": []}
  for name, by_seed in runs.items():
    seeds = sorted(by_seed)
    scores = [by_seed[s]["score"] for s in seeds if by_seed[s].get("score") is not None]
    retrieved = _has_retrieval(by_seed)
    summary["objectives"][name] = {
        "seeds": seeds,
        "retrieval": (t_interval([by_seed[s]["retrieval"]["mean"] for s in seeds])
                      if retrieved else None),
        "score": t_interval(scores) if scores else None,
        "sets": {k: float(np.mean([by_seed[s]["retrieval"][k] for s in seeds]))
                 for k in _set_names(by_seed[seeds[0]]["retrieval"])} if retrieved else {},
    }
  for better, worse in orderings:
    if better in runs and worse in runs:
      summary["tests"] += _ordering_tests(runs[better], runs[worse], better, worse)
  return summary


def _has_retrieval(by_seed: Mapping[int, dict]) -> bool:
  """Every seed logged held-out retrieval (a run without train.evaluator has none)."""
  return all("mean" in r.get("retrieval", {}) for r in by_seed.values())


def _set_names(retrieval: Mapping[str, float]) -> list[str]:
  return sorted(k for k in retrieval if k not in ("mean", "chance"))


def _ordering_tests(a: Mapping[int, dict], b: Mapping[int, dict], better: str,
                    worse: str) -> list[dict]:
  """The three tests of one claimed ordering (on the seeds both ran)."""
  seeds = sorted(set(a) & set(b))
  head = {"better": better, "worse": worse}
  a, b = {s: a[s] for s in seeds}, {s: b[s] for s in seeds}
  tests = []
  if _has_retrieval(a) and _has_retrieval(b):
    tests.append(dict(head, metric="retrieval", paired_over="seeds", **paired_t(
        [a[s]["retrieval"]["mean"] for s in seeds], [b[s]["retrieval"]["mean"] for s in seeds])))
    sets = sorted(set(_set_names(a[seeds[0]]["retrieval"]))
                  & set(_set_names(b[seeds[0]]["retrieval"])))
    tests.append(dict(head, metric="retrieval", paired_over="language pairs", **paired_wilcoxon(
        [np.mean([a[s]["retrieval"][k] for s in seeds]) for k in sets],
        [np.mean([b[s]["retrieval"][k] for s in seeds]) for k in sets])))
  if all(a[s].get("score") is not None and b[s].get("score") is not None for s in seeds):
    tests.append(dict(head, metric="Score", paired_over="seeds", **paired_t(
        [a[s]["score"] for s in seeds], [b[s]["score"] for s in seeds])))
  return tests


def _pm(interval: dict | None) -> str:
  if interval is None:
    return "–"
  if math.isnan(interval["half_width"]):
    return f"{interval['mean']:.2f}"
  return f"{interval['mean']:.2f} ± {interval['half_width']:.2f}"


def table_markdown(summary: dict) -> str:
  """Table 1 (mean ± 95% t-interval over seeds) and the paired tests, as markdown."""
  lines = ["| objective | seeds | held-out retrieval (%) | Score |", "|---|---:|---:|---:|"]
  for name, row in summary["objectives"].items():
    lines.append(f"| {name} | {len(row['seeds'])} | {_pm(row['retrieval'])} | "
                 f"{_pm(row['score'])} |")
  if summary["tests"]:
    lines += ["", "| claim | metric | paired over | n | mean difference | test | p |",
              "|---|---|---|---:|---:|---|---:|"]
    for t in summary["tests"]:
      diff = {"mean": t["mean_difference"], "half_width": t["half_width"]}
      lines.append(f"| {t['better']} > {t['worse']} | {t['metric']} | {t['paired_over']} | "
                   f"{t['n']} | {_pm(diff)} | {t['test']} | {_p(t['p'])} |")
  return "\n".join(lines)


def _p(p: float) -> str:
  if math.isnan(p):
    return "–"
  return "< 0.001" if p < 0.001 else f"{p:.3f}"


def components_table(components: Mapping[str, Sequence[dict]]) -> str:
  """Markdown: name -> the paper's Score, its components and what is apart, each the mean
  over that name's `paper_score.paper_score` dicts (one per seed), then what they lack."""
  lines = ["| model | " + " | ".join(score_lib.HEADER) + " |",
           "|---|" + "---:|" * len(score_lib.HEADER)]
  for name, scores in components.items():
    columns = zip(*(score_lib.row(s) for s in scores))
    lines.append(f"| {name} | " + " | ".join(_mean_cell(list(c)) for c in columns) + " |")
  notes = score_lib.notes_markdown([s for scores in components.values() for s in scores])
  return "\n".join(lines) + ("\n\n" + notes if notes else "")


def _mean_cell(values: Sequence[float | None]) -> str:
  present = [v for v in values if v is not None]
  return f"{np.mean(present):.1f}" if present else "–"
