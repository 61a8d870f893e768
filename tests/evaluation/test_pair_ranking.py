"""Triplet and XNLI error counts by hand (the paper's all-pairs count), the readers, real XNLI de."""

import numpy as np
import pytest

from vmsst.encoding import protocol
from vmsst.evaluation import pair_ranking


def _encoder(table):
  return protocol.UniqueSentences(protocol.PrecomputedEncoder(table), progress=False)


def test_triplet_errors_hand_case():
  anchor = [[1, 0], [1, 0], [1, 0], [1, 0]]
  positive = [[2, 0], [0, 1], [1, 1], [10, 1]]
  negative = [[0, 1], [1, 0], [1, 1], [0.5, -0.5]]
  # Row 0 right both ways; row 1 wrong both ways; row 2 a tie (p == n), an error both ways;
  # row 3: cos 0.995 > 0.707 is right, but |a − p| = 9.06 >= |a − n| = 0.71 is wrong.
  assert pair_ranking.triplet_errors(np.array(anchor), np.array(positive), np.array(negative)) == {
      "n": 4, "cosine_errors": 2, "cosine_error_rate": 50.0,
      "euclidean_errors": 3, "euclidean_error_rate": 75.0}


def test_all_pairs_errors_hand_case():
  # 0.9 loses to 0.95 (1); 0.3 loses to 0.4, 0.5, 0.95 (3); 0.5 ties 0.5 and loses to 0.95 (2).
  result = pair_ranking.all_pairs_errors(np.array([0.9, 0.3, 0.5]),
                                         np.array([0.4, 0.5, 0.1, 0.95]))
  assert result == {"errors": 6, "comparisons": 12, "error_rate": 50.0}
  assert pair_ranking.all_pairs_errors(np.array([0.5]), np.array([])) == {
      "errors": 0, "comparisons": 0, "error_rate": None}


def test_all_pairs_errors_equals_the_full_comparison_matrix():
  rng = np.random.default_rng(0)
  right = rng.normal(size=300).round(1)  # rounded: many ties
  wrong = rng.normal(size=200).round(1)
  brute = int(np.sum(right[:, None] <= wrong[None, :]))
  assert pair_ranking.all_pairs_errors(right, wrong)["errors"] == brute
  assert pair_ranking.all_pairs_errors(right, wrong)["comparisons"] == 60_000


def test_nli_errors_compare_across_premises_by_cosine_and_distance():
  premises = np.array([[1, 0], [1, 0], [1, 0], [0, 1], [0, 1]], np.float32)
  hypotheses = np.array([[1, 0], [0, 2], [3, 0], [1, 1], [0, -3]], np.float32)
  labels = ["entailment", "entailment", "neutral", "contradiction", "neutral"]
  result = pair_ranking.nli_errors(premises, hypotheses, labels)
  # Cosines: E (1, 0), N (1, −1), C (0.707). −distances: E (0, −2.236), N (−2, −4), C (−1).
  # E vs N, cos: 1 ties 1; 0 loses to 1 -> 2 of 4. Distance: −2.236 loses to −2 -> 1 of 4.
  # E vs C, cos: 0 loses to 0.707 -> 1 of 2. Distance: −2.236 loses to −1 -> 1 of 2.
  assert result["entailment_vs_neutral"] == {
      "cosine": {"errors": 2, "comparisons": 4, "error_rate": 50.0},
      "distance": {"errors": 1, "comparisons": 4, "error_rate": 25.0}}
  assert result["entailment_vs_contradiction"] == {
      "cosine": {"errors": 1, "comparisons": 2, "error_rate": 50.0},
      "distance": {"errors": 1, "comparisons": 2, "error_rate": 50.0}}
  assert result["labels"] == {"entailment": 2, "neutral": 2, "contradiction": 1}


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


def _counts(errors, comparisons):
  return {"errors": errors, "comparisons": comparisons,
          "error_rate": pytest.approx(100 * errors / comparisons)}


def test_evaluate_xnli_hand_case(tmp_path):
  results = pair_ranking.evaluate(_root(tmp_path), tmp_path)
  result = results["xnli"]["xx-xx"]
  # Pairs (cos, −distance): E1 (0.707, −1); N1 (0, −1.414) twice, N2 (0, −1.414);
  # C1 (0.707, −2.236), C2 (1, 0). Cos: E beats every N; ties C1, loses to C2 -> 2 of 2.
  # Distance: E beats every N, beats C1, loses to C2 -> 1 of 2.
  assert result == {
      "premise_language": "xx", "hypothesis_language": "xx", "rows": 6,
      "labels": {"entailment": 1, "neutral": 3, "contradiction": 2},
      "entailment_vs_neutral": {"cosine": _counts(0, 3), "distance": _counts(0, 3)},
      "entailment_vs_contradiction": {"cosine": _counts(2, 2), "distance": _counts(1, 2)},
      "skipped": {"blank_lines": 1}}
  assert results["triplets"] == {}
  assert results["_mean"] == {
      "entailment_vs_neutral_cosine": 0.0, "entailment_vs_neutral_distance": 0.0,
      "entailment_vs_contradiction_cosine": 100.0, "entailment_vs_contradiction_distance": 50.0,
      "triplets_cosine": None, "triplets_euclidean": None}
  assert "| xx-xx | 0.0 | 0.0 | 100.0 | 50.0 | 3 |" in pair_ranking.table(results)


def test_documents_encoder_embeds_hypotheses_and_the_query_encoder_premises(tmp_path):
  queries = _root(tmp_path)
  # The document tower puts E1 on P1 and would move P1 too, were it used for premises.
  documents = _encoder({**{f"xx:{k}": v for k, v in VECTORS.items()},
                        "xx:E1": [1, 0], "xx:P1": [0, 1]})
  result = pair_ranking.evaluate(queries, tmp_path, documents=documents)["xnli"]["xx-xx"]
  # Premise P1 = [1, 0] (query), E1 = [1, 0] (document): cos 1, −distance 0. Against
  # C1 (0.707, −2.236) and C2 (1, 0): one tie each way -> 1 of 2 by both measures.
  assert result["entailment_vs_contradiction"] == {"cosine": _counts(1, 2),
                                                   "distance": _counts(1, 2)}
  symmetric = pair_ranking.evaluate(documents, tmp_path)["xnli"]["xx-xx"]
  assert symmetric["entailment_vs_contradiction"]["cosine"] != _counts(1, 2)


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


def test_reads_real_xnli_de_and_counts_the_papers_comparisons(data_dir):
  paths = pair_ranking.find_nli_files(data_dir)
  assert "de" in paths
  rows, blank = pair_ranking.read_nli(paths["de"])
  assert len(rows) == 5010 and blank == 0
  vectors = np.random.default_rng(0).normal(size=(2, len(rows), 4))
  result = pair_ranking.nli_errors(vectors[0], vectors[1], [r.label for r in rows])
  assert result["labels"] == {"entailment": 1670, "neutral": 1670, "contradiction": 1670}
  for what in pair_ranking.COMPARISONS:  # Table 1: 1670 x 1670 = 2,788,900 comparisons.
    assert result[what]["cosine"]["comparisons"] == 2_788_900
    assert 40 < result[what]["cosine"]["error_rate"] < 60  # random vectors: about half
