"""Preservation report: improvement I, z-tests by hand, per-pair rows, the asymmetric towers,
and the command's checks of what is typed before a model loads."""

import gzip
import math

import numpy as np
import pytest

import vmsst_testing
from vmsst import preservation as command
from vmsst.encoding import protocol
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


def _xnli(neutral_errors, contradiction_errors):
  counts = lambda e: {"errors": e, "comparisons": 100, "error_rate": float(e)}
  return {"xnli": {"de-de": {
      "entailment_vs_neutral": {"cosine": counts(neutral_errors), "distance": counts(0)},
      "entailment_vs_contradiction": {"cosine": counts(contradiction_errors),
                                      "distance": counts(0)}}}}


def test_rows_and_counts_from_suite_results():
  rows = pv.xnli_rows(_xnli(30, 10), _xnli(15, 11))
  assert [(r["check"], r["verdict"]) for r in rows] == [
      ("xnli entailment_vs_neutral cosine", "better"),
      ("xnli entailment_vs_neutral distance", "same"),
      ("xnli entailment_vs_contradiction cosine", "same"),
      ("xnli entailment_vs_contradiction distance", "same")]
  sts_result = lambda r: {"pairs": {"en-de": {"spearman": r, "n": 1379}}}
  assert pv.sts_rows(sts_result(80.0), sts_result(70.0))[0]["verdict"] == "worse"
  tatoeba_result = lambda xx, en: {"deu": {"xx2en": xx, "en2xx": en, "n": 1000}, "_mean": 0}
  t_rows = pv.tatoeba_rows(tatoeba_result(50.0, 50.0), tatoeba_result(60.0, 51.0))
  assert [(r["pair"], r["verdict"]) for r in t_rows] == [("deu-eng", "better"),
                                                         ("eng-deu", "same")]
  counts = pv.count_verdicts(rows + t_rows)
  assert counts["all"] == {"better": 2, "worse": 0, "same": 4}
  assert counts["tatoeba xx2en"] == {"better": 1, "worse": 0, "same": 0}


def _wrap(table, name):
  return protocol.UniqueSentences(protocol.PrecomputedEncoder(table, name), progress=False)


def test_triplet_evaluation_uses_the_document_tower_for_documents():
  # 2-d vectors by hand. Original: a1 is nearer n1 (an error), a2 nearer p2.
  # Tuned moves a1 onto p1 and a2 onto n2: one error fixed, one made -> I = 0.
  table = {"a1": [1.0, 0.0], "p1": [0.0, 1.0], "n1": [1.0, 0.1],
           "a2": [0.0, 1.0], "p2": [0.1, 1.0], "n2": [1.0, 0.0]}
  original = _wrap(table, "original")
  before = pv.Towers(original, original)
  queries = lambda **anchors: _wrap({k: table[k] for k in ("a1", "a2")} | anchors, "tuned")
  documents = _wrap({k: v for k, v in table.items() if k[0] in "pn"}, "documents")
  triplets = [("a1", "p1", "n1"), ("a2", "p2", "n2")]
  result = pv.triplet_evaluation(before, pv.Towers(queries(a1=[0.0, 1.0], a2=[1.0, 0.0]),
                                                   documents), triplets)
  assert result["before"]["cosine_errors"] == 1 and result["after"]["cosine_errors"] == 1
  assert result["improvement_cosine"] == 0.0
  # Before: cos(a1, p1) = 0, cos(a1, n1) = 0.995; cos(a2, p2) = 0.995, cos(a2, n2) = 0.
  hinge = 0.1 + 1 / math.sqrt(1.01)
  assert result["loss_before"] == pytest.approx(hinge / 2, rel=1e-5)
  fixed = pv.triplet_evaluation(before, pv.Towers(queries(a1=[0.0, 1.0]), documents), triplets)
  assert fixed["after"]["cosine_errors"] == 0 and fixed["improvement_cosine"] == 1.0
  # A document tower that moved p1 onto n1 turns the fix back into an error.
  moved = _wrap({**{k: v for k, v in table.items() if k[0] in "pn"}, "p1": [1.0, 0.1]}, "moved")
  assert pv.triplet_evaluation(before, pv.Towers(queries(a1=[0.0, 1.0]), moved),
                               triplets)["after"]["cosine_errors"] == 1


def _data_root(tmp_path):
  """xnli_de (3 rows), stsb-multi-mt en test (5 rows), tatoeba/v1 deu (2 lines)."""
  (tmp_path / "xnli_de").mkdir()
  (tmp_path / "xnli_de" / "test.tsv").write_text(
      "P1\tE1\tentailment\nP1\tN1\tneutral\nP1\tC1\tcontradiction\n")
  (tmp_path / "stsb-multi-mt").mkdir()
  rows = [f"q{i},r{i},{i}.0" for i in range(5)]
  with gzip.open(tmp_path / "stsb-multi-mt" / "stsb-en-test.csv.gz", "wt") as f:
    f.write("\n".join(rows) + "\n")
  tatoeba_dir = tmp_path / "tatoeba" / "v1"
  tatoeba_dir.mkdir(parents=True)
  (tatoeba_dir / "tatoeba.deu-eng.deu").write_text("d1\nd2\n")
  (tatoeba_dir / "tatoeba.deu-eng.eng").write_text("e1\ne2\n")
  return tmp_path


