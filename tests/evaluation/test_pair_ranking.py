"""Triplet and XNLI-style error counts by hand, the readers, and the real XNLI de test file."""

import numpy as np
import pytest

from vmsst.evaluation import encoders
from vmsst.evaluation import pair_ranking


def _encoder(table):
  return encoders.UniqueSentences(encoders.PrecomputedEncoder(table), progress=False)


def test_triplet_errors_hand_case():
  anchor = [[1, 0], [1, 0], [1, 0], [1, 0]]
  positive = [[2, 0], [0, 1], [1, 1], [10, 1]]
  negative = [[0, 1], [1, 0], [1, 1], [0.5, -0.5]]
  # Row 0 right both ways; row 1 wrong both ways; row 2 a tie (p == n), an error both ways;
  # row 3: cos 0.995 > 0.707 is right, but |a − p| = 9.06 >= |a − n| = 0.71 is wrong.
  assert pair_ranking.triplet_errors(np.array(anchor), np.array(positive), np.array(negative)) == {
      "n": 4, "cosine_errors": 2, "cosine_error_rate": 50.0,
      "euclidean_errors": 3, "euclidean_error_rate": 75.0}


def test_premise_groups_keep_first_occurrence_order():
  assert pair_ranking.premise_groups(["b", "a", "b", "c", "a"]) == [[0, 2], [1, 4], [3]]


def test_nli_comparisons_hand_case():
  labels = ["entailment", "neutral", "contradiction",                  # A
            "entailment", "neutral", "neutral", "contradiction",      # B
            "neutral", "contradiction",                               # C: no entailment
            "entailment"]                                             # D: entailment only
  cosines = np.array([0.9, 0.5, 0.9, 0.3, 0.4, 0.1, 0.2, 0.8, 0.1, 0.7])
  groups = [[0, 1, 2], [3, 4, 5, 6], [7, 8], [9]]
  result = pair_ranking.nli_comparisons(cosines, labels, groups)
  # e–n: A 0.9 > 0.5 right; B 0.3 <= 0.4 wrong, 0.3 > 0.1 right. e–c: A tie wrong, B right.
  assert result["entailment_vs_neutral"] == {"errors": 1, "comparisons": 3,
                                             "error_rate": pytest.approx(100 / 3)}
  assert result["entailment_vs_contradiction"] == {"errors": 1, "comparisons": 2,
                                                   "error_rate": 50.0}
  assert result["triplet_rows"] == [(0, 2), (3, 6)]
  assert result["skipped"] == {"premises_without_entailment": 1, "premises_without_neutral": 1,
                               "premises_without_contradiction": 1}


def test_no_comparisons_give_none_rates():
  result = pair_ranking.nli_comparisons(np.array([0.5]), ["neutral"], [[0]])
  assert result["entailment_vs_neutral"] == {"errors": 0, "comparisons": 0, "error_rate": None}


ROWS = [("P1", "E1", "entailment"), ("P1", "N1", "neutral"), ("P1", "C1", "contradiction"),
        ("P1", "N1", "neutral"),  # Duplicate: counted once.
        None,  # A blank line.
        ("P2", "N2", "neutral"), ("P2", "C2", "contradiction")]  # P2 has no entailment.
VECTORS = {"P1": [1, 0], "E1": [1, 1], "N1": [0, 1], "C1": [2, 2],
           "P2": [0, 1], "N2": [1, 0], "C2": [0, 1]}


def _root(tmp_path, languages=("xx",)):
  """xnli_<lang>/test.tsv of ROWS with texts "<lang>:P1" ...; the same vectors in each."""
  table = {}
  for lang in languages:
    (tmp_path / f"xnli_{lang}").mkdir()
    lines = [f"{lang}:{row[0]}\t{lang}:{row[1]}\t{row[2]}" if row else "" for row in ROWS]
    (tmp_path / f"xnli_{lang}" / "test.tsv").write_text("\n".join(lines) + "\n")
    table.update({f"{lang}:{text}": vector for text, vector in VECTORS.items()})
  return _encoder(table)


