"""The hard-negative family: training pairs with negatives mined for them, (a, b, negatives…).

tasks/sources/negatives_files.py reads the directory `python -m vmsst.hard_negatives`
writes; this module registers it as `vmsst_hard_negatives` (train): the pair
features plus `tokens_negative` int32 [K·L], negative k tokenized, cut to
L − 1 pieces, EOS, 0-padded to L at [k·L, (k+1)·L), all zeros where none was
mined (the objectives mask it). K = 1 is the triplet task's feature, so
Contrastive and VMSST-Contrastive (`hard_negatives = K`) read both.
"""

import functools
from typing import Sequence

from vmsst.base.gin_utils import gin
import numpy as np
import seqio
import tensorflow as tf

from vmsst_tasks.sources import negatives_files as hard_negatives_lib
from vmsst_tasks.registry import preprocessors
from vmsst_tasks.registry import seqio_sources
from vmsst_tasks.sources import pair_readers
from vmsst_tasks.registry import triplets
from vmsst_tasks.registry import common

TASK = hard_negatives_lib.TASK


def negative_column(k: int) -> str:
  return f"text_negative_{k}"


class HardNegativeSource(seqio.FunctionDataSource):
  """The rows in memory, train split: {"text_a", "text_b", "lang_a", "lang_b",
  "text_negative_0", …, "text_negative_<K-1>"} (strings; "" where none was mined).

  The negatives are columns of their pair's example: every shuffle, batch,
  shard and saved position moves them together.

  Attributes:
    counts: {"train": pair_readers.PairCounts}, reported by registry.data_counts.
    negatives: K.
  """

  def __init__(self, rows: Sequence[hard_negatives_lib.Row], negatives: int,
               counts: pair_readers.PairCounts):
    if not rows:
      raise ValueError(f"{TASK}: no training pair was kept ({counts.report(TASK)}).")
    self.counts, self.negatives = {"train": counts}, negatives
    column = lambda values: np.array(list(values), dtype=object)
    self._columns = {name: column(getattr(r, name) for r in rows)
                     for name in ("text_a", "text_b", "lang_a", "lang_b")}
    for k in range(negatives):
      self._columns[negative_column(k)] = column(r.negatives[k] for r in rows)
    super().__init__(dataset_fn=self._dataset, splits=("train",),
                     num_input_examples={"train": len(rows)})

  def _dataset(self, split: str, shuffle_files: bool, seed: int | None = None) -> tf.data.Dataset:
    del split
    return seqio_sources.in_memory_dataset(self._columns, shuffle=shuffle_files, seed=seed)


def pad_negative_or_empty(tokens: tf.Tensor, text: tf.Tensor, length: int) -> tf.Tensor:
  """`triplets.pad_negative` of a mined negative; zeros [length] for an empty one (none mined)."""
  padded = triplets.pad_negative(tokens, length)
  return tf.where(tf.strings.length(text) > 0, padded, tf.zeros_like(padded))


@seqio.map_over_dataset
def _negatives_example(example, vocabulary, length, negatives):
  out = {k: v for k, v in example.items() if not k.startswith("text_negative_")}
  texts = [example[negative_column(k)] for k in range(negatives)]
  out["tokens_negative"] = tf.concat(
      [pad_negative_or_empty(vocabulary.encode_tf(t), t, length) for t in texts], axis=0)
  return out


def tokenize_negatives(dataset: tf.data.Dataset, output_features, sequence_length, *,
                       negatives: int):
  """The K negative strings -> `tokens_negative` int32 [K·L] (L: tokens_a's length).

  {"text_negative_0": "Ein Hund.", "text_negative_1": ""} at L = 4
    -> {"tokens_negative": [61, 7, 1, 0, 0, 0, 0, 0]}
  """
  if not sequence_length or "tokens_a" not in sequence_length:
    raise ValueError(f"{TASK} needs task_feature_lengths with tokens_a (the training length): "
                     "each negative is padded to it.")
  return _negatives_example(dataset, vocabulary=output_features["tokens_a"].vocabulary,
                            length=sequence_length["tokens_a"], negatives=negatives)


rekey_with_negatives = functools.partial(
    seqio.preprocessors.rekey,
    key_map={"tokens_a": "text_a", "tokens_b": "text_b", "tokens_negative": "tokens_negative",
             "lang_a": "lang_a", "lang_b": "lang_b"})


def task_preprocessors(negatives: int) -> tuple:
  """The pair preprocessors with the negatives tokenized first (their strings dropped)."""
  tokenize = functools.partial(tokenize_negatives, negatives=negatives)
  return (tokenize, rekey_with_negatives, preprocessors.tokenize_pair, preprocessors.language_ids,
          seqio.preprocessors.append_eos_after_trim)


@gin.configurable
def hard_negative_tasks(inputs: common.RegistrationInputs, *,
                        negatives_dir: str = gin.REQUIRED) -> list[str]:
  """Registers `vmsst_hard_negatives` (replacing it) over a mined directory.

  Args:
    inputs: the shared inputs (vocabulary, Tatoeba exclusion, bad-input policy).
    negatives_dir: the --output of `python -m vmsst.hard_negatives`
      (train.tsv and mining.json), local or gs://.
  """
  rows, negatives, counts = hard_negatives_lib.read(negatives_dir, exclude=inputs.exclude,
                                                    policy=inputs.policy)
  source = HardNegativeSource(rows, negatives, counts)
  features = {**common.output_features(inputs.vocabulary),
              "tokens_negative": seqio.ContinuousFeature(dtype=tf.int32, rank=1)}
  return [common.register_task(TASK, source, features, task_preprocessors(negatives))]
