"""The SentencePiece vocabulary without seqio: where TensorFlow is absent (an accelerator image).

`vmsst.vocabulary.get_vocabulary` returns seqio's SentencePieceVocabulary
where seqio imports, and this class where it does not. It answers what the
evaluators, encoders and `train` ask of a vocabulary (`encode`, `decode`,
`vocab_size`, the special ids, `tokenizer`, `sentencepiece_model_file`) with
the same ids: seqio's vocabulary without extra ids is this model's
`EncodeAsIds` (tests/test_sentencepiece_vocabulary.py checks both on NTREX).
"""

from typing import Sequence

import sentencepiece as spm

from vmsst import files


class SentencePieceVocabulary:
  """A trained SentencePiece model (pad 0, EOS 1, unk 2; no extra ids)."""

  def __init__(self, sentencepiece_model_file: str):
    self.sentencepiece_model_file = sentencepiece_model_file
    self.tokenizer = spm.SentencePieceProcessor(
        model_proto=files.read_bytes(sentencepiece_model_file))

  @property
  def vocab_size(self) -> int:
    return self.tokenizer.GetPieceSize()

  @property
  def eos_id(self) -> int:
    return self.tokenizer.eos_id()

  @property
  def pad_id(self) -> int:
    return self.tokenizer.pad_id()

  @property
  def unk_id(self) -> int:
    return self.tokenizer.unk_id()

  def encode(self, text: str) -> list[int]:
    return self.tokenizer.EncodeAsIds(text)

  def decode(self, ids: Sequence[int]) -> str:
    """Text of `ids` up to the first EOS (as seqio decodes)."""
    ids = [int(i) for i in ids]
    if self.eos_id in ids:
      ids = ids[:ids.index(self.eos_id)]
    return self.tokenizer.DecodeIds(ids)
