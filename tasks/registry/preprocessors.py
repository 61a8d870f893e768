"""Per-example preprocessors of the vmsst pair tasks, in the order a Task runs them.

  {"text_a": "Hello.", "text_b": "Hallo.", "lang_a": "eng", "lang_b": "deu"}
    -> rekey_pair      {"tokens_a": "Hello.", "tokens_b": "Hallo.", "lang_a": "eng", ...}
    -> tokenize_pair   {"tokens_a": [8, 41], "tokens_b": [75, 41], "lang_a": "eng", ...}
    -> language_ids    {..., "lang_a": 49, "lang_b": 43}        (indices of eng, deu
                                                                 in vmsst.base.languages.LANGUAGES)
    -> seqio.preprocessors.append_eos_after_trim
                       {"tokens_a": [8, 41, 1], "tokens_b": [75, 41, 1], "lang_a": 49, ...}

Sentence tokens never contain a language symbol: the network embeds the
language id with its own table (vmsst/model/network.py), so the vocabulary needs
none and any SentencePiece model works. None of these steps is random.

Distillation tasks (side a is the source sentence) add one step after the
rekey, `teacher_embeddings`, which looks up the teacher's vector of the source
string: {..., "teacher": float32 [T]} (see `distillation_preprocessors`).
"""

import functools
from typing import Mapping, Sequence

import numpy as np
import seqio
import tensorflow as tf

from vmsst.base import languages

TOKEN_FEATURES = ("tokens_a", "tokens_b")
LANGUAGE_FEATURES = ("lang_a", "lang_b")

# {"text_a": s, "text_b": t, "lang_a": x, "lang_b": y}
#   -> {"tokens_a": s, "tokens_b": t, "lang_a": x, "lang_b": y}
# The strings take the names of the token features they become, so seqio's
# tokenize (which tokenizes features named like output features) applies.
rekey_pair = functools.partial(
    seqio.preprocessors.rekey,
    key_map={"tokens_a": "text_a", "tokens_b": "text_b", "lang_a": "lang_a", "lang_b": "lang_b"})


def tokenize_pair(dataset: tf.data.Dataset,
                  output_features: Mapping[str, seqio.Feature]) -> tf.data.Dataset:
  """Tokenizes tokens_a/tokens_b with their feature's vocabulary (no EOS yet).

  {"tokens_a": "Hello.", "tokens_b": "Hallo.", "lang_a": "eng", "lang_b": "deu"}
    -> {"tokens_a": [8, 41], "tokens_b": [75, 41], "lang_a": "eng", "lang_b": "deu"}

  Only the two token features are passed to seqio's tokenize: lang_a/lang_b
  are output features too but are mapped by `language_ids`, not tokenized.
  """
  token_features = {k: output_features[k] for k in TOKEN_FEATURES}
  return seqio.preprocessors.tokenize(dataset, token_features, copy_pretokenized=False)


def language_table() -> tf.lookup.StaticHashTable:
  """Canonical code -> int32 language id (its index in vmsst.base.languages.LANGUAGES); -1 else."""
  return tf.lookup.StaticHashTable(
      tf.lookup.KeyValueTensorInitializer(
          tf.constant(languages.LANGUAGES),
          tf.range(len(languages.LANGUAGES), dtype=tf.int32)),
      default_value=-1)


def lookup_languages(example: Mapping[str, tf.Tensor],
                     table: tf.lookup.StaticHashTable) -> dict[str, tf.Tensor]:
  """Replaces the lang_a/lang_b code strings by their language ids (int32 scalars).

  {"lang_a": "eng", "lang_b": "deu", ...} -> {"lang_a": 49, "lang_b": 43, ...}

  Raises (when the dataset is iterated):
    tf.errors.InvalidArgumentError: a code is not a canonical code of LANGUAGES.
  """
  out = dict(example)
  for key in LANGUAGE_FEATURES:
    language_id = table.lookup(example[key])
    check = tf.debugging.Assert(
        language_id >= 0,
        [f"{key}: language code is not in vmsst.base.languages.LANGUAGES (sources must yield "
         "canonical codes, vmsst.base.languages.canonical_language):", example[key]])
    with tf.control_dependencies([check]):
      out[key] = tf.identity(language_id)
  return out


