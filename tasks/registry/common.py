"""What every task family's registration shares: features, inputs, the Tatoeba filter.

One family module per kind of data (pairs.py, opus.py, distillation.py,
entities.py, triplets.py, tfds.py) registers its tasks through these, so all
of them tokenize with one vocabulary, drop the same Tatoeba test sentences and
treat bad lines under one `pair_readers.InputPolicy`, and therefore mix.
"""

import dataclasses
import functools
from typing import Sequence

import seqio
import tensorflow as tf

from vmsst_tasks.registry import preprocessors
from vmsst_tasks.registry import seqio_sources
from vmsst_tasks.sources import pair_readers
from vmsst.base import files
from vmsst.base import sentencepiece_vocabulary

SPLITS = seqio_sources.SPLITS


def output_features(vocab: seqio.Vocabulary) -> dict[str, seqio.Feature]:
  """Token features with the vocabulary; language ids as rank-0 int32 without one."""
  token = seqio.Feature(vocabulary=vocab, add_eos=True, dtype=tf.int32, rank=1)
  language = seqio.ContinuousFeature(dtype=tf.int32, rank=0)  # PassThroughVocabulary, no EOS.
  return {"tokens_a": token, "tokens_b": token, "lang_a": language, "lang_b": language}


@functools.lru_cache(maxsize=2)
def tatoeba_exclusion(data_dir: str) -> frozenset[str]:
  """The Tatoeba test sentences training text is filtered against (read once)."""
  return pair_readers.tatoeba_test_sentences(data_dir)


@dataclasses.dataclass(frozen=True)
class RegistrationInputs:
  """What every family needs, built once per registration by `registry.register_families`.

  Attributes:
    data_dir: root of the shared corpora (ntrex128/, multi30k/, tatoeba/, stsb/).
    vocabulary: the SentencePiece vocabulary of every task's tokens.
    policy: how malformed or overlong lines are treated (tasks/sources/pair_readers.py).
  """
  data_dir: str
  vocabulary: seqio.Vocabulary
  policy: pair_readers.InputPolicy = pair_readers.DEFAULT_POLICY

  @classmethod
  def read(cls, data_dir: str, vocabulary_path: str,
           policy: pair_readers.InputPolicy | None = None) -> "RegistrationInputs":
    """From the run file's paths (the data_dir normalised: it keys read caches)."""
    return cls(str(files.as_path(data_dir)),
               sentencepiece_vocabulary.get_vocabulary(vocabulary_path),
               policy or pair_readers.DEFAULT_POLICY)

  @property
  def exclude(self) -> frozenset[str]:
    """The Tatoeba test sentences no task trains on (App. B of the VMSST paper)."""
    return tatoeba_exclusion(self.data_dir)


@functools.lru_cache(maxsize=8)
def read_split(reader: str, data_dir: str, split: str, seed: int,
               policy: pair_readers.InputPolicy = pair_readers.DEFAULT_POLICY,
               ) -> tuple[tuple[pair_readers.Pair, ...], pair_readers.PairCounts]:
  """NTREX-128 or Multi30k pairs of one split, read once per process (registration repeats)."""
  counts = pair_readers.PairCounts()
  exclude = tatoeba_exclusion(data_dir)
  if reader == "ntrex128":
    pairs = pair_readers.ntrex_pairs(data_dir, split, seed=seed, counts=counts, exclude=exclude,
                                policy=policy)
  else:
    pairs = pair_readers.multi30k_pairs(data_dir, split, counts=counts, exclude=exclude,
                                   policy=policy)
  return tuple(pairs), counts


def register_pair_task(name: str, source: seqio.DataSource, vocabulary: seqio.Vocabulary, *,
                       shuffle_buffer_size: int | None = seqio.SHUFFLE_BUFFER_SIZE) -> str:
  """Registers (replacing any same-named) task over a text-pair source.

  The source must yield {"text_a", "text_b", "lang_a", "lang_b"} strings with
  canonical codes; the task gets the vmsst output features and preprocessors,
  so it mixes with every other vmsst task and feeds PairFeatureConverter.
  """
  seqio.TaskRegistry.remove(name)
  seqio.TaskRegistry.add(name, source=source, output_features=output_features(vocabulary),
                         preprocessors=list(preprocessors.PAIR_PREPROCESSORS),
                         shuffle_buffer_size=shuffle_buffer_size)
  return name


def register_task(name: str, source: seqio.DataSource, features: dict[str, seqio.Feature],
                  task_preprocessors: Sequence) -> str:
  """Registers (replacing any same-named) task with features beyond the pair ones."""
  seqio.TaskRegistry.remove(name)
  seqio.TaskRegistry.add(name, source=source, output_features=features,
                         preprocessors=list(task_preprocessors))
  return name


def replace_mixture(name: str, tasks: Sequence[tuple[str, float]]) -> str:
  """Registers (replacing any same-named) mixture of (task, rate)."""
  seqio.MixtureRegistry.remove(name)
  seqio.MixtureRegistry.add(name, list(tasks))
  return name
