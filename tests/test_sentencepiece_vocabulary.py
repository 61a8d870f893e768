"""vmsst/sentencepiece_vocabulary.py: seqio's ids, EOS and decoding without seqio."""

import seqio

from vmsst import sentencepiece_vocabulary
from vmsst import text_files
from vmsst_tasks import sources


def test_ids_and_text_equal_seqios_on_every_ntrex_language(data_dir, tiny_vocab_path):
  ours = sentencepiece_vocabulary.SentencePieceVocabulary(tiny_vocab_path)
  theirs = seqio.SentencePieceVocabulary(tiny_vocab_path, extra_ids=0)
  assert (ours.vocab_size, ours.eos_id, ours.pad_id, ours.unk_id) == (
      theirs.vocab_size, theirs.eos_id, theirs.pad_id, theirs.unk_id)
  for path in sources.ntrex_files(data_dir).values():
    for sentence in text_files.read_lines(path)[:3]:
      ids = ours.encode(sentence)
      assert ids == list(theirs.encode(sentence)), (path, sentence)
      assert ours.decode(ids + [ours.eos_id, 7]) == theirs.decode(ids + [theirs.eos_id, 7])
