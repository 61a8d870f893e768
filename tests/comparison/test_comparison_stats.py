"""comparison_stats: intervals and paired tests against scipy and hand-computed numbers."""

import math

import numpy as np
import pytest
from scipy import stats

from vmsst.comparison import stats as cs


def test_t_interval_matches_scipy_and_hand_computation():
  values = [10.0, 12.0, 17.0]
  got = cs.t_interval(values)
  # mean 13, s = sqrt(13), t_{0.975, 2} = 4.302653
  assert got["mean"] == pytest.approx(13.0)
  assert got["half_width"] == pytest.approx(4.302653 * math.sqrt(13) / math.sqrt(3), rel=1e-6)
  low, high = stats.t.interval(0.95, 2, loc=13.0, scale=stats.sem(values))
  assert (got["mean"] - got["half_width"], got["mean"] + got["half_width"]) == pytest.approx(
      (low, high))
  assert got["n"] == 3 and got["values"] == values


def test_one_value_has_no_interval():
  got = cs.t_interval([5.0])
  assert got["mean"] == 5.0 and math.isnan(got["half_width"])


def test_paired_t_matches_scipy():
  a, b = [30.1, 28.4, 31.0], [27.0, 27.9, 29.5]
  got = cs.paired_t(a, b)
  want = stats.ttest_rel(a, b)
  assert got["statistic"] == pytest.approx(want.statistic)
  assert got["p"] == pytest.approx(want.pvalue)
  d = np.subtract(a, b)  # 3.1, 0.5, 1.5: mean 1.7, t = 1.7 / (s / sqrt 3)
  assert got["mean_difference"] == pytest.approx(1.7)
  assert got["statistic"] == pytest.approx(1.7 / (d.std(ddof=1) / math.sqrt(3)))
  assert got["half_width"] == pytest.approx(stats.t.ppf(0.975, 2) * d.std(ddof=1) / math.sqrt(3))
  assert got["test"] == "paired t" and got["n"] == 3


def test_paired_t_of_identical_runs_has_no_p_value():
  got = cs.paired_t([1.0, 2.0], [1.0, 2.0])
  assert got["mean_difference"] == 0.0 and math.isnan(got["p"])


def test_wilcoxon_matches_scipy_on_known_numbers():
  a = [5.0, 7.5, 3.0, 9.0, 4.0, 6.0]
  b = [4.0, 7.0, 3.5, 6.0, 2.0, 5.0]
  got = cs.paired_wilcoxon(a, b)
  want = stats.wilcoxon(a, b)
  # |d| ranks: 0.5 -> 1.5, 0.5 -> 1.5, 1 -> 3.5, 1 -> 3.5, 2 -> 5, 3 -> 6; the one negative
  # difference (-0.5) has rank 1.5, so the smaller rank sum is 1.5.
  assert got["statistic"] == pytest.approx(1.5) == pytest.approx(want.statistic)
  assert got["p"] == pytest.approx(want.pvalue)
  assert got["mean_difference"] == pytest.approx(np.mean(np.subtract(a, b)))


def _runs():
  sets = lambda base: {"m_eng-fra": base + 1.0, "m_eng-deu": base - 1.0, "n_eng-swa": base,
                       "mean": base, "chance": 0.45}
  return {
      "vmsst": {0: {"retrieval": sets(10.0), "score": 9.0},
                1: {"retrieval": sets(12.0), "score": 10.0}},
      "contrastive": {0: {"retrieval": sets(8.0), "score": 8.5},
                      1: {"retrieval": sets(11.0), "score": 9.0}},
      "bitranslation": {0: {"retrieval": sets(9.0), "score": None},
                        1: {"retrieval": sets(9.0), "score": None}},
  }


