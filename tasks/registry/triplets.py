"""The triplet family: English (anchor, positive, negative) triplets for query-tower tuning.

tasks/sources/triplet_sets.py builds them (from STSb, or reads TSV files); this module
registers them as `vmsst_triplets`: PairFeatureConverter's tokens_a = anchor,
tokens_b = positive, lang_a = lang_b = eng, plus `tokens_negative`, tokenized,
EOS-terminated and 0-padded here to the training length (the converter passes
it through at that static width).
"""

import functools
from typing import Sequence

from vmsst.base.gin_utils import gin
import numpy as np
import seqio
import tensorflow as tf

from vmsst_tasks.registry import common
from vmsst_tasks.registry import preprocessors
from vmsst_tasks.registry import seqio_sources
from vmsst_tasks.sources import pair_readers
from vmsst_tasks.sources import triplet_sets
from vmsst_tasks.sources.triplet_sets import TASK, Triplet


@gin.configurable
def triplet_tasks(inputs: common.RegistrationInputs, *, triplets: str = "stsb") -> list[str]:
  """Registers `vmsst_triplets` (replacing it) over `triplet_sets.read_triplet_splits`.

  Args:
    inputs: the shared inputs (register_families builds them; its data_dir
      holds stsb/).
    triplets: "stsb" (built from data_dir/stsb train/dev) or a directory
      holding train.tsv and validation.tsv.
  """
  features = {**common.output_features(inputs.vocabulary),
              "tokens_negative": seqio.ContinuousFeature(dtype=tf.int32, rank=1)}
  splits = triplet_sets.read_triplet_splits(triplets, inputs.data_dir)
  source = TripletSource({split: rows for split, (rows, _) in splits.items()},
                                      counts={split: counts for split, (_, counts)
                                              in splits.items()})
  return [common.register_task(TASK, source, features, PREPROCESSORS)]


class TripletSource(seqio.FunctionDataSource):
  """Triplets in memory per split: {"text_a", "text_b", "text_negative", "lang_a", "lang_b"}.

  Attributes:
    counts: split -> pair_readers.PairCounts (read = kept + skipped), which
      registry.data_counts reports like every other task's.
  """

  def __init__(self, triplets: dict[str, Sequence[Triplet]], language: str = "eng",
               counts: dict[str, pair_readers.PairCounts] | None = None):
    self.counts = dict(counts or {})
    self._columns = {}
    for split, rows in triplets.items():
      if not rows:
        raise ValueError(f"{TASK}: the {split} split has no triplets.")
      anchor, positive, negative = (np.array(c, dtype=object) for c in zip(*rows))
      langs = np.array([language] * len(rows), dtype=object)
      self._columns[split] = {"text_a": anchor, "text_b": positive, "text_negative": negative,
                              "lang_a": langs, "lang_b": langs}
    super().__init__(dataset_fn=self._dataset, splits=tuple(triplets),
                     num_input_examples={s: len(r) for s, r in triplets.items()})

  def _dataset(self, split: str, shuffle_files: bool, seed: int | None = None) -> tf.data.Dataset:
    return seqio_sources.in_memory_dataset(self._columns[split], shuffle=shuffle_files, seed=seed)


rekey_triplet = functools.partial(
    seqio.preprocessors.rekey,
    key_map={"tokens_a": "text_a", "tokens_b": "text_b", "tokens_negative": "text_negative",
             "lang_a": "lang_a", "lang_b": "lang_b"})


def pad_negative(tokens: tf.Tensor, length: int) -> tf.Tensor:
  """Ids [n] -> the first length − 1 ids, EOS (1), zeros: int32 [length].

  [8, 41] at length 5 -> [8, 41, 1, 0, 0]: the same trim-then-EOS as
  append_eos_after_trim gives tokens_a/tokens_b, padded as the converter pads them.
  """
  tokens = tf.concat([tf.cast(tokens[:length - 1], tf.int32), [1]], axis=0)
  return tf.ensure_shape(tf.pad(tokens, [[0, length - tf.shape(tokens)[0]]]), [length])


@seqio.map_over_dataset
def _negative_example(example, vocabulary, length):
  out = dict(example)
  out["tokens_negative"] = pad_negative(vocabulary.encode_tf(example["tokens_negative"]), length)
  return out


def tokenize_negative(dataset: tf.data.Dataset, output_features, sequence_length):
  """Tokenizes and pads `tokens_negative` to the length of tokens_a.

  {"tokens_negative": "A cat."} -> {"tokens_negative": [55, 9, 1, 0, ..., 0]} (int32 [L])
  """
  if not sequence_length or "tokens_a" not in sequence_length:
    raise ValueError(f"{TASK} needs task_feature_lengths with tokens_a (the training "
                     "length): tokens_negative is padded to it.")
  return _negative_example(dataset, vocabulary=output_features["tokens_a"].vocabulary,
                           length=sequence_length["tokens_a"])


# The task's preprocessors.
PREPROCESSORS = (rekey_triplet, preprocessors.tokenize_pair, tokenize_negative,
                 preprocessors.language_ids, seqio.preprocessors.append_eos_after_trim)
