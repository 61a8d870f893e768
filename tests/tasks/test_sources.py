"""Tests of tasks/sources/pair_readers.py on the real corpora and on tiny hand-made OPUS files."""

import collections
import gzip

import pytest

from vmsst_tasks.sources import opus_readers
from vmsst_tasks.sources import pair_readers
from vmsst.base import text_files

# The 12 of 123 NTREX documents with the smallest salted hash (hand-copied once;
# a change means the validation split moved).
VALIDATION_DOCUMENTS = {
    "bbc.381736", "bbc.381760", "independent.226317", "newsweek.51331", "newsweek.51339",
    "nytimes.184837", "reuters.218932", "telegraph.405401", "telegraph.405408",
    "telegraph.405413", "upi.176251", "upi.176266"}
PAIRS_PER_NTREX_LINE = 124  # (eng, spa) + 123 languages (127 refs - 3 rewrites - spa).


@pytest.fixture(scope="module")
def tatoeba(data_dir):
  return pair_readers.tatoeba_test_sentences(data_dir)


@pytest.fixture(scope="module")
def ntrex_train(data_dir, tatoeba):
  counts = pair_readers.PairCounts()
  return list(pair_readers.ntrex_pairs(data_dir, "train", counts=counts, exclude=tatoeba)), counts


def write(path, text: str) -> None:
  if path.suffix == ".gz":
    with gzip.open(path, "wt", encoding="utf-8") as f:
      f.write(text)
  else:
    path.write_text(text, encoding="utf-8")


# ----------------------------------------------------------------------- NTREX


def test_ntrex_files_have_1997_lines_each(data_dir):
  paths = sorted((data_dir / "ntrex128").glob("newstest2019-*.txt.gz"))
  assert len(paths) == 129
  assert {len(text_files.read_lines(p)) for p in paths} == {1997}
  assert len(pair_readers.ntrex_documents(data_dir)) == 1997


def test_ntrex_files_exclude_rewrites_and_second_spanish_reference(data_dir):
  files = pair_readers.ntrex_files(data_dir)
  assert len(files) == 125  # eng + 127 references - eng-GB/IN/US - ref-2.spa
  assert {"eng", "spa", "spa-MX", "por-BR", "zho-TW", "srp-Cyrl"} <= set(files)
  assert not {"eng-GB", "eng-IN", "eng-US"} & set(files)
  assert files["spa"].name == "newstest2019-ref.spa.txt.gz"
  assert files["eng"].name == "newstest2019-src.eng.txt.gz"


def test_ntrex_validation_documents_are_fixed(data_dir):
  assert pair_readers.ntrex_validation_documents(data_dir) == VALIDATION_DOCUMENTS
  documents = pair_readers.ntrex_documents(data_dir)
  assert len(set(documents)) == 123
  assert sum(d in VALIDATION_DOCUMENTS for d in documents) == 189


def test_ntrex_train_counts(ntrex_train):
  pairs, counts = ntrex_train
  assert counts.read == 1808 * PAIRS_PER_NTREX_LINE == 224192
  # One real overlap: the Filipino line 1843 "Sasamahan kita." is a Tatoeba tgl sentence.
  assert counts.skipped == {"tatoeba_overlap": 1}
  assert counts.kept == len(pairs) == 224191 == counts.read - 1
  assert "read=224192 kept=224191 skipped=1 (tatoeba_overlap=1)" in counts.report("x")
  assert not any(p.lang_b == "fil" and p.text_b == "Sasamahan kita." for p in pairs)


def test_ntrex_split_has_no_shared_document(data_dir, ntrex_train):
  counts = pair_readers.PairCounts()
  validation = list(pair_readers.ntrex_pairs(data_dir, "validation", counts=counts))
  assert counts.read == counts.kept == 189 * PAIRS_PER_NTREX_LINE == 23436
  english_by_doc = collections.defaultdict(set)
  for doc, line in zip(pair_readers.ntrex_documents(data_dir),
                       text_files.read_lines(pair_readers.ntrex_files(data_dir)["eng"])):
    english_by_doc[doc in VALIDATION_DOCUMENTS].add(line)
  val_english = {p.text_a for p in validation if p.lang_a == "eng"}
  train_english = {p.text_a for p in ntrex_train[0] if p.lang_a == "eng"}
  assert val_english == english_by_doc[True] and train_english == english_by_doc[False]
  assert not val_english & train_english