def language_ids(dataset: tf.data.Dataset) -> tf.data.Dataset:
  """Maps `lookup_languages` over the dataset; no vocabulary is involved.

  The table is built here, outside the per-example function, because a
  tf.lookup table cannot be created inside a tf.data map.
  """
  return dataset.map(functools.partial(lookup_languages, table=language_table()),
                     num_parallel_calls=tf.data.AUTOTUNE)


# The Task pipeline after the raw {"text_a", "text_b", "lang_a", "lang_b"} source.
# Everything before the placeholder is what `python -m seqio.scripts.cache_tasks_main`
# writes to a task's cache (tokens and language ids); trimming to the run's
# sequence length happens after it, so one cache serves every length.
PAIR_PREPROCESSORS = (rekey_pair, tokenize_pair, language_ids,
                      seqio.CacheDatasetPlaceholder(),
                      seqio.preprocessors.append_eos_after_trim)


def lookup_teacher(example: Mapping[str, tf.Tensor], table: tf.lookup.StaticHashTable,
                   vectors: tf.Tensor) -> dict[str, tf.Tensor]:
  """Adds `teacher`, the teacher's embedding of the source (side a) sentence.

  Runs after `rekey_pair`, while tokens_a is still the source string:
    {"tokens_a": "Hello.", "tokens_b": "Hallo.", "lang_a": "eng", "lang_b": "deu"}
      -> {"tokens_a": "Hello.", ..., "teacher": [0.03, -0.12, ...]}   float32 [T]

  Raises (when the dataset is iterated):
    tf.errors.InvalidArgumentError: the sentence is not in the table.
  """
  row = table.lookup(example["tokens_a"])
  check = tf.debugging.Assert(
      row >= 0, ["teacher: source sentence has no cached teacher embedding (fill the "
                 "TeacherCache with every source sentence of the task):", example["tokens_a"]])
  with tf.control_dependencies([check]):
    return {**example, "teacher": tf.gather(vectors, row)}


def teacher_embeddings(dataset: tf.data.Dataset, *, sentences: Sequence[str],
                       vectors: np.ndarray) -> tf.data.Dataset:
  """Maps `lookup_teacher` with a table of `sentences` -> rows of `vectors` [N, T].

  Bind the arguments with functools.partial when registering the task (see
  tasks/registry/distillation.py); like `language_ids`, the table is built here because a
  tf.lookup table cannot be created inside a tf.data map. `vectors` is
  captured as one constant, so the feature has the static width T the
  feature converter needs.
  """
  if len(sentences) != len(vectors) or len(set(sentences)) != len(sentences):
    raise ValueError(f"teacher_embeddings: {len(set(sentences))} distinct sentences of "
                     f"{len(sentences)} for {len(vectors)} vectors; need one vector each.")
  table = tf.lookup.StaticHashTable(
      tf.lookup.KeyValueTensorInitializer(tf.constant(list(sentences), tf.string),
                                          tf.range(len(sentences), dtype=tf.int64)),
      default_value=-1)
  matrix = tf.constant(np.asarray(vectors, np.float32))
  return dataset.map(functools.partial(lookup_teacher, table=table, vectors=matrix),
                     num_parallel_calls=tf.data.AUTOTUNE)


def distillation_preprocessors(sentences: Sequence[str], vectors: np.ndarray) -> tuple:
  """PAIR_PREPROCESSORS with `teacher_embeddings` after the rekey (side a = source)."""
  add_teacher = functools.partial(teacher_embeddings, sentences=tuple(sentences), vectors=vectors)
  return (rekey_pair, add_teacher, *PAIR_PREPROCESSORS[1:])