def test_summarize_tests_each_claimed_ordering_that_ran():
  summary = cs.summarize(_runs())
  vmsst = summary["objectives"]["vmsst"]
  assert vmsst["retrieval"]["mean"] == pytest.approx(11.0)
  assert vmsst["retrieval"]["values"] == [10.0, 12.0]
  assert vmsst["score"]["mean"] == pytest.approx(9.5)
  assert summary["objectives"]["bitranslation"]["score"] is None
  assert set(vmsst["sets"]) == {"m_eng-fra", "m_eng-deu", "n_eng-swa"}  # no mean, no chance
  claims = {(t["worse"], t["metric"], t["paired_over"]) for t in summary["tests"]}
  # No vmsst_no_kl run: that ordering is not tested; bitranslation has no Score.
  assert claims == {("contrastive", "retrieval", "seeds"),
                    ("contrastive", "retrieval", "language pairs"),
                    ("contrastive", "Score", "seeds"),
                    ("bitranslation", "retrieval", "seeds"),
                    ("bitranslation", "retrieval", "language pairs")}
  seeds = next(t for t in summary["tests"]
               if t["worse"] == "contrastive" and t["metric"] == "retrieval"
               and t["paired_over"] == "seeds")
  assert seeds["p"] == pytest.approx(stats.ttest_rel([10.0, 12.0], [8.0, 11.0]).pvalue)
  pairs = next(t for t in summary["tests"]
               if t["worse"] == "contrastive" and t["paired_over"] == "language pairs")
  # Seed-averaged per-set accuracies: vmsst 11 ± 1, contrastive 9.5 ± 1: every set +1.5.
  assert pairs["n"] == 3 and pairs["mean_difference"] == pytest.approx(1.5)
  assert pairs["p"] == pytest.approx(stats.wilcoxon([12.0, 10.0, 11.0], [10.5, 8.5, 9.5]).pvalue)


def test_table_markdown_shows_intervals_and_tests():
  text = cs.table_markdown(cs.summarize(_runs()))
  half = stats.t.ppf(0.975, 1) * np.std([10.0, 12.0], ddof=1) / math.sqrt(2)
  assert f"| vmsst | 2 | 11.00 ± {half:.2f} | 9.50 ± " in text
  assert "| bitranslation | 2 | 9.00 ± 0.00 | – |" in text
  assert "| vmsst > contrastive | Score | seeds | 2 |" in text
  assert "Wilcoxon signed-rank" in text


def test_components_table_averages_over_seeds_and_says_what_the_score_lacks():
  one = {"score": 8.0, "components": {"english_sts": 20.0, "xl_sts": None, "tatoeba": 2.0,
                                      "bucc": 0.0, "nq": None, "mkqa": None},
         "absent": ["xl_sts", "nq", "mkqa"], "stand_ins": {"bucc": "a built task"},
         "apart": {"question_retrieval": 10.0}, "notes": []}
  two = dict(one, score=10.0, components=dict(one["components"], english_sts=24.0))
  text = cs.components_table({"vmsst": [one, two]})
  assert text.splitlines()[0] == ("| model | Score | Eng. STS | XL STS | Tatoeba | BUCC | NQ | "
                                  "MKQA | Q. retrieval (stand-in, apart) |")
  assert "| vmsst | 9.0 | 22.0 | – | 2.0 | 0.0 | – | – | 10.0 |" in text
  assert "Absent from the Score (no data): XL STS, NQ, MKQA." in text
  assert "Stand-in for BUCC: a built task." in text


def test_runs_without_held_out_retrieval_keep_their_score_only():
  runs = _runs()
  runs["vmsst_no_kl"] = {0: {"retrieval": {}, "score": 7.0}, 1: {"retrieval": {}, "score": 8.0}}
  summary = cs.summarize(runs)
  assert summary["objectives"]["vmsst_no_kl"]["retrieval"] is None
  claims = {(t["metric"], t["paired_over"]) for t in summary["tests"] if t["worse"] == "vmsst_no_kl"}
  assert claims == {("Score", "seeds")}
  assert "| vmsst_no_kl | 2 | – | 7.50 ± " in cs.table_markdown(summary)


def test_p_values_are_printed_to_three_decimals_and_small_ones_bounded():
  assert cs._p(0.04321) == "0.043" and cs._p(0.0002) == "< 0.001"  # pylint: disable=protected-access
  assert cs._p(math.nan) == "–"  # pylint: disable=protected-access
