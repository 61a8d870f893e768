"""The seqio DataSources of the registry's tasks (tasks/registry/ registers them).

  InMemoryPairSource    pairs read once (NTREX-128, Multi30k), whole split shuffled
                        (a global shuffle: `in_memory_dataset`)
  StreamingPairSource   OPUS pairs streamed from files, one "train" split
  EntitySentenceSource  tasks.wiki_entities output: a sentence on both sides + entities

Each yields the text-pair schema {"text_a", "text_b", "lang_a", "lang_b"}
(strings, canonical codes) that the registry's preprocessors tokenize.
"""

import functools
from typing import AbstractSet, Iterator, Mapping, Sequence

from absl import logging
import numpy as np
import seqio
import tensorflow as tf
from tensorflow.python.data.experimental.ops import global_shuffle_op

from vmsst_tasks.sources import opus_readers
from vmsst_tasks.sources import pair_filters
from vmsst_tasks.sources import pair_readers
from vmsst_tasks.sources import wikipedia
from vmsst.base import cli
from vmsst.base import entity_files

SPLITS = ("train", "validation")
TEXT_FEATURES = ("text_a", "text_b", "lang_a", "lang_b")


class InMemoryPairSource(seqio.FunctionDataSource):
  """Pairs held in memory per split; shuffles the whole split when asked.

  NTREX lists all translations of a line together, so seqio's 1000-example
  shuffle buffer alone would fill batches with one sentence in many languages.

  Attributes:
    counts: split -> PairCounts of the pass that produced the pairs.
  """

  def __init__(self, pairs: Mapping[str, Sequence[pair_readers.Pair]],
               counts: Mapping[str, pair_readers.PairCounts]):
    self.counts = dict(counts)
    self._columns = {split: {key: np.array([p[i] for p in split_pairs], dtype=object)
                             for i, key in enumerate(TEXT_FEATURES)}
                     for split, split_pairs in pairs.items()}
    super().__init__(dataset_fn=self._dataset, splits=tuple(pairs),
                     num_input_examples={s: len(p) for s, p in pairs.items()})

  def _dataset(self, split: str, shuffle_files: bool, seed: int | None = None) -> tf.data.Dataset:
    return in_memory_dataset(self._columns[split], shuffle=shuffle_files, seed=seed)