def test_evaluate_xnli_hand_case(tmp_path):
  results = pair_ranking.evaluate(_root(tmp_path), tmp_path)
  result = results["xnli"]["xx-xx"]
  # P1: cos(E1) = cos(C1) = 0.707 (a tie, an error), cos(N1) = 0. By Euclidean distance
  # E1 is nearer (1 < 2.24), so the (P1, E1, C1) triplet is right that way.
  assert result == {
      "premise_language": "xx", "hypothesis_language": "xx", "rows": 6, "premises": 2,
      "entailment_vs_neutral": {"errors": 0, "comparisons": 1, "error_rate": 0.0},
      "entailment_vs_contradiction": {"errors": 1, "comparisons": 1, "error_rate": 100.0},
      "triplets": {"n": 1, "cosine_errors": 1, "cosine_error_rate": 100.0,
                   "euclidean_errors": 0, "euclidean_error_rate": 0.0},
      "skipped": {"premises_without_entailment": 1, "premises_without_neutral": 0,
                  "premises_without_contradiction": 0, "duplicate_rows": 1, "blank_lines": 1}}
  assert results["triplets"] == {}
  assert results["_mean"] == {"entailment_vs_neutral": 0.0, "entailment_vs_contradiction": 100.0,
                              "triplets_cosine": None, "triplets_euclidean": None}
  assert "| xx-xx | 0.0 | 100.0 | 100.0 | 0.0 | 2 | 1 |" in pair_ranking.table(results)


def test_cross_lingual_pairs_of_aligned_languages(tmp_path):
  encoder = _root(tmp_path, ("xx", "yy"))
  results = pair_ranking.evaluate(encoder, tmp_path / "xnli_xx")  # One language folder: its root.
  assert list(results["xnli"]) == ["xx-xx", "yy-yy", "xx-yy", "yy-xx"]
  assert results["xnli"]["xx-yy"]["hypothesis_language"] == "yy"
  assert pair_ranking.evaluate(encoder, tmp_path, cross_lingual=False)["xnli"].keys() == {
      "xx-xx", "yy-yy"}


def test_misaligned_languages_are_an_error(tmp_path):
  encoder = _root(tmp_path, ("xx", "yy"))
  path = tmp_path / "xnli_yy" / "test.tsv"
  path.write_text(path.read_text().replace("\tneutral\n", "\tcontradiction\n", 1))
  with pytest.raises(ValueError, match=r"xnli_yy/test.tsv:2: row 2 is contradiction.*aligned"):
    pair_ranking.evaluate(encoder, tmp_path)


def test_triplet_files(tmp_path):
  (tmp_path / "triplets").mkdir()
  (tmp_path / "triplets" / "hand.tsv").write_text("P1\tE1\tN1\n\nP1\tN1\tE1\nP1\tE1\tC1\n")
  results = pair_ranking.evaluate(_encoder(VECTORS), tmp_path)
  assert results["xnli"] == {}
  assert results["triplets"]["hand.tsv"] == {
      "n": 3, "cosine_errors": 2, "cosine_error_rate": pytest.approx(200 / 3),
      "euclidean_errors": 1, "euclidean_error_rate": pytest.approx(100 / 3),
      "skipped": {"blank_lines": 1}}
  assert results["_mean"]["triplets_cosine"] == pytest.approx(200 / 3)
  assert "| hand.tsv | 3 | 66.7 | 33.3 |" in pair_ranking.table(results)


@pytest.mark.parametrize("line, message", [
    ("P1\tE1\tentails", r"test.tsv:2: label 'entails' is not one of"),
    ("P1\tE1", r"test.tsv:2: expected 3 non-empty TAB-separated fields"),
    ("P1\t\tneutral", r"test.tsv:2: expected 3 non-empty"),
])
def test_nli_reader_errors_name_the_line(tmp_path, line, message):
  path = tmp_path / "test.tsv"
  path.write_text(f"P1\tN1\tneutral\n{line}\n")
  with pytest.raises(ValueError, match=message):
    pair_ranking.read_nli(path)


def test_folder_errors(tmp_path):
  with pytest.raises(ValueError, match="found neither triplets/"):
    pair_ranking.evaluate(_encoder({}), tmp_path)
  (tmp_path / "triplets").mkdir()
  (tmp_path / "triplets" / "empty.tsv").write_text("\n")
  with pytest.raises(ValueError, match="empty.tsv: no triplets"):
    pair_ranking.evaluate(_encoder({}), tmp_path)


def test_reads_real_xnli_de(data_dir):
  paths = pair_ranking.find_nli_files(data_dir)
  assert "de" in paths
  rows, blank = pair_ranking.read_nli(paths["de"])
  assert len(rows) == 5010 and blank == 0
  groups = pair_ranking.premise_groups([r.premise for r in rows])
  assert len(groups) == 1670
  assert all(sorted(rows[i].label for i in g) == sorted(pair_ranking.LABELS) for g in groups)
