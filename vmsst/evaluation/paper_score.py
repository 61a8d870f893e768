"""The paper's Score (VMSST §6.2, Table 1), and the five-family score it replaced.

(Not the `python -m vmsst.score` command, which scores sentence pairs: vmsst/score.py.)

`paper_score`: "the average of six subtasks" (Wieting et al. 2023, §6.2),
each ×100:
  * english_sts: SemEval STS 2012–2016; per year the mean of its datasets'
    Pearson r, then the mean over years (`sts12-16` averages.mean.pearson;
    STSb is not part of it).
  * xl_sts: the mean Pearson r of SemEval-2017's ar-ar, ar-en, es-es, es-en
    and tr-en (`PAPER_STS17_TRACKS`). Stand-in when SemEval-2017 is absent:
    STSb-multi-mt's XL Pearson (every pairing but en-en; machine-translated).
  * tatoeba: the mean over languages of the two-direction accuracy (the paper
    averages 112 languages; the count here is noted when it differs).
  * bucc: mean over language pairs of (cosine F1 + margin F1) / 2.
  * nq, mkqa: R@1 of NQ and MKQA questions against the PAQ knowledge base.
    Neither is here; our `question_retrieval` suite (a KB built from
    STSb-multi-mt / STS16 questions) stands in for the family but is reported
    apart (`apart`), never averaged into the Score: it is another task.
The Score is the mean of the components present; `absent` and `stand_ins`
say what it lacks and what was substituted, so two Scores are compared only
knowing their coverage. Table 1 row check (Contrastive, 6 layers):
(65.5 + 66.8 + 63.1 + (66.2 + 84.0) / 2 + 34.1 + 17.6) / 6 = 53.7.

`five_family_score`: this codebase's earlier summary, kept for the figures
measured with it: the mean of English STS (per-year concatenated Spearman and
STSb test Spearman), XL STS Spearman (SemEval-2017, else STSb-multi-mt),
Tatoeba, BUCC and question retrieval. It is not the paper's Score.
"""

import numpy as np

from vmsst.evaluation.sts import ENGLISH_STS_YEARS

COMPONENTS = ("english_sts", "xl_sts", "tatoeba", "bucc", "nq", "mkqa")
# Reported next to the Score, outside it.
APART = ("question_retrieval",)
# Column titles, shared by report.md and vmsst.compare's Table 1.
TITLES = {"english_sts": "Eng. STS", "xl_sts": "XL STS", "tatoeba": "Tatoeba", "bucc": "BUCC",
          "nq": "NQ", "mkqa": "MKQA", "question_retrieval": "Q. retrieval (stand-in, apart)"}
# Table 1's columns: the Score, the six components, then what is reported apart.
HEADER = ["Score", *(TITLES[k] for k in (*COMPONENTS, *APART))]
# SemEval-2017 sets of §6.2's cross-lingual STS (track 4b, es-en news, is not among them).
PAPER_STS17_TRACKS = ("track1.ar-ar", "track2.ar-en", "track3.es-es", "track4a.es-en",
                      "track6.tr-en")
TATOEBA_PAPER_LANGUAGES = 112
_NO_PAQ = "no NQ, MKQA or PAQ here"


def paper_score(results: dict) -> dict:
  """§6.2's Score of a results.json dict.

  Returns:
    {"score": mean of the components present (None if none),
     "components": {name: value or None} for COMPONENTS,
     "absent": [names without data], "stand_ins": {name: what replaced its data},
     "apart": {"question_retrieval": value or None} (not in the Score),
     "notes": [coverage differences from the paper]}.
  """
  components, stand_ins, notes = {}, {}, []
  components["english_sts"] = _english_sts_pearson(results, notes)
  components["xl_sts"] = _xl_sts_pearson(results, stand_ins, notes)
  components["tatoeba"] = _tatoeba(results, notes)
  components["bucc"] = _bucc(results)
  if results.get("bucc", {}).get("_built"):
    stand_ins["bucc"] = "a BUCC-format task built from STSb-multi-mt (vmsst.build_data.bucc)"
  components["nq"] = components["mkqa"] = None
  apart = {"question_retrieval": _question_retrieval(results)}
  if apart["question_retrieval"] is not None:
    notes.append(f"NQ and MKQA absent ({_NO_PAQ}); Q. retrieval (a KB built from STSb-multi-mt "
                 "/ STS16 questions) stands in for the family, reported apart, not in the Score")
  return {"score": score_from(components), "components": components,
          "absent": [k for k, v in components.items() if v is None],
          "stand_ins": stand_ins, "apart": apart, "notes": notes}


