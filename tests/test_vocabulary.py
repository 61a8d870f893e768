"""Tests of vmsst/vocabulary.py on the session's tiny real vocabulary."""

import subprocess
import sys

import numpy as np
import pytest
import sentencepiece as spm

import vmsst_testing
from vmsst import languages
from vmsst import vocabulary


@pytest.fixture(scope="module")
def vocab(tiny_vocab_path):
  return vocabulary.get_vocabulary(tiny_vocab_path)


def test_special_ids_follow_t5(vocab):
  assert (vocab.pad_id, vocab.eos_id, vocab.unk_id) == (0, 1, 2)
  assert vocab.tokenizer.bos_id() == -1
  assert [vocab.tokenizer.id_to_piece(i) for i in range(3)] == ["<pad>", "</s>", "<unk>"]
  assert vocab.vocab_size == 2000  # extra_ids=0: no T5 sentinels on top.


def test_new_vocabularies_hold_no_language_symbols(vocab):
  """Language ids are LANGUAGES indices with their own table; no piece is spent on them."""
  pieces = {vocab.tokenizer.id_to_piece(i) for i in range(vocab.vocab_size)}
  assert not {languages.language_token(code) for code in languages.LANGUAGES} & pieces
  assert len(vocab.encode("<2deu>")) > 1  # Spelled like any other text.
  with pytest.raises(ValueError, match="has no symbol <2deu>: language ids are indices"):
    vocabulary.language_token_id(vocab, "deu")


def test_legacy_vocabulary_still_loads_and_gives_its_language_rows(tiny_vocab_path, tmp_path):
  legacy = vocabulary.get_vocabulary(
      vmsst_testing.legacy_vocabulary(tiny_vocab_path, str(tmp_path / "legacy.model")))
  assert legacy.vocab_size == 2000
  first = 2000 - len(languages.LANGUAGES)
  assert vocabulary.language_token_id(legacy, "de") == first + languages.language_index("deu")
  assert vocabulary.language_token_id(legacy, "deu") in legacy.encode("x <2deu> y")
  table = np.arange(2000 * 3, dtype=np.float32).reshape(2000, 3)
  rows, missing = vocabulary.legacy_language_rows(legacy, table)
  assert missing == [] and rows.shape == (len(languages.LANGUAGES), 3)
  np.testing.assert_array_equal(rows, table[first:])  # Row i: LANGUAGES[i]'s piece.
  rows, missing = vocabulary.legacy_language_rows(vocabulary.get_vocabulary(tiny_vocab_path),
                                                  table)
  assert missing == list(languages.LANGUAGES) and not rows.any()


def test_byte_fallback_never_gives_unk(vocab):
  ids = vocab.encode("🦜 ꯃꯤꯇꯩ")  # Characters in none of the training sentences.
  assert vocabulary.UNK_ID not in ids
  assert vocab.decode(ids) == "🦜 ꯃꯤꯇꯩ"


def test_get_vocabulary_missing_file_says_how_to_train(tmp_path):
  with pytest.raises(FileNotFoundError, match="python -m vmsst.vocabulary"):
    vocabulary.get_vocabulary(str(tmp_path / "none.model"))


def test_training_sentences_are_distinct_and_tatoeba_filtered(data_dir, tmp_path, capsys):
  tatoeba = (data_dir / "tatoeba" / "v1" / "tatoeba.deu-eng.deu").read_text().splitlines()[0]
  (tmp_path / "toy.de-en.tsv").write_text(f"Hallo Welt\tHello world\n{tatoeba}\tx\nHallo Welt\tHi world\n")
  sentences = list(vocabulary.training_sentences(str(data_dir), [f"opus:{tmp_path}"]))
  assert sentences == ["Hallo Welt", "Hello world", "Hi world"]
  assert "read=3 kept=2 skipped=1 (tatoeba_overlap=1); 3 new distinct sentences" in capsys.readouterr().out
  with pytest.raises(ValueError, match="Unknown source 'wmt'"):
    list(vocabulary.training_sentences(str(data_dir), ["wmt"]))



_TRAIN_ONE = """
import gzip, sys
from vmsst import vocabulary
with gzip.open(sys.argv[1], "rt", encoding="utf-8") as f:
  sentences = f.read().splitlines()[:30000]
vocabulary.train_vocabulary(sentences, sys.argv[2], 2000, input_sentence_size=10000, num_threads=2)
"""


def test_a_rerun_trains_the_same_vocabulary_when_the_corpus_is_sampled(data_dir, tmp_path):
  """Two processes, one vocabulary: SentencePiece's own sampling differed between processes
  whatever the seed, so two `make train`s on one commit trained two vocabularies."""
  def pieces(name):
    subprocess.run([sys.executable, "-c", _TRAIN_ONE, str(data_dir / "multi30k" / "train.de.gz"),
                    str(tmp_path / name / "spm")], check=True, cwd=vmsst_testing.ROOT)
    processor = spm.SentencePieceProcessor(model_file=str(tmp_path / name / "spm.model"))
    return [(processor.id_to_piece(i), processor.get_score(i))
            for i in range(processor.get_piece_size())]

  assert pieces("first") == pieces("second")
