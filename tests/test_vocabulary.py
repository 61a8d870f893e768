"""Tests of vmsst/vocabulary.py on the session's tiny real vocabulary."""

import pytest
import sentencepiece as spm

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


def test_every_language_symbol_is_one_piece(vocab):
  for index, code in enumerate(languages.LANGUAGES):
    token_id = vocabulary.language_token_id(vocab, code)
    # SentencePiece puts user-defined symbols right after the 3 special ids, in order.
    assert token_id == 3 + index, code
    assert vocab.tokenizer.id_to_piece(token_id) == languages.language_token(code)
    assert token_id in vocab.encode(f"x {languages.language_token(code)} y")
  assert vocabulary.language_token_id(vocab, "de") == vocabulary.language_token_id(vocab, "deu")


def test_byte_fallback_never_gives_unk(vocab):
  ids = vocab.encode("🦜 ꯃꯤꯇꯩ")  # Characters in none of the training sentences.
  assert vocabulary.UNK_ID not in ids
  assert vocab.decode(ids) == "🦜 ꯃꯤꯇꯩ"


def test_language_token_id_errors_without_symbols(tmp_path):
  spm.SentencePieceTrainer.train(
      sentence_iterator=iter(["a small corpus without symbols", "another line"] * 50),
      model_prefix=str(tmp_path / "plain"), vocab_size=40, hard_vocab_limit=False,
      minloglevel=2)
  plain = vocabulary.get_vocabulary(str(tmp_path / "plain.model"))
  with pytest.raises(ValueError, match="has no symbol <2deu>: retrain"):
    vocabulary.language_token_id(plain, "deu")


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