def test_ntrex_pivots_are_eng_or_spa_and_stateless(data_dir, ntrex_train):
  pairs = ntrex_train[0]
  assert {p.lang_a for p in pairs} == {"eng", "spa"}
  targets = {p.lang_b for p in pairs}
  assert len(targets) == 124 and "spa" in targets  # spa only as (eng, spa).
  assert not targets & {"eng", "eng-GB", "eng-IN", "eng-US"}
  assert {p.lang_a for p in pairs if p.lang_b == "spa-MX"} == {"eng"}
  xx = [p for p in pairs if p.lang_b != "spa"]
  share_eng = sum(p.lang_a == "eng" for p in xx) / len(xx)
  assert 0.48 < share_eng < 0.52
  assert all("\r" not in p.text_a + p.text_b and p.text_a == p.text_a.strip() for p in pairs[:5000])
  # Stateless: same (line, language, seed) -> same pivot; another seed moves about half.
  assert pair_readers.ntrex_pivot(7, "deu", 0) == pair_readers.ntrex_pivot(7, "deu", 0)
  moved = sum(pair_readers.ntrex_pivot(i, "deu", 0) != pair_readers.ntrex_pivot(i, "deu", 1) for i in range(1000))
  assert 400 < moved < 600


def test_ntrex_pair_is_aligned(data_dir, ntrex_train):
  first_german = next(p for p in ntrex_train[0] if p.lang_b == "deu")
  english = text_files.read_lines(pair_readers.ntrex_files(data_dir)["eng"])
  spanish = text_files.read_lines(pair_readers.ntrex_files(data_dir)["spa"])
  german = text_files.read_lines(pair_readers.ntrex_files(data_dir)["deu"])
  line = german.index(first_german.text_b)
  assert first_german.text_a == {"eng": english, "spa": spanish}[first_german.lang_a][line]
  assert english[0] == "Welsh AMs worried about 'looking like muppets'"  # CRLF stripped.


def test_ntrex_unknown_split(data_dir):
  with pytest.raises(ValueError, match="'test'"):
    list(pair_readers.ntrex_pairs(data_dir, "test"))


# -------------------------------------------------------------------- Multi30k


def test_multi30k_pairs(data_dir):
  counts = pair_readers.PairCounts()
  pairs = list(pair_readers.multi30k_pairs(data_dir, "train", counts=counts))
  assert counts.read == counts.kept == 29000 * 6 == len(pairs)
  assert pairs[0] == ("Two young, White males are outside near many bushes.",
                      "Zwei junge weiße Männer sind im Freien in der Nähe vieler Büsche.", "eng", "deu")
  assert [(p.lang_a, p.lang_b) for p in pairs[:6]] == [
      ("eng", "deu"), ("eng", "fra"), ("eng", "ces"), ("deu", "fra"), ("deu", "ces"), ("fra", "ces")]
  assert all(t == t.strip() for p in pairs for t in (p.text_a, p.text_b))  # de/fr trailing spaces.
  validation = list(pair_readers.multi30k_pairs(data_dir, "validation"))
  assert len(validation) == 1014 * 6
  assert validation[2].text_b == "Skupina mužů nakládá bavlnu na náklaďák."


# --------------------------------------------------------------------- Tatoeba


def test_tatoeba_sentences(data_dir, tatoeba):
  assert len(tatoeba) == 76543  # `cat v1/tatoeba.* | strip | sort -u | wc -l`, empty lines out.
  assert "Maria sagte, sie wisse nicht, wo Tom sei." in tatoeba  # tatoeba.deu-eng.deu line 1
  assert "Mary said she didn't know where Tom was." in tatoeba  # its .eng side


def test_tatoeba_filter_drops_either_side(tmp_path, data_dir, tatoeba):
  german = (data_dir / "tatoeba/v1/tatoeba.deu-eng.deu").read_text().splitlines()[0]
  english = (data_dir / "tatoeba/v1/tatoeba.deu-eng.eng").read_text().splitlines()[0]
  write(tmp_path / "toy.de-en.de", f"Guten Tag\n  {german} \nNeu\n")
  write(tmp_path / "toy.de-en.en", f"Good day\nsomething\n{english}\n")
  counts = pair_readers.PairCounts()
  pairs = list(opus_readers.opus_pairs(opus_readers.discover_opus(tmp_path), counts=counts, exclude=tatoeba))
  assert pairs == [("Guten Tag", "Good day", "deu", "eng")]
  assert (counts.read, counts.kept, dict(counts.skipped)) == (3, 1, {"tatoeba_overlap": 2})


