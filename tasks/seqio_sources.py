"""The seqio DataSources of the registry's tasks (tasks/registry.py registers them).

  InMemoryPairSource    pairs read once (NTREX-128, Multi30k), whole split shuffled
  StreamingPairSource   OPUS pairs streamed from files, one "train" split
  EntitySentenceSource  tasks.wiki_entities output: a sentence on both sides + entities

Each yields the text-pair schema {"text_a", "text_b", "lang_a", "lang_b"}
(strings, canonical codes) that the registry's preprocessors tokenize.
"""

from typing import AbstractSet, Iterator, Mapping, Sequence

import numpy as np
import seqio
import tensorflow as tf

from vmsst_tasks import opus_sources
from vmsst_tasks import sources
from vmsst_tasks import wiki_entities

SPLITS = ("train", "validation")
TEXT_FEATURES = ("text_a", "text_b", "lang_a", "lang_b")


class InMemoryPairSource(seqio.FunctionDataSource):
  """Pairs held in memory per split; shuffles the whole split when asked.

  NTREX lists all translations of a line together, so seqio's 1000-example
  shuffle buffer alone would fill batches with one sentence in many languages.

  Attributes:
    counts: split -> PairCounts of the pass that produced the pairs.
  """

  def __init__(self, pairs: Mapping[str, Sequence[sources.Pair]],
               counts: Mapping[str, sources.PairCounts]):
    self.counts = dict(counts)
    self._columns = {split: {key: np.array([p[i] for p in split_pairs], dtype=object)
                             for i, key in enumerate(TEXT_FEATURES)}
                     for split, split_pairs in pairs.items()}
    super().__init__(dataset_fn=self._dataset, splits=tuple(pairs),
                     num_input_examples={s: len(p) for s, p in pairs.items()})

  def _dataset(self, split: str, shuffle_files: bool, seed: int | None = None) -> tf.data.Dataset:
    ds = tf.data.Dataset.from_tensor_slices(self._columns[split])
    if shuffle_files:
      ds = ds.shuffle(max(self.num_input_examples(split), 1), seed=seed,
                      reshuffle_each_iteration=True)
    return ds


class StreamingPairSource(seqio.FunctionDataSource):
  """OPUS pairs streamed from files (too big for memory); one split, "train".

  Attributes:
    corpora: the files, read one after the other (in a seeded random order
      when seqio asks for shuffled files).
    pivot: if set, every pair is flipped so that lang_a is the pivot.
    policy: how bad lines are treated (tasks/sources.py module docstring).
    counts: PairCounts of the pass in progress (or last finished); each pass
      over the files (each epoch) starts a new one.
  """

  def __init__(self, corpora: Sequence[opus_sources.OpusFile], *, num_lines: int, name: str,
               exclude: AbstractSet[str] = frozenset(), pivot: str | None = None,
               policy: sources.InputPolicy = sources.DEFAULT_POLICY):
    self.corpora, self.pivot, self._exclude, self._name = tuple(corpora), pivot, exclude, name
    self.policy = policy
    self.counts = sources.PairCounts()
    super().__init__(dataset_fn=self._dataset, splits=("train",),
                     num_input_examples={"train": num_lines})

  def _pairs(self, corpora: Sequence[opus_sources.OpusFile]) -> Iterator[dict[str, str]]:
    self.counts = sources.PairCounts()
    for pair in opus_sources.opus_pairs(corpora, counts=self.counts, exclude=self._exclude,
                                   name=self._name, policy=self.policy):
      if self.pivot is not None and pair.lang_b == self.pivot:
        pair = sources.Pair(pair.text_b, pair.text_a, pair.lang_b, pair.lang_a)
      yield pair._asdict()

  def _dataset(self, split: str, shuffle_files: bool, seed: int | None = None) -> tf.data.Dataset:
    del split  # Only "train"; seqio checks the split name.
    corpora = list(self.corpora)
    if shuffle_files:
      np.random.default_rng(seed).shuffle(corpora)
    spec = {key: tf.TensorSpec([], tf.string) for key in TEXT_FEATURES}
    return tf.data.Dataset.from_generator(lambda: self._pairs(corpora), output_signature=spec)


class EntitySentenceSource(seqio.FunctionDataSource):
  """tasks.wiki_entities examples in memory: the sentence as both sides, plus `entities`.

  {"text_a": s, "text_b": s, "lang_a": "eng", "lang_b": "eng", "entities": [12, 40]}
  The whole split is shuffled when asked (examples are written page by page).
  """

  def __init__(self, entity_dir: str, *, name: str):
    self.name = name  # The task's, for errors.
    self._columns = {}
    for split in SPLITS:
      texts, langs, ids = wiki_entities.load_split(entity_dir, split)
      texts, langs = np.array(texts, dtype=object), np.array(langs, dtype=object)
      self._columns[split] = {"text_a": texts, "text_b": texts, "lang_a": langs,
                              "lang_b": langs, "entities": ids}
    super().__init__(dataset_fn=self._dataset, splits=SPLITS,
                     num_input_examples={s: len(c["entities"]) for s, c in self._columns.items()})

  def _dataset(self, split: str, shuffle_files: bool, seed: int | None = None) -> tf.data.Dataset:
    columns = self._columns[split]
    if not len(columns["entities"]):
      raise ValueError(f"{self.name}: no {split} examples (raise --heldout_fraction of "
                       "python -m vmsst_tasks.wiki_entities for a validation split).")
    ds = tf.data.Dataset.from_tensor_slices(columns)
    if shuffle_files:
      ds = ds.shuffle(len(columns["entities"]), seed=seed, reshuffle_each_iteration=True)
    return ds