def score_from(components: dict[str, float | None]) -> float | None:
  """The Score of component values ×100 (None: absent): their mean over those present.

  E.g. Table 1's Contrastive (6 layers): english_sts 65.5, xl_sts 66.8,
  tatoeba 63.1, bucc `bucc_component(66.2, 84.0)`, nq 34.1, mkqa 17.6 -> 53.7.
  """
  return _mean([v for v in components.values() if v is not None])


def bucc_component(cosine_f1: float, margin_f1: float) -> float:
  """BUCC's one component: "we average performance of the cosine and margin based scoring"."""
  return (cosine_f1 + margin_f1) / 2


def row(summary: dict) -> list[float | None]:
  """A `paper_score` dict as Table 1's cells: Score, the six components, then what is apart."""
  return ([summary["score"]] + [summary["components"][k] for k in COMPONENTS]
          + [summary["apart"][k] for k in APART])


def notes_markdown(summaries: list[dict]) -> str:
  """What the Scores lack, what stood in for it and other coverage notes, as markdown lines."""
  absent = {k for s in summaries for k in s["absent"]}
  stand_ins = {k: v for s in summaries for k, v in s["stand_ins"].items()}
  notes = sorted({n for s in summaries for n in s["notes"]})
  lines = []
  if absent:
    lines.append("Absent from the Score (no data): " + ", ".join(
        TITLES[k] for k in COMPONENTS if k in absent) + ".")
  lines += [f"Stand-in for {TITLES[k]}: {v}." for k, v in sorted(stand_ins.items())]
  lines += [f"Note: {n}." for n in notes]
  return "\n\n".join(lines)


def five_family_score(results: dict) -> dict:
  """The earlier, Spearman-based summary (module docstring): {"score", "components", "absent"}."""
  english = [r["all"]["spearman"] for r in results.get("sts12-16", {}).get("years", {}).values()]
  if "stsb" in results:
    english.append(results["stsb"]["test"]["spearman"])
  xl = next((results[s]["averages"]["XL"]["spearman"] for s in ("sts17", "stsb-multi-mt")
             if "XL" in results.get(s, {}).get("averages", {})), None)
  components = {"english_sts": _mean(english), "xl_sts": xl, "tatoeba": _tatoeba(results, []),
                "bucc": _bucc(results), "question_retrieval": _question_retrieval(results)}
  return {"score": _mean([v for v in components.values() if v is not None]),
          "components": components, "absent": [k for k, v in components.items() if v is None]}


def _mean(values) -> float | None:
  return float(np.mean(values)) if values else None


def _english_sts_pearson(results: dict, notes: list) -> float | None:
  """Mean over years of the year's mean per-dataset Pearson."""
  years = results.get("sts12-16", {}).get("years", {})
  if not years:
    return None
  missing = [y for y in ENGLISH_STS_YEARS if y not in years]
  if missing:
    notes.append(f"English STS without {', '.join(missing)}")
  notes.extend(f"{year}: {r['note'].rstrip('.')}" for year, r in years.items() if "note" in r)
  return _mean([r["mean"]["pearson"] for r in years.values()])


def _xl_sts_pearson(results: dict, stand_ins: dict, notes: list) -> float | None:
  """SemEval-2017's five sets of §6.2, else STSb-multi-mt's XL (a stand-in)."""
  tracks = results.get("sts17", {}).get("tracks", {})
  chosen = [tracks[t]["pearson"] for t in PAPER_STS17_TRACKS if t in tracks]
  if chosen:
    missing = [t for t in PAPER_STS17_TRACKS if t not in tracks]
    if missing:
      notes.append(f"XL STS without SemEval-2017 {', '.join(missing)}")
    return _mean(chosen)
  xl = results.get("stsb-multi-mt", {}).get("averages", {}).get("XL")
  if xl is None:
    return None
  stand_ins["xl_sts"] = ("STSb-multi-mt XL Pearson (machine-translated; SemEval-2017 "
                         f"{', '.join(t.split('.')[1] for t in PAPER_STS17_TRACKS)} absent)")
  return xl["pearson"]


def _tatoeba(results: dict, notes: list) -> float | None:
  if "tatoeba" not in results:
    return None
  count = results["tatoeba"].get("_languages")
  if count is not None and count != TATOEBA_PAPER_LANGUAGES:
    notes.append(f"Tatoeba over {count} languages (the paper: {TATOEBA_PAPER_LANGUAGES})")
  return results["tatoeba"]["_mean"]


def _bucc(results: dict) -> float | None:
  if "bucc" not in results:
    return None
  mean = results["bucc"]["_mean"]
  return bucc_component(mean["cosine_f1"], mean["margin_f1"])


def _question_retrieval(results: dict) -> float | None:
  return results["question_retrieval"]["_mean"] if "question_retrieval" in results else None