# ------------------------------------------------------------------------ OPUS


def test_opus_moses_gz_and_empty_sides(tmp_path):
  write(tmp_path / "Europarl.de-en.de.gz", "Hallo\n\nWelt\r\n   \n")
  write(tmp_path / "Europarl.de-en.en", "Hello\nempty left\nWorld\nx\n")
  write(tmp_path / "README", "not a corpus\n")
  write(tmp_path / "Europarl.de-en.ids", "ignored\n")
  corpora = opus_readers.discover_opus(tmp_path)
  assert [(c.name, c.lang_a, c.lang_b) for c in corpora] == [
      ("Europarl.de-en.de.gz+Europarl.de-en.en", "deu", "eng")]
  counts = pair_readers.PairCounts()
  pairs = list(opus_readers.opus_pairs(corpora, counts=counts))
  assert pairs == [("Hallo", "Hello", "deu", "eng"), ("Welt", "World", "deu", "eng")]
  assert (counts.read, counts.kept, dict(counts.skipped)) == (4, 2, {"empty_side": 2})


def test_opus_moses_line_mismatch_names_files_and_counts(tmp_path):
  write(tmp_path / "toy.en-fr.en", "a\nb\nc\n")
  write(tmp_path / "toy.en-fr.fr", "a\nb\n")
  (corpus,) = opus_readers.discover_opus(tmp_path)
  pattern = r"toy\.en-fr\.en has 3 lines but .*toy\.en-fr\.fr has 2"
  with pytest.raises(ValueError, match=pattern):
    opus_readers.check_moses_line_counts(corpus)
  with pytest.raises(ValueError, match=pattern):  # Also when streaming, at the end of the pair.
    list(opus_readers.opus_pairs([corpus]))


def test_opus_tsv_skips_are_counted(tmp_path):
  write(tmp_path / "Tatoeba.en-zh_cn.tsv.gz",
        "hello\t你好\nno tab here\nonly left\t\n\tonly right\na\tb\tc\nbye\t再见")
  (corpus,) = opus_readers.discover_opus(tmp_path)
  assert (corpus.lang_a, corpus.lang_b) == ("eng", "zho-CN")
  counts = pair_readers.PairCounts()
  pairs = list(opus_readers.opus_pairs([corpus], counts=counts))
  assert [p.text_b for p in pairs] == ["你好", "再见"]
  assert counts.read == 6 == counts.kept + sum(counts.skipped.values())
  assert counts.skipped == {"no_tab": 1, "empty_side": 2, "extra_tab": 1}


def test_opus_hyphenated_canonical_codes(tmp_path):
  write(tmp_path / "x.eng-zho-CN.tsv", "a\tb\n")
  write(tmp_path / "y.aze-Latn-eng.eng", "a\n")
  write(tmp_path / "y.aze-Latn-eng.aze-Latn", "b\n")
  assert [(c.lang_a, c.lang_b) for c in opus_readers.discover_opus(tmp_path)] == [
      ("eng", "zho-CN"), ("aze-Latn", "eng")]


def test_opus_unknown_code_names_file_and_fix(tmp_path):
  write(tmp_path / "toy.en-xx.tsv", "a\tb\n")
  with pytest.raises(ValueError, match=r"toy\.en-xx\.tsv: language code 'xx' is unknown.*_EXTRA_LANGUAGES"):
    opus_readers.discover_opus(tmp_path)


def test_opus_missing_moses_partner(tmp_path):
  write(tmp_path / "toy.de-en.de", "a\n")
  with pytest.raises(ValueError, match=r"toy\.de-en\.de has no partner .*toy\.de-en\.en"):
    opus_readers.discover_opus(tmp_path)


def test_count_lines_without_final_newline(tmp_path):
  write(tmp_path / "a.txt", "x\ny")
  write(tmp_path / "b.txt.gz", "x\ny\n")
  write(tmp_path / "c.txt", "")
  assert [opus_readers.count_lines(tmp_path / n) for n in ("a.txt", "b.txt.gz", "c.txt")] == [2, 2, 0]
