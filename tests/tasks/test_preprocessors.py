"""Data-in/data-out tests of tasks/registry/preprocessors.py with the tiny real vocabulary."""

import numpy as np
import pytest
import seqio
import tensorflow as tf

from vmsst_tasks.registry import preprocessors
from vmsst_tasks.registry import common
from vmsst.base import languages
from vmsst.base import sentencepiece_vocabulary


@pytest.fixture(scope="module")
def vocab(tiny_vocab_path):
  return sentencepiece_vocabulary.get_vocabulary(tiny_vocab_path)


@pytest.fixture(scope="module")
def features(vocab):
  return common.output_features(vocab)


def dataset(*examples):
  return tf.data.Dataset.from_tensor_slices({k: [ex[k] for ex in examples] for k in examples[0]})


def as_list(ds):
  return [{k: v.tolist() if isinstance(v, np.ndarray) else v for k, v in ex.items()}
          for ex in ds.as_numpy_iterator()]


RAW = {"text_a": "Two dogs.", "text_b": "Zwei Hunde.", "lang_a": "eng", "lang_b": "deu"}


def test_rekey_pair():
  (out,) = as_list(preprocessors.rekey_pair(dataset(RAW)))
  assert out == {"tokens_a": b"Two dogs.", "tokens_b": b"Zwei Hunde.", "lang_a": b"eng", "lang_b": b"deu"}


def test_tokenize_pair_tokenizes_only_the_sentences(vocab, features):
  ds = preprocessors.tokenize_pair(preprocessors.rekey_pair(dataset(RAW)), features)
  (out,) = as_list(ds)
  assert out == {"tokens_a": vocab.tokenizer.encode("Two dogs."),  # No EOS, no language symbol inside.
                 "tokens_b": vocab.tokenizer.encode("Zwei Hunde."),
                 "lang_a": b"eng", "lang_b": b"deu"}
  assert vocab.decode(out["tokens_b"]) == "Zwei Hunde."


def test_language_ids():
  ds = dataset({"tokens_a": "x", "tokens_b": "y", "lang_a": "eng", "lang_b": "zho-CN"})
  (out,) = as_list(preprocessors.language_ids(ds))
  assert out["lang_a"] == languages.LANGUAGES.index("eng") == languages.language_index("en") == 49
  assert out["lang_b"] == languages.LANGUAGES.index("zho-CN")
  assert out["tokens_a"] == b"x"  # Untouched.


def test_language_ids_rejects_non_canonical_codes():
  ds = dataset({"tokens_a": "x", "tokens_b": "y", "lang_a": "en", "lang_b": "deu"})  # "en" is not canonical.
  with pytest.raises(tf.errors.InvalidArgumentError,
                     match="lang_a: language code is not in vmsst.base.languages.LANGUAGES"):
    as_list(preprocessors.language_ids(ds))


def test_full_pipeline_trims_then_appends_eos(vocab, features):
  ds = dataset(RAW)
  for step in preprocessors.PAIR_PREPROCESSORS:  # As seqio.Task runs them.
    if isinstance(step, seqio.CacheDatasetPlaceholder):  # where a cache is read instead
      continue
    ds = seqio.add_kwargs_to_transform(step, sequence_length={"tokens_a": 3, "tokens_b": 64},
                                       output_features=features)(ds)
  (out,) = as_list(ds)
  assert out["tokens_a"] == vocab.tokenizer.encode("Two dogs.")[:2] + [1]  # Trimmed to 3 with EOS.
  assert out["tokens_b"] == vocab.tokenizer.encode("Zwei Hunde.") + [1]
  assert (out["lang_a"], out["lang_b"]) == (languages.language_index("eng"),
                                            languages.language_index("deu"))
  spec = ds.element_spec
  assert spec["lang_a"].dtype == tf.int32 and spec["lang_a"].shape.rank == 0
  assert spec["tokens_a"].dtype == tf.int32 and spec["tokens_a"].shape.rank == 1
