"""The paper's Score and the Table 1 rendering, on hand-written results."""

import pytest

from vmsst.evaluation import report
from vmsst.evaluation import paper_score as score
from vmsst.evaluation import suites

RESULTS = {
    "sts12-16": {"years": {"STS12": {"all": {"spearman": 70.0}},
                           "STS13": {"all": {"spearman": 80.0}}}},
    "stsb": {"test": {"spearman": 90.0}},
    "stsb-multi-mt": {"averages": {"XL": {"spearman": 60.0}}},
    "sts17": {"averages": {"XL": {"spearman": 50.0}}},
    "tatoeba": {"_mean": 40.0},
    "bucc": {"_mean": {"cosine_f1": 30.0, "margin_f1": 50.0}},
}


def test_components_and_score_by_hand():
  summary = score.paper_score(RESULTS)
  # English STS: mean(70, 80, 90) = 80; XL from SemEval-2017 when present (50);
  # BUCC: (30 + 50) / 2 = 40; Score = mean(80, 50, 40, 40) = 52.5.
  assert summary["components"] == {"english_sts": 80.0, "xl_sts": 50.0, "tatoeba": 40.0,
                                   "bucc": 40.0, "question_retrieval": None}
  assert summary["score"] == pytest.approx(52.5)
  assert summary["absent"] == ["question_retrieval"] and summary["notes"] == []


def test_xl_falls_back_to_stsb_multi_mt_with_a_note():
  results = {k: v for k, v in RESULTS.items() if k != "sts17"}
  summary = score.paper_score(results)
  assert summary["components"]["xl_sts"] == 60.0
  assert "machine-translated" in summary["notes"][0]


def test_nothing_evaluated_has_no_score():
  assert score.paper_score({})["score"] is None


def test_table1_rows_and_absent_columns():
  text = report.score_table({"vmsst": RESULTS, "usem3": {"tatoeba": {"_mean": 90.0}}})
  lines = text.splitlines()
  assert lines[0].startswith("| model | Score | Eng. STS | XL STS | Tatoeba | BUCC |")
  assert lines[2] == "| vmsst | **52.5** | 80.0 | 50.0 | 40.0 | 40.0 | – |"
  assert lines[3] == "| usem3 | **90.0** | – | – | 90.0 | – | – |"
  assert "Absent from the Score" in text and "Q. retrieval" in text


def test_suite_names_and_lookup(tmp_path):
  assert suites.parse_suites("all") == (list(suites.SUITES), True)
  assert suites.parse_suites("tatoeba, stsb") == (["tatoeba", "stsb"], False)
  names, group = suites.parse_suites("score")
  assert group and "tatoeba" in names and "mewsc16" not in names
  assert set(suites.GROUPS["score"]) <= set(suites.SUITES)
  (tmp_path / "b" / "stsb").mkdir(parents=True)
  assert suites.locate("stsb", [tmp_path / "a", tmp_path / "b"]) == tmp_path / "b" / "stsb"
  assert suites.locate("tatoeba", [tmp_path / "a", tmp_path / "b"]) is None
  assert "a/tatoeba/v1" in suites.missing_message("tatoeba", [tmp_path / "a"])