def test_evaluate_embeds_queries_by_the_tuned_tower_and_documents_by_the_frozen_one(tmp_path):
  angle = lambda t: [math.cos(t), math.sin(t)]
  # Original: r_i turns towards q = [1, 0] as the gold i rises (Spearman 100); the XNLI
  # entailed hypothesis is nearest; Tatoeba d_i = e_i.
  documents_table = {**{f"r{i}": angle(1.5 - 0.3 * i) for i in range(5)},
                     "E1": [1.0, 0.0], "N1": [0.0, 1.0], "C1": [-1.0, 0.0],
                     "d1": [1.0, 0.0], "d2": [0.0, 1.0], "e1": [1.0, 0.0], "e2": [0.0, 1.0]}
  queries_table = {**{f"q{i}": [1.0, 0.0] for i in range(5)}, "P1": [1.0, 0.0],
                   "d1": [1.0, 0.0], "d2": [0.0, 1.0], "e1": [1.0, 0.0], "e2": [0.0, 1.0]}
  original = protocol.PrecomputedEncoder({**documents_table, **queries_table}, "original")
  # Tuned query tower: P1 turned away from E1, the deu queries swapped. It has no vector
  # for a document (r_i, hypotheses) and the document tower none for a query (q_i, P1):
  # embedding a side with the wrong tower is a KeyError.
  tuned = protocol.PrecomputedEncoder({**queries_table, "P1": [0.0, 1.0],
                                       "d1": [0.0, 1.0], "d2": [1.0, 0.0]}, "tuned")
  documents = protocol.PrecomputedEncoder(
      {**{k: v for k, v in documents_table.items() if k[0] in "rENC"}, "E1": [0.6, 0.8],
       "d1": [1.0, 0.0], "d2": [0.0, 1.0], "e1": [1.0, 0.0], "e2": [0.0, 1.0]}, "documents")
  results = pv.evaluate(original, tuned, _data_root(tmp_path), documents=documents,
                        triplets=[], sts_languages=["en"], progress=False)
  by_check = {(r["check"], r["pair"]): r for r in results["rows"]}
  # XNLI after: cos(P1, E1) = 0.8 vs cos(P1, N1) = 1 -> 1 error of 1 (before: 0 of 1).
  assert by_check[("xnli entailment_vs_neutral cosine", "de-de")]["after"] == 100.0
  assert by_check[("xnli entailment_vs_neutral cosine", "de-de")]["before"] == 0.0
  # Tatoeba after: the swapped deu queries miss (xx2en 0), the English queries still
  # find the document tower's deu sentences (en2xx 100); before both 100.
  assert (by_check[("tatoeba xx2en", "deu-eng")]["after"],
          by_check[("tatoeba en2xx", "eng-deu")]["after"]) == (0.0, 100.0)
  # STS: the query tower's q_i against the document tower's r_i, Spearman 100 both times.
  sts_row = by_check[("sts spearman", "en-en")]
  assert sts_row["before"] == pytest.approx(100.0) and sts_row["after"] == pytest.approx(100.0)
  with pytest.raises(KeyError):  # both sides by the tuned tower: it has no document vectors
    pv.evaluate(original, tuned, tmp_path, documents=tuned, triplets=[], sts_languages=["en"],
                progress=False)


def test_report_lists_counts_and_rows():
  results = {"triplets": None, "skipped": ["tatoeba/v1"],
             "rows": [pv._row("sts spearman", "en-de", 80.0, 70.0, -5.9, 1379, True)]}
  results["counts"] = pv.count_verdicts(results["rows"])
  text = pv.report(results)
  assert "| sts spearman | en-de | 80.00 | 70.00 | -5.90 | worse |" in text
  assert "| all | 0 | 1 | 0 |" in text and "tatoeba/v1" in text
  assert np.isclose(results["rows"][0]["p_value"], 2 * 1.8e-9, rtol=0.5)


@pytest.mark.parametrize("typed, named", [
    (["--before={tmp}/nowhere", "--after={model}"], "--before={tmp}/nowhere"),
    (["--before={model}", "--after={tmp}/nowhere"], "--after={tmp}/nowhere"),
    (["--before={model}", "--after={model}", "--triplets={tmp}/none.tsv"],
     "--triplets={tmp}/none.tsv"),
])
def test_the_command_names_a_model_or_triplets_file_that_is_not_there(tmp_path, capfd, typed,
                                                                     named):
  """Found before either model loads: a directory with model.json passes the check (it would
  fail only at the restore), so the error comes from the typed flag."""
  (tmp_path / "model").mkdir()
  (tmp_path / "model" / "model.json").write_text("{}")
  fill = lambda text: text.format(tmp=tmp_path, model=tmp_path / "model")
  done = vmsst_testing.run_here(command, [*map(fill, typed), f"--output={tmp_path / 'out'}"],
                                capfd)
  vmsst_testing.assert_user_error(done, fill(named))
  assert not (tmp_path / "out").exists()
