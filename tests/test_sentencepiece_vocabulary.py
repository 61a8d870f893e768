"""vmsst/base/sentencepiece_vocabulary.py on the session's tiny real vocabulary: loading, the T5
ids, no language pieces, and seqio's ids, EOS and decoding without seqio."""

import pytest
import seqio

from vmsst.base import languages
from vmsst.base import sentencepiece_vocabulary
from vmsst.base import text_files
from vmsst_tasks.sources import pair_readers


@pytest.fixture(scope="module")
def vocab(tiny_vocab_path):
  return sentencepiece_vocabulary.get_vocabulary(tiny_vocab_path)


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


def test_byte_fallback_never_gives_unk(vocab):
  ids = vocab.encode("🦜 ꯃꯤꯇꯩ")  # Characters in none of the training sentences.
  assert sentencepiece_vocabulary.UNK_ID not in ids
  assert vocab.decode(ids) == "🦜 ꯃꯤꯇꯩ"


def test_get_vocabulary_missing_file_says_how_to_train(tmp_path):
  with pytest.raises(FileNotFoundError, match="python -m vmsst.vocabulary"):
    sentencepiece_vocabulary.get_vocabulary(str(tmp_path / "none.model"))


def test_ids_and_text_equal_seqios_on_every_ntrex_language(data_dir, tiny_vocab_path):
  ours = sentencepiece_vocabulary.SentencePieceVocabulary(tiny_vocab_path)
  theirs = seqio.SentencePieceVocabulary(tiny_vocab_path, extra_ids=0)
  assert (ours.vocab_size, ours.eos_id, ours.pad_id, ours.unk_id) == (
      theirs.vocab_size, theirs.eos_id, theirs.pad_id, theirs.unk_id)
  for path in pair_readers.ntrex_files(data_dir).values():
    for sentence in text_files.read_lines(path)[:3]:
      ids = ours.encode(sentence)
      assert ids == list(theirs.encode(sentence)), (path, sentence)
      assert ours.decode(ids + [ours.eos_id, 7]) == theirs.decode(ids + [theirs.eos_id, 7])
