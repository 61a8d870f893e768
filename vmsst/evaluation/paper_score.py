"""The paper's Score: one number averaging the task families present.

(Not the `python -m vmsst.score` command, which scores sentence pairs: vmsst/score.py.)

Components (each ×100, each the headline of its family):
  * English STS: mean of the per-year "all" Spearman of STS12–16 and the
    STSb test Spearman (whichever of the six are present).
  * XL STS: the cross-lingual average "XL" (Spearman) of SemEval-2017 STS
    when present, else of STSb-multi-mt (machine-translated, so noted).
  * Tatoeba: the mean over evaluated languages of the two-direction accuracy.
  * BUCC: mean over language pairs of (cosine F1 + margin F1) / 2.
  * Question retrieval: mean R@1 over the sets present.
Score is the mean of the components present; what was absent is listed so a
Score is never compared across runs with different coverage unknowingly.
"""

import numpy as np

COMPONENTS = ("english_sts", "xl_sts", "tatoeba", "bucc", "question_retrieval")


def components(results: dict) -> dict[str, float | None]:
  """Component name -> value (None when its data was not evaluated)."""
  return {
      "english_sts": _english_sts(results),
      "xl_sts": _xl_sts(results),
      "tatoeba": results["tatoeba"]["_mean"] if "tatoeba" in results else None,
      "bucc": _bucc(results),
      "question_retrieval": (results["question_retrieval"]["_mean"]
                             if "question_retrieval" in results else None),
  }


def paper_score(results: dict) -> dict:
  """{"score", "components", "absent", "notes"} for a results.json dict."""
  parts = components(results)
  present = {k: v for k, v in parts.items() if v is not None}
  notes = []
  if parts["xl_sts"] is not None and "sts17" not in results:
    notes.append("XL STS from STSb-multi-mt (machine-translated), SemEval-2017 absent")
  return {
      "score": float(np.mean(list(present.values()))) if present else None,
      "components": parts,
      "absent": [k for k, v in parts.items() if v is None],
      "notes": notes,
  }


def _english_sts(results: dict) -> float | None:
  values = []
  for year, r in results.get("sts12-16", {}).get("years", {}).items():
    del year
    values.append(r["all"]["spearman"])
  if "stsb" in results:
    values.append(results["stsb"]["test"]["spearman"])
  return float(np.mean(values)) if values else None


def _xl_sts(results: dict) -> float | None:
  for suite in ("sts17", "stsb-multi-mt"):
    average = results.get(suite, {}).get("averages", {}).get("XL")
    if average is not None:
      return average["spearman"]
  return None


def _bucc(results: dict) -> float | None:
  if "bucc" not in results:
    return None
  mean = results["bucc"]["_mean"]
  return (mean["cosine_f1"] + mean["margin_f1"]) / 2
