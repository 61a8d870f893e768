"""The paper's Score (§6.2), the five-family score and the Table 1 rendering, by hand."""

import pytest

from vmsst.evaluation import report
from vmsst.evaluation import paper_score as score
from vmsst.evaluation import suites

def _year(*pearsons, spearman_all=0.0):
  """One sts12-16 year: its datasets' mean Pearson, and a concatenated Spearman."""
  return {"mean": {"pearson": sum(pearsons) / len(pearsons)}, "all": {"spearman": spearman_all}}


RESULTS = {
    # Years' mean Pearson 70 and 80 (of 60/80 and 80): English STS = 75.
    "sts12-16": {"years": {"STS12": _year(60.0, 80.0, spearman_all=70.0),
                           "STS13": _year(80.0, spearman_all=80.0)}},
    "stsb": {"test": {"spearman": 90.0}},
    "stsb-multi-mt": {"averages": {"XL": {"spearman": 60.0, "pearson": 62.0}}},
    "sts17": {"tracks": {name: {"pearson": p} for name, p in (
        ("track1.ar-ar", 40.0), ("track2.ar-en", 50.0), ("track3.es-es", 60.0),
        ("track4a.es-en", 70.0), ("track6.tr-en", 30.0),
        ("track4b.es-en", 0.0), ("track5.en-en", 0.0))},  # not among §6.2's five
              "averages": {"XL": {"spearman": 50.0}}},
    "tatoeba": {"_mean": 40.0, "_languages": 112},
    "bucc": {"_mean": {"cosine_f1": 30.0, "margin_f1": 50.0}},
    "question_retrieval": {"_mean": 20.0},
}

# Table 1 (Wieting et al. 2023): Eng., XL, Tatoeba, BUCC (c.), BUCC (m.), NQ, MKQA, Score.
TABLE_1 = {
    "Contrastive 6L": (65.5, 66.8, 63.1, 66.2, 84.0, 34.1, 17.6, "53.7"),
    "BiTranslation 6L": (69.6, 63.9, 53.3, 62.1, 81.2, 37.4, 19.2, "52.5"),
    "VMSST Contrastive 6L": (65.7, 66.3, 63.2, 65.8, 84.3, 34.1, 17.7, "53.7"),
    "VMSST 6L": (70.1, 67.4, 58.7, 73.7, 85.9, 37.3, 20.1, "55.6"),
    "Contrastive 24L": (64.4, 64.6, 62.7, 64.3, 83.7, 32.8, 16.0, "52.4"),
    "BiTranslation 24L": (71.2, 68.1, 57.4, 70.8, 86.9, 38.2, 21.6, "55.9"),
    "VMSST Contrastive 24L": (68.2, 69.7, 64.8, 58.5, 84.1, 36.9, 18.9, "55.0"),
    "VMSST 24L": (71.1, 71.7, 61.4, 78.7, 89.0, 38.3, 22.3, "58.1"),
    "Contrastive pretrained": (73.3, 74.7, 85.1, 74.3, 93.7, 40.2, 27.6, "64.2"),
    "BiTranslation pretrained": (74.0, 78.0, 78.2, 85.9, 91.9, 40.9, 29.6, "64.9"),
    "VMSST Contrastive pretrained": (73.4, 75.4, 85.4, 74.6, 93.7, 40.3, 27.9, "64.4"),
    "VMSST pretrained": (74.6, 79.1, 81.1, 87.8, 92.5, 40.8, 29.9, "65.9"),
}


@pytest.mark.parametrize("row", TABLE_1, ids=list(TABLE_1))
def test_every_table_1_score_is_reproduced_from_its_components(row):
  eng, xl, tatoeba, cosine, margin, nq, mkqa, published = TABLE_1[row]
  components = {"english_sts": eng, "xl_sts": xl, "tatoeba": tatoeba,
                "bucc": score.bucc_component(cosine, margin), "nq": nq, "mkqa": mkqa}
  assert set(components) == set(score.COMPONENTS)
  assert f"{score.score_from(components):.1f}" == published


def test_components_and_score_by_hand():
  summary = score.paper_score(RESULTS)
  # English STS: years' mean Pearson (70 + 80) / 2 = 75, STSb left out; XL: Pearson of
  # §6.2's five SemEval-2017 sets (40 + 50 + 60 + 70 + 30) / 5 = 50; BUCC (30 + 50) / 2 = 40;
  # NQ and MKQA absent; Score = mean(75, 50, 40, 40) = 51.25; Q. retrieval apart.
  assert summary["components"] == {"english_sts": 75.0, "xl_sts": 50.0, "tatoeba": 40.0,
                                   "bucc": 40.0, "nq": None, "mkqa": None}
  assert summary["score"] == pytest.approx(51.25)
  assert summary["absent"] == ["nq", "mkqa"] and summary["stand_ins"] == {}
  assert summary["apart"] == {"question_retrieval": 20.0}
  assert any("stands in" in n for n in summary["notes"])


def test_the_five_family_score_keeps_the_earlier_definition():
  """Spearman STS (concatenated years + STSb), XL Spearman, question retrieval averaged in."""
  five = score.five_family_score(RESULTS)
  # English: mean(70, 80, 90) = 80; XL 50 (SemEval-2017 first); Score mean(80, 50, 40, 40, 20).
  assert five["components"] == {"english_sts": 80.0, "xl_sts": 50.0, "tatoeba": 40.0,
                                "bucc": 40.0, "question_retrieval": 20.0}
  assert five["score"] == pytest.approx(46.0)


def test_stand_ins_and_coverage_are_said():
  results = {k: v for k, v in RESULTS.items() if k not in ("sts17",)}
  results["tatoeba"] = {"_mean": 40.0, "_languages": 56}
  results["bucc"] = dict(RESULTS["bucc"], _built=True)
  results["sts12-16"] = {"years": {"STS13": dict(_year(80.0), note="2013 SMT is absent.")}}
  summary = score.paper_score(results)
  assert summary["components"]["xl_sts"] == 62.0  # STSb-multi-mt's XL Pearson
  assert set(summary["stand_ins"]) == {"xl_sts", "bucc"}
  assert "machine-translated" in summary["stand_ins"]["xl_sts"]
  notes = " ".join(summary["notes"])
  assert "STS12, STS14, STS15, STS16" in notes and "2013 SMT" in notes and "56 languages" in notes


def test_nothing_evaluated_has_no_score():
  assert score.paper_score({})["score"] is None
  assert score.five_family_score({})["score"] is None


def test_table1_rows_absent_columns_and_stand_ins():
  text = report.score_table({"vmsst": RESULTS, "usem3": {"tatoeba": {"_mean": 90.0}}})
  lines = text.splitlines()
  assert lines[0] == ("| model | Score | Eng. STS | XL STS | Tatoeba | BUCC | NQ | MKQA | "
                      "Q. retrieval (stand-in, apart) |")
  assert lines[2] == "| vmsst | **51.2** | 75.0 | 50.0 | 40.0 | 40.0 | – | – | 20.0 |"
  assert lines[3] == "| usem3 | **90.0** | – | – | 90.0 | – | – | – | – |"
  assert "Absent from the Score (no data): Eng. STS, XL STS, BUCC, NQ, MKQA." in text


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
