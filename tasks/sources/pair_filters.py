"""The bad-input policy of tasks/sources/pair_readers.py on tf.data pairs (TFDS sources, files
read by tf.data).

tasks/sources/pair_readers.py's readers apply the policy in Python; a pipeline that reads
in TensorFlow (a TFDS dataset, `TextLineDataset`s) must not go through a
Python generator, which runs on one thread and cannot be saved in a tf.data
iterator checkpoint. These are the same rules as TensorFlow ops:

  {"text_a": " Hello. ", "text_b": "Hallo.", ...}
    -> with_skip_reason  {"text_a": "Hello.", "text_b": "Hallo.", ..., "skip": 0}
    -> kept_pairs        the examples whose skip is 0, without "skip"

`skip` is an index into SKIP_REASONS (0: kept). Differences from the Python
readers, none of which occurs in NTREX, Multi30k or the paper's OPUS data:
whitespace is stripped as ASCII (tf.strings.strip), and a line holding a
literal U+FFFD counts as invalid UTF-8 (the check is that decoding with
replacement changes nothing). `count_skips` is one pass of the same ops, so
a source's read = kept + skipped is exact.
"""

import functools
from typing import AbstractSet

import tensorflow as tf

from vmsst_tasks.sources import pair_readers

SKIP_REASONS = ("kept", "invalid_utf8", "no_tab", "extra_tab", "empty_side", "overlong",
                "tatoeba_overlap")
SKIP = {reason: i for i, reason in enumerate(SKIP_REASONS)}
TEXTS = ("text_a", "text_b")


@functools.lru_cache(maxsize=4)
def _exclusion_table(exclude: AbstractSet[str]) -> tf.lookup.StaticHashTable | None:
  """Sentence -> 1 for every excluded sentence (built once per set and process)."""
  if not exclude:
    return None
  return tf.lookup.StaticHashTable(
      tf.lookup.KeyValueTensorInitializer(tf.constant(sorted(exclude), tf.string),
                                          tf.ones([len(exclude)], tf.int32)),
      default_value=0)


def _clean(text: tf.Tensor) -> tf.Tensor:
  """CRLF's "\\r", U+FEFF and surrounding whitespace removed (tasks/sources/pair_readers.py's table)."""
  return tf.strings.strip(tf.strings.regex_replace(text, "\ufeff", ""))


def _valid_utf8(text: tf.Tensor) -> tf.Tensor:
  return tf.equal(tf.strings.unicode_transcode(text, "UTF-8", "UTF-8", errors="replace"), text)


def with_skip_reason(dataset: tf.data.Dataset, *, exclude: AbstractSet[str] = frozenset(),
                     policy: pair_readers.InputPolicy = pair_readers.DEFAULT_POLICY) -> tf.data.Dataset:
  """Strips both sides and sets "skip" (int32, index in SKIP_REASONS) of each pair.

  The first reason that applies wins, in the order of SKIP_REASONS; a "skip"
  the reader already set (no_tab, extra_tab of a TSV line) is kept unless the
  line is not UTF-8.
  """
  table = _exclusion_table(frozenset(exclude))

  def reason(example):
    out = dict(example)
    valid = tf.logical_and(*(_valid_utf8(example[k]) for k in TEXTS))
    for key in TEXTS:
      out[key] = _clean(example[key])
    chars = [tf.strings.length(out[k], unit="UTF8_CHAR") for k in TEXTS]
    empty = tf.logical_or(*(tf.equal(c, 0) for c in chars))
    overlong = tf.logical_or(*(c > policy.max_chars for c in chars))
    if table is None:
      excluded = tf.constant(False)
    else:
      excluded = tf.logical_or(*(table.lookup(out[k]) > 0 for k in TEXTS))
    preset = tf.cast(example.get("skip", 0), tf.int32)
    skip = tf.case([(tf.logical_not(valid), lambda: SKIP["invalid_utf8"]),
                    (preset > 0, lambda: preset),
                    (empty, lambda: SKIP["empty_side"]),
                    (overlong, lambda: SKIP["overlong"]),
                    (excluded, lambda: SKIP["tatoeba_overlap"])], default=lambda: 0)
    out["skip"] = tf.cast(skip, tf.int32)
    return out

  return dataset.map(reason, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)


def kept_pairs(dataset: tf.data.Dataset) -> tf.data.Dataset:
  """The examples of a `with_skip_reason` dataset that are kept, without "skip"."""
  return dataset.filter(lambda ex: tf.equal(ex["skip"], 0)).map(
      lambda ex: {k: v for k, v in ex.items() if k != "skip"})


def count_skips(dataset: tf.data.Dataset) -> pair_readers.PairCounts:
  """One pass over a `with_skip_reason` dataset: read = kept + skipped, by reason."""
  per_reason = dataset.map(lambda ex: tf.one_hot(ex["skip"], len(SKIP_REASONS), dtype=tf.int64))
  totals = per_reason.batch(4096).reduce(tf.zeros([len(SKIP_REASONS)], tf.int64),
                                         lambda acc, x: acc + tf.reduce_sum(x, axis=0)).numpy()
  counts = pair_readers.PairCounts(read=int(totals.sum()), kept=int(totals[0]))
  for name, n in zip(SKIP_REASONS[1:], totals[1:]):
    if n:
      counts.skipped[name] = int(n)
  return counts
