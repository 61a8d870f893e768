"""Loads a SentencePiece vocabulary: seqio's where it imports, this module's class where it does not.

Ids follow the T5/seqio convention: pad=0, eos=1, unk=2, no bos (mT5's
spiece.model follows it too, and works as is). The vocabulary holds no language
symbols: language ids are indices into vmsst.base.languages.LANGUAGES with their own
embedding table in the network, so pieces are spent on text only and a
pretrained model's vocabulary needs nothing added.

A base module: the data side (vmsst_tasks) loads its vocabulary here, below
the model. Training one is vmsst_tasks/sources/vocabulary_training.py (command:
`python -m vmsst.vocabulary`).

`SentencePieceVocabulary` answers where TensorFlow is absent (an accelerator
image) what the evaluators, encoders and `train` ask of a vocabulary
(`encode`, `decode`, `vocab_size`, the special ids, `tokenizer`,
`sentencepiece_model_file`) with the same ids: seqio's vocabulary without
extra ids is this model's `EncodeAsIds` (tests/test_sentencepiece_vocabulary.py
checks both on NTREX).
"""

from typing import Sequence

import sentencepiece as spm

from vmsst.base import files

PAD_ID, EOS_ID, UNK_ID = 0, 1, 2


class SentencePieceVocabulary:
  """A trained SentencePiece model (pad 0, EOS 1, unk 2; no extra ids)."""

  def __init__(self, sentencepiece_model_file: str):
    self.sentencepiece_model_file = sentencepiece_model_file
    self.sp_model = files.read_bytes(sentencepiece_model_file)  # the model's bytes, as seqio's
    self.tokenizer = spm.SentencePieceProcessor(model_proto=self.sp_model)
    # seqio's names for what the loaded model fixes: read once, they never change.
    self.vocab_size = self.tokenizer.GetPieceSize()
    self.eos_id, self.pad_id, self.unk_id = (
        self.tokenizer.eos_id(), self.tokenizer.pad_id(), self.tokenizer.unk_id())

  def encode(self, text: str) -> list[int]:
    return self.tokenizer.EncodeAsIds(text)

  def decode(self, ids: Sequence[int]) -> str:
    """Text of `ids` up to the first EOS (as seqio decodes)."""
    ids = [int(i) for i in ids]
    if self.eos_id in ids:
      ids = ids[:ids.index(self.eos_id)]
    return self.tokenizer.DecodeIds(ids)


def read_vocabulary(path: str) -> SentencePieceVocabulary:
  """A trained model's vocabulary for tokenizing in Python: what a restored model encodes
  with. seqio's class gives the same ids but imports TensorFlow, half a command's start-up
  (`python -m vmsst.embed` on a checkpoint) for nothing it uses."""
  _check_exists(path)
  return SentencePieceVocabulary(path)


def _check_exists(path: str) -> None:
  if not files.exists(path):
    raise FileNotFoundError(
        f"No SentencePiece model at {path}: train one with `python -m vmsst.vocabulary "
        "--data_dir=../shared/data --output=DIR/spm` and point the vocabulary path at "
        "DIR/spm.model.")


def get_vocabulary(path: str) -> "seqio.SentencePieceVocabulary":
  """The seqio vocabulary of a trained model (no T5 sentinel extra ids): what seqio's
  tasks tokenize with.

  Where seqio (TensorFlow) is absent, the same ids from SentencePieceVocabulary.
  """
  _check_exists(path)
  try:
    import seqio  # pylint: disable=import-outside-toplevel
  except ImportError:
    return SentencePieceVocabulary(path)
  return seqio.SentencePieceVocabulary(path, extra_ids=0)
