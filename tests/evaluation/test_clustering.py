"""Clustering accuracy by hand, the MewsC-16 reader, and the STSb-derived builder (its command
as typed)."""

import gzip
import json

import numpy as np
import pytest

import vmsst_testing
from vmsst import build_clustering as command
from vmsst.build_data import clustering as build_clustering
from vmsst.evaluation import clustering
from vmsst.encoding import protocol


def _encoder(table):
  return protocol.UniqueSentences(protocol.PrecomputedEncoder(table), progress=False)


def _write(folder, lang, sentences, categories):
  folder.mkdir(parents=True, exist_ok=True)
  with gzip.open(folder / f"{lang}_sentences.txt.gz", "wt", encoding="utf-8") as f:
    f.write("".join(s + "\n" for s in sentences))
  (folder / f"{lang}_categories.txt").write_text("".join(c + "\n" for c in categories))


def test_hungarian_accuracy_hand_case():
  # Best map 1→a (2 right), 0→b (1), 2→c (1): 4 of 5; cluster 2's second b is lost.
  assert clustering.clustering_accuracy(list("aabbc"), [1, 1, 0, 2, 2]) == pytest.approx(80.0)


def test_accuracy_is_invariant_to_renaming_clusters_and_categories():
  rng = np.random.default_rng(0)
  categories, clusters = rng.integers(0, 4, 200), rng.integers(0, 4, 200)
  before = clustering.clustering_accuracy(categories, clusters)
  renamed = np.array(["w", "x", "y", "z"])[rng.permutation(4)][categories]
  assert clustering.clustering_accuracy(renamed, rng.permutation(4)[clusters]) == before


def test_accuracy_with_more_clusters_than_categories():
  # Three clusters, two categories: the best two clusters are matched, 3 of 4.
  assert clustering.clustering_accuracy(list("aabb"), [0, 0, 1, 2]) == pytest.approx(75.0)


def test_accuracy_rejects_mismatched_lengths():
  with pytest.raises(ValueError, match="as many cluster ids"):
    clustering.clustering_accuracy(list("ab"), [0])


def _separated(tmp_path):
  """Three tight directions, norms varying 1–50 (normalization makes the norm irrelevant)."""
  rng = np.random.default_rng(1)
  table, sentences, categories = {}, [], []
  for c, direction in enumerate(np.eye(3, 8)):
    for i in range(10):
      text = f"{'xyz'[c]} sentence {i}"
      table[text] = (direction + 0.01 * rng.normal(size=8)) * rng.uniform(1, 50)
      sentences.append(text)
      categories.append("xyz"[c])
  _write(tmp_path / "mewsc16", "xx", sentences, categories)
  return _encoder(table)


def test_well_separated_clusters_score_100(tmp_path):
  results = clustering.evaluate(_separated(tmp_path), tmp_path)  # A data root holding mewsc16/.
  assert results["xx"] == {"accuracy": 100.0, "runs": [100.0] * 3, "n": 30, "k": 3,
                           "skipped_lines": 0}
  assert results["_mean"] == 100.0
  assert "| xx | 100.0 | 100.0 / 100.0 / 100.0 | 30 | 3 | 0 |" in clustering.table(results)


def test_reader_skips_and_counts_empty_lines(tmp_path):
  _write(tmp_path, "xx", ["one", "", "three", "four"], ["a", "b", "", "a"])
  assert clustering.read_language(tmp_path, "xx") == (["one", "four"], ["a", "a"], 2)


def test_reader_line_count_mismatch_names_file_and_line(tmp_path):
  _write(tmp_path, "xx", ["one", "two", "three"], ["a", "b"])
  with pytest.raises(ValueError, match=r"xx_categories\.txt:3: file ends here.*line-aligned"):
    clustering.read_language(tmp_path, "xx")


def test_reader_errors(tmp_path):
  with pytest.raises(ValueError, match="no <lang>_sentences.txt.gz"):
    clustering.evaluate(_encoder({}), tmp_path)
  _write(tmp_path, "xx", ["one", "two"], ["a", "b"])
  (tmp_path / "xx_categories.txt").unlink()
  with pytest.raises(ValueError, match="xx_categories.txt: missing"):
    clustering.evaluate(_encoder({}), tmp_path)
  with pytest.raises(ValueError, match=r"no _sentences.txt.gz file for \['yy'\]"):
    clustering.evaluate(_encoder({}), tmp_path, languages=["yy"])


def test_one_category_is_an_error(tmp_path):
  _write(tmp_path, "xx", ["one", "two"], ["a", "a"])
  with pytest.raises(ValueError, match="at least 2 categories"):
    clustering.evaluate(_encoder({"one": [1, 0], "two": [0, 1]}), tmp_path)


def test_builder_on_real_data(data_dir, tmp_path, capfd):
  done = vmsst_testing.run_here(command, [f"--data_dir={data_dir}", f"--output={tmp_path}",
                                          "--languages=en,de", "--max_per_category=20",
                                          "--seed=1"], capfd)
  assert done.returncode == 0, done.stderr[-2000:]
  summary = json.loads(done.stdout)
  folder = tmp_path / "mewsc16"
  assert summary["n"] == 180 and len(summary["categories"]) == 9
  assert set(summary["categories"]) >= {"MSRvid", "images", "headlines", "answer-answer"}
  # Every STSb row and side, once per distinct English sentence; 2 are in two categories.
  assert summary["source"] == {"english_sentences": 17256, "kept_distinct": 15453,
                               "dropped_ambiguous_distinct": 2}
  en, en_categories, _ = clustering.read_language(folder, "en")
  de, de_categories, _ = clustering.read_language(folder, "de")
  assert len(en) == len(de) == 180 and en_categories == de_categories
  assert len(set(en)) == 180 and en != de
  first = {p.name: p.read_bytes() for p in folder.iterdir()}
  build_clustering.build_clustering_task(data_dir, tmp_path, languages=("en", "de"),
                                         max_per_category=20, seed=1)
  assert first == {p.name: p.read_bytes() for p in folder.iterdir()}  # Deterministic.
  assert "Not MewsC-16" in (folder / "SOURCE.md").read_text()
