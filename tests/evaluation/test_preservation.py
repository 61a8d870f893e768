"""Preservation report: improvement I, z-tests by hand, per-pair rows and verdict counts."""

import math

import numpy as np
import pytest

from vmsst.evaluation import encoders
from vmsst.evaluation import preservation as pv


def test_improvement_by_hand():
  assert pv.improvement(20, 15) == 0.25
  assert pv.improvement(20, 30) == -0.5
  assert pv.improvement(0, 3) is None


def test_cosine_triplet_loss_by_hand():
  # cos(a, p) = 0.6, cos(a, n) = 0 -> 0; cos(a, p) = 0, cos(a, n) = 1 -> 0.1 + 1 = 1.1.
  a = np.array([[1.0, 0.0], [1.0, 0.0]])
  p = np.array([[0.6, 0.8], [0.0, 2.0]])
  n = np.array([[0.0, 1.0], [3.0, 0.0]])
  assert pv.cosine_triplet_loss(a, p, n, 0.1) == pytest.approx(0.55, abs=1e-6)


def test_two_proportion_z_by_hand():
  # 30/100 -> 15/100: pooled 0.225, se = sqrt(0.225 · 0.775 · (1/100 + 1/100)) = 0.059055.
  z = pv.two_proportion_z(30, 100, 15, 100)
  assert z == pytest.approx(-0.15 / math.sqrt(0.225 * 0.775 * 0.02), rel=1e-12)
  assert z == pytest.approx(-2.540, abs=1e-3)
  assert pv.verdict(z, higher_is_better=False) == "better"   # fewer errors
  assert pv.verdict(z, higher_is_better=True) == "worse"     # lower accuracy
  # 30/100 -> 25/100: z = −0.05 / sqrt(0.275 · 0.725 · 0.02) = −0.7918: not significant.
  assert pv.two_proportion_z(30, 100, 25, 100) == pytest.approx(-0.7918, abs=1e-4)
  assert pv.verdict(-0.7918, higher_is_better=False) == "same"
  assert pv.two_proportion_z(0, 50, 0, 50) == 0.0


def test_fisher_z_by_hand():
  # Spearman 0.8 -> 0.7 on 1379 pairs: (atanh 0.7 − atanh 0.8) / sqrt(2 · 1.06 / 1376).
  z = pv.fisher_z(0.8, 1379, 0.7, 1379)
  assert z == pytest.approx((0.867301 - 1.098612) / math.sqrt(2 * 1.06 / 1376), rel=1e-5)
  assert z == pytest.approx(-5.893, abs=1e-3)
  assert pv.verdict(z, higher_is_better=True) == "worse"
  assert pv.fisher_z(0.5, 103, 0.5, 103) == 0.0


def test_rows_and_counts_from_suite_results():
  xnli = lambda e, c: {"xnli": {"de-de": {
      "entailment_vs_neutral": {"errors": e, "comparisons": 100, "error_rate": float(e)},
      "entailment_vs_contradiction": {"errors": c, "comparisons": 100, "error_rate": float(c)}}}}
  rows = pv.xnli_rows(xnli(30, 10), xnli(15, 11))
  assert [(r["check"], r["verdict"]) for r in rows] == [
      ("xnli entailment_vs_neutral", "better"), ("xnli entailment_vs_contradiction", "same")]
  sts_result = lambda r: {"pairs": {"en-de": {"spearman": r, "n": 1379}}}
  assert pv.sts_rows(sts_result(80.0), sts_result(70.0))[0]["verdict"] == "worse"
  tatoeba_result = lambda xx, en: {"deu": {"xx2en": xx, "en2xx": en, "n": 1000}, "_mean": 0}
  t_rows = pv.tatoeba_rows(tatoeba_result(50.0, 50.0), tatoeba_result(60.0, 51.0))
  assert [(r["pair"], r["verdict"]) for r in t_rows] == [("deu-eng", "better"),
                                                         ("eng-deu", "same")]
  counts = pv.count_verdicts(rows + t_rows)
  assert counts["all"] == {"better": 2, "worse": 0, "same": 2}
  assert counts["tatoeba xx2en"] == {"better": 1, "worse": 0, "same": 0}


def test_triplet_evaluation_uses_original_documents_and_tuned_anchors():
  # 2-d vectors by hand. Original: a1 is nearer n1 (an error), a2 nearer p2.
  # Tuned moves a1 onto p1 and a2 onto n2: one error fixed, one made -> I = 0.
  table = {"a1": [1.0, 0.0], "p1": [0.0, 1.0], "n1": [1.0, 0.1],
           "a2": [0.0, 1.0], "p2": [0.1, 1.0], "n2": [1.0, 0.0]}
  tuned_table = dict(table, a1=[0.0, 1.0], a2=[1.0, 0.0])
  wrap = lambda t, name: encoders.UniqueSentences(encoders.PrecomputedEncoder(t, name),
                                                  progress=False)
  result = pv.triplet_evaluation(wrap(table, "original"), wrap(tuned_table, "tuned"),
                                 [("a1", "p1", "n1"), ("a2", "p2", "n2")])
  assert result["before"]["cosine_errors"] == 1 and result["after"]["cosine_errors"] == 1
  assert result["improvement_cosine"] == 0.0
  # Before: cos(a1, p1) = 0, cos(a1, n1) = 0.995; cos(a2, p2) = 0.995, cos(a2, n2) = 0.
  hinge = 0.1 + 1 / math.sqrt(1.01)
  assert result["loss_before"] == pytest.approx(hinge / 2, rel=1e-5)
  fixed = pv.triplet_evaluation(wrap(table, "original"),
                                wrap(dict(table, a1=[0.0, 1.0]), "tuned"),
                                [("a1", "p1", "n1"), ("a2", "p2", "n2")])
  assert fixed["after"]["cosine_errors"] == 0 and fixed["improvement_cosine"] == 1.0


def test_report_lists_counts_and_rows():
  results = {"triplets": None, "skipped": ["tatoeba/v1"],
             "rows": [pv._row("sts spearman", "en-de", 80.0, 70.0, -5.9, 1379, True)]}
  results["counts"] = pv.count_verdicts(results["rows"])
  text = pv.report(results)
  assert "| sts spearman | en-de | 80.00 | 70.00 | -5.90 | worse |" in text
  assert "| all | 0 | 1 | 0 |" in text and "tatoeba/v1" in text
  assert np.isclose(results["rows"][0]["p_value"], 2 * 1.8e-9, rtol=0.5)