class StreamingPairSource(seqio.FunctionDataSource):
  """OPUS pairs streamed from files (too big for memory); one split, "train".

  Files are read by tf.data (`opus_file_dataset`: TextLineDataset, the
  bad-input policy as tf ops, pair_filters), so reading runs in parallel
  over the host's cores and the pipeline's position can be saved with a
  checkpoint. Under InputPolicy.strict the Python readers of
  tasks/sources/opus_readers.py run instead (their errors name file and line), in a
  generator that cannot be saved (a resume then skips batches, logged).

  The corpora of a pair are sampled, not read one after the other: each
  example comes from corpus i with probability lines_i / sum(lines)
  (tf.data sample_from_datasets, seeded), so every window of the stream has
  the whole's corpus mix and all corpora end together. Read one after the
  other, the first 1M examples of en-fr would all be one corpus, and no
  shuffle buffer could mix them.

  Attributes:
    corpora: the files; `corpus_lines` their line counts (the weights).
    pivot: if set, every pair is flipped so that lang_a is the pivot.
    policy: how bad lines are treated (tasks/sources/pair_readers.py module docstring).
    counts: PairCounts of one pass over all the corpora: read = kept +
      skipped by reason (tf.data reading: one pass of the same ops, taken on
      first use; strict: those of the passes in progress or last finished).
  """

  def __init__(self, corpora: Sequence[opus_readers.OpusFile], corpus_lines: Sequence[int], *,
               name: str, exclude: AbstractSet[str] = frozenset(), pivot: str | None = None,
               policy: pair_readers.InputPolicy = pair_readers.DEFAULT_POLICY):
    if len(corpora) != len(corpus_lines):
      raise ValueError(f"{name}: {len(corpora)} corpora but {len(corpus_lines)} line counts")
    self.corpora, self.pivot, self._exclude, self._name = tuple(corpora), pivot, exclude, name
    self.corpus_lines = tuple(corpus_lines)
    self.policy = policy
    self._counts = [pair_readers.PairCounts() for _ in self.corpora]
    self._counted = False
    self.input_name = ", ".join(c.name for c in self.corpora)  # For errors.
    super().__init__(dataset_fn=self._dataset, splits=("train",),
                     num_input_examples={"train": sum(self.corpus_lines)})

  @property
  def counts(self) -> pair_readers.PairCounts:
    if not self.policy.strict and not self._counted:
      self._counts = [pair_filters.count_skips(self._checked(c)) for c in self.corpora]
      self._counted = True
      for corpus, counts in zip(self.corpora, self._counts):
        logging.info("%s", counts.report(f"{self._name}[{corpus.name}]"))
    return sum(self._counts, pair_readers.PairCounts())

  def _pairs(self, index: int) -> Iterator[dict[str, str]]:
    """(strict) One pass over corpus `index`: a generator function, called each epoch."""
    self._counts[index] = counts = pair_readers.PairCounts()
    for pair in opus_readers.opus_pairs([self.corpora[index]], counts=counts,
                                        exclude=self._exclude,
                                        name=f"{self._name}[{self.corpora[index].name}]",
                                        policy=self.policy):
      if self.pivot is not None and pair.lang_b == self.pivot:
        pair = pair_readers.Pair(pair.text_b, pair.text_a, pair.lang_b, pair.lang_a)
      yield pair._asdict()

  def _checked(self, corpus: opus_readers.OpusFile) -> tf.data.Dataset:
    """A corpus's pairs (pivot first) with their skip reason (pair_filters)."""
    flip = self.pivot is not None and corpus.lang_b == self.pivot
    return pair_filters.with_skip_reason(opus_file_dataset(corpus, flip=flip),
                                         exclude=self._exclude, policy=self.policy)

  def _dataset(self, split: str, shuffle_files: bool, seed: int | None = None) -> tf.data.Dataset:
    del split, shuffle_files  # Only "train" (seqio checks the name); corpora are always sampled.
    if self.policy.strict:
      spec = {key: tf.TensorSpec([], tf.string) for key in TEXT_FEATURES}
      datasets = [tf.data.Dataset.from_generator(functools.partial(self._pairs, i),
                                                 output_signature=spec)
                  for i in range(len(self.corpora))]
    else:
      datasets = [pair_filters.kept_pairs(self._checked(c)) for c in self.corpora]
    return sample_by_lines(datasets, self.corpus_lines, seed)


def opus_file_dataset(corpus: opus_readers.OpusFile, *, flip: bool = False) -> tf.data.Dataset:
  """The raw pairs of one OPUS corpus read by tf.data; `flip` swaps the sides.

  Moses: line i of both files (their line counts were checked equal at
  registration, opus_readers.check_moses_line_counts). TSV: a line without
  exactly one tab gets "skip" no_tab / extra_tab (pair_filters).
    {"text_a": "Hello.", "text_b": "Hallo.", "lang_a": "eng", "lang_b": "deu"[, "skip": 0]}
  """
  def lines(path) -> tf.data.Dataset:
    return tf.data.TextLineDataset(str(path), compression_type=(
        "GZIP" if str(path).endswith(".gz") else ""), buffer_size=1 << 20)

  codes = {"lang_a": tf.constant(corpus.lang_a), "lang_b": tf.constant(corpus.lang_b)}
  if len(corpus.paths) == 2:
    ds = tf.data.Dataset.zip(lines(corpus.paths[0]), lines(corpus.paths[1])).map(
        lambda a, b: {"text_a": a, "text_b": b, **codes})
  else:
    def split_tsv(line):
      fields = tf.strings.split(line, "\t")
      padded = tf.concat([fields, ["", ""]], axis=0)
      skip = tf.where(tf.size(fields) == 1, pair_filters.SKIP["no_tab"],
                      tf.where(tf.size(fields) > 2, pair_filters.SKIP["extra_tab"], 0))
      return {"text_a": padded[0], "text_b": padded[1], **codes, "skip": skip}
    ds = lines(corpus.paths[0]).map(split_tsv, num_parallel_calls=tf.data.AUTOTUNE)
  if flip:
    ds = ds.map(lambda ex: {**ex, "text_a": ex["text_b"], "text_b": ex["text_a"],
                            "lang_a": ex["lang_b"], "lang_b": ex["lang_a"]})
  return ds


