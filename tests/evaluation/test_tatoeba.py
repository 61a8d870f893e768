"""Tatoeba retrieval: hand cases (ties, duplicates), averages, reader errors, real files."""

import pytest

from vmsst.encoding import protocol
from vmsst.evaluation import tatoeba


def _write(folder, code, source, english):
  folder.mkdir(parents=True, exist_ok=True)
  (folder / f"tatoeba.{code}-eng.{code}").write_text("".join(s + "\n" for s in source))
  (folder / f"tatoeba.{code}-eng.eng").write_text("".join(s + "\n" for s in english))


# Hand-chosen 2-D vectors: x1 and x2 are identical (a duplicate meaning), and
# e2 = (0, -1) has cosine 0 with x0 and -0.8 with x1 and x2.
VECTORS = {
    "x0": (1.0, 0.0), "x1": (0.6, 0.8), "x2": (0.6, 0.8),
    "e0": (1.0, 0.1), "e1": (0.6, 0.8), "e2": (0.0, -1.0),
}


def _encoder():
  return protocol.UniqueSentences(protocol.PrecomputedEncoder(VECTORS), progress=False)


def test_accuracy_by_line_index_with_ties_and_duplicates(tmp_path):
  _write(tmp_path, "deu", ["x0", "x1", "x2"], ["e0", "e1", "e2"])
  results = tatoeba.evaluate(_encoder(), tmp_path)
  # xx2en: x0->e0 right, x1->e1 right, x2->e1 (line 1, not 2) wrong: 2/3.
  # en2xx: e0->x0 right, e1->{x1,x2} tie -> x1 right, e2->x0 wrong: 2/3.
  assert results["deu"]["xx2en"] == pytest.approx(200 / 3)
  assert results["deu"]["en2xx"] == pytest.approx(200 / 3)
  assert results["deu"]["n"] == 3
  assert results["_mean"] == pytest.approx(200 / 3)


def test_duplicate_sentence_earlier_in_the_file_counts_as_an_error(tmp_path):
  # English line 0 and line 1 are the same string: x1's nearest English is
  # line 0 (lowest index of the tie), scored strictly by index.
  _write(tmp_path, "fra", ["x1", "x1"], ["e1", "e1"])
  results = tatoeba.evaluate(_encoder(), tmp_path)
  assert results["fra"]["xx2en"] == 50.0 and results["fra"]["en2xx"] == 50.0


def test_seen_and_unseen_averages_compare_languages_canonically(tmp_path):
  _write(tmp_path, "deu", ["x0", "x1"], ["e0", "e1"])  # 100
  # lvs: xx2en x0->e1 (wrong), x2->e1 (right); en2xx e2->x0, e1->x2 (both right).
  _write(tmp_path, "lvs", ["x0", "x2"], ["e2", "e1"])
  results = tatoeba.evaluate(_encoder(), tmp_path, training_languages=["de", "lav"])
  # lvs is Standard Latvian: canonically `lav`, so seen.
  assert results["_seen"]["languages"] == ["deu", "lvs"]
  assert results["_unseen"] == {"mean": None, "languages": []}
  results = tatoeba.evaluate(_encoder(), tmp_path, training_languages=["deu"])
  assert results["_seen"]["mean"] == results["deu"]["avg"] == 100.0
  assert results["_unseen"]["mean"] == results["lvs"]["avg"] == 75.0
  assert "seen in training (1)" in tatoeba.table(results)


def test_reader_errors_name_the_file(tmp_path):
  _write(tmp_path, "deu", ["x0", "x1"], ["e0"])
  with pytest.raises(ValueError, match=r"tatoeba\.deu-eng\.deu has 2 lines"):
    tatoeba.evaluate(_encoder(), tmp_path)
  with pytest.raises(FileNotFoundError, match="present: deu"):
    tatoeba.evaluate(_encoder(), tmp_path, languages=["xyz"])
  with pytest.raises(FileNotFoundError, match="no tatoeba"):
    tatoeba.evaluate(_encoder(), tmp_path / "empty")


def test_real_files_are_line_aligned(data_dir):
  folder = data_dir / tatoeba.FOLDER
  codes = tatoeba.available_languages(folder)
  assert len(codes) == 56 and "deu" in codes
  source, english = tatoeba.read_pairs(folder, "amh")
  assert len(source) == len(english) == 168  # SOURCE.md counts