def sample_by_lines(datasets: Sequence[tf.data.Dataset], lines: Sequence[int],
                    seed: int | None) -> tf.data.Dataset:
  """Each element drawn from datasets[i] with probability lines[i] / sum(lines), until all end.

  Seeded (seed None: 0, so an unshuffled pass is still one fixed order); an
  ended dataset drops out and the others keep their relative weights.
  """
  if len(datasets) == 1:
    return datasets[0]
  total = sum(lines)
  weights = [n / total if total else 1 / len(lines) for n in lines]
  return tf.data.Dataset.sample_from_datasets(list(datasets), weights=weights,
                                              seed=0 if seed is None else seed,
                                              stop_on_empty_dataset=False)


class EntitySentenceSource(seqio.FunctionDataSource):
  """tasks.wiki_entities examples in memory: the sentence as both sides, plus `entities`.

  {"text_a": s, "text_b": s, "lang_a": "eng", "lang_b": "eng", "entities": [12, 40]}
  The whole split is shuffled when asked (examples are written page by page).
  """

  def __init__(self, entity_dir: str, *, name: str):
    self.name = name  # The task's, for errors.
    self._columns = {}
    for split in SPLITS:
      texts, langs, ids = wikipedia.load_split(entity_dir, split)
      texts, langs = np.array(texts, dtype=object), np.array(langs, dtype=object)
      self._columns[split] = {"text_a": texts, "text_b": texts, "lang_a": langs,
                              "lang_b": langs, "entities": ids}
    if not len(self._columns["train"]["entities"]):
      counts = entity_files.load_meta(entity_dir).get("counts", {})
      raise cli.UserError(
          f"{name}: {entity_dir} holds no training example (its meta.json counts: {counts}); "
          "run python -m vmsst_tasks.wiki_entities again with a lower --min_links (or "
          "--heldout_fraction below 1), or fix entity_tasks.entity_dir.")
    super().__init__(dataset_fn=self._dataset, splits=SPLITS,
                     num_input_examples={s: len(c["entities"]) for s, c in self._columns.items()})

  def _dataset(self, split: str, shuffle_files: bool, seed: int | None = None) -> tf.data.Dataset:
    columns = self._columns[split]
    if not len(columns["entities"]):
      raise ValueError(f"{self.name}: no {split} examples (raise --heldout_fraction of "
                       "python -m vmsst_tasks.wiki_entities for a validation split).")
    return in_memory_dataset(columns, shuffle=shuffle_files, seed=seed)


def in_memory_dataset(columns: Mapping[str, np.ndarray], *, shuffle: bool,
                      seed: int | None) -> tf.data.Dataset:
  """The rows of `columns` (equal-length arrays); with `shuffle`, the whole split shuffled.

  A global shuffle (a seeded permutation, a new one each epoch), not a
  shuffle buffer the size of the split: a saved iterator then holds an
  index, not the split (tasks/pipeline/input_pipeline.py saves it with every
  checkpoint: 1.6 kB instead of 260 MB for NTREX-128 + Multi30k).
  """
  ds = tf.data.Dataset.from_tensor_slices(dict(columns))
  if not shuffle or not len(next(iter(columns.values()))):
    return ds
  # tf.data's global shuffle (TF >= 2.17); only private in the pinned 2.21.
  return global_shuffle_op._global_shuffle(ds, seed=seed,  # pylint: disable=protected-access
                                           reshuffle_each_iteration=True)
