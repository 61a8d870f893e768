"""The on-disk teacher cache, filled by a real (table) encoder: reuse, order, layout, errors;
the teacher stage (fill_stage) and its command, python -m vmsst.teacher_cache."""

import hashlib
import json

import numpy as np
import pytest

import vmsst_testing
from vmsst.base.gin_utils import gin
from vmsst.teachers import cache as teacher_cache
from vmsst.encoding import protocol

TABLE = {"a cat": [1.0, 0.0], "a dog": [0.0, 1.0], "two birds": [0.5, 0.5],
         "rain": [2.0, -1.0]}


class CountingTeacher(protocol.PrecomputedEncoder):
  """The table encoder, remembering which sentences it was asked for."""

  def __init__(self, table=TABLE, name="table"):
    super().__init__(table, name)
    self.asked = []

  def encode(self, sentences):
    self.asked += list(sentences)
    return super().encode(sentences)


def test_fill_encodes_each_distinct_sentence_once_and_lookup_keeps_the_order(tmp_path):
  teacher = CountingTeacher()
  cache = teacher_cache.TeacherCache(str(tmp_path), teacher, batch_size=1)
  report = cache.fill(["a cat", "a dog", "a cat"])
  assert (report.requested, report.cached, report.encoded) == (2, 0, 2)
  report = cache.fill(["a dog", "rain"])
  assert (report.requested, report.cached, report.encoded) == (2, 1, 1)
  assert sorted(teacher.asked) == ["a cat", "a dog", "rain"]
  np.testing.assert_array_equal(cache.lookup(["rain", "a cat", "rain"]),
                                [TABLE["rain"], TABLE["a cat"], TABLE["rain"]])
  assert len(cache) == 3 and "two birds" not in cache


def test_a_new_instance_reads_the_shards_without_the_teacher(tmp_path):
  teacher_cache.TeacherCache(str(tmp_path), CountingTeacher()).fill(["a cat"])
  teacher_cache.TeacherCache(str(tmp_path), CountingTeacher()).fill(["a dog", "a cat"])
  manifest = json.loads((tmp_path / "manifest.json").read_text())
  assert (manifest["teacher"], manifest["dim"], manifest["shards"]) == ("table", 2,
                                                                       ["00000", "00001"])
  unused = CountingTeacher()
  reread = teacher_cache.TeacherCache(str(tmp_path), unused)
  np.testing.assert_array_equal(reread.lookup(["a dog", "a cat"]), [[0, 1], [1, 0]])
  assert unused.asked == []


def test_keys_are_blake2b_128_of_the_utf8_sentence():
  sentence = "Ein Hund läuft."
  assert teacher_cache.sentence_key(sentence) == hashlib.blake2b(
      sentence.encode("utf-8"), digest_size=16).digest()


def test_a_missing_sentence_says_to_fill_first(tmp_path):
  cache = teacher_cache.TeacherCache(str(tmp_path), CountingTeacher())
  cache.fill(["a cat"])
  with pytest.raises(KeyError, match=r"1 sentences are not in the teacher cache.*'rain'.*fill"):
    cache.lookup(["a cat", "rain"])


def test_another_teacher_or_width_is_refused_with_the_fix(tmp_path):
  teacher_cache.TeacherCache(str(tmp_path), CountingTeacher()).fill(["a cat"])
  with pytest.raises(ValueError, match="give each teacher its own cache directory"):
    teacher_cache.TeacherCache(str(tmp_path), CountingTeacher(name="other"))
  wide = CountingTeacher({"a dog": [1.0, 2.0, 3.0]})
  with pytest.raises(ValueError, match=r"width 3 but the cache .* holds width 2; delete"):
    teacher_cache.TeacherCache(str(tmp_path), wide).fill(["a dog"])


def test_shards_without_a_manifest_are_an_unfinished_cache(tmp_path):
  np.save(tmp_path / "keys-00000.npy", np.zeros((1, 16), np.uint8))
  with pytest.raises(ValueError, match=r"1 \.npy files but no manifest\.json.*delete"):
    teacher_cache.TeacherCache(str(tmp_path), CountingTeacher())


def test_lookup_rereads_a_directory_another_instance_filled(tmp_path):
  stale = teacher_cache.TeacherCache(str(tmp_path), CountingTeacher())
  teacher_cache.TeacherCache(str(tmp_path), CountingTeacher()).fill(["rain"])
  np.testing.assert_array_equal(stale.lookup(["rain"]), [TABLE["rain"]])
  with pytest.raises(KeyError, match=r"python -m vmsst\.teacher_cache --gin_file="):
    stale.lookup(["a cat"])


# ------------------------------------------------- the teacher stage (fill_stage)


class _Registration:
  """register_tasks' contract with the teacher cache, on a fresh cache per call as gin builds.

  Reads only: raises MissingTeacherVectors for what the cache lacks, else
  returns the names it would register.
  """

  def __init__(self, directory, sentences):
    self.directory, self.sentences, self.calls = directory, sentences, 0

  def __call__(self):
    from vmsst_tasks.registry import distillation  # pylint: disable=import-outside-toplevel
    self.calls += 1
    cache = teacher_cache.TeacherCache(self.directory, CountingTeacher())
    distillation.check_teacher_vectors(cache, self.sentences)
    cache.lookup(self.sentences)
    return ["vmsst_distill_x"]


class _HeldOut:
  """An evaluator that reads teacher vectors (as DistillationEvaluator)."""

  def __init__(self, cache, sentences):
    self.teacher_cache, self.teacher_sentences = cache, sentences


def test_fill_stage_encodes_what_the_run_lacks_in_one_fill_then_registers(tmp_path, caplog):
  teacher = CountingTeacher()
  evaluator = _HeldOut(teacher_cache.TeacherCache(str(tmp_path), teacher), ["rain", "a cat"])
  registration = _Registration(str(tmp_path), ["a cat", "a dog"])
  with caplog.at_level("INFO", logger="absl"):
    names, reports = teacher_cache.fill_stage(registration, [evaluator, object()])
  assert names == ["vmsst_distill_x"] and registration.calls == 2  # lacking, then filled
  assert sorted(teacher.asked) == ["a cat", "a dog", "rain"]  # the union, each once
  ((directory, report),) = reports.items()
  assert directory == str(tmp_path) and (report.requested, report.encoded) == (3, 3)
  assert "filling the teacher cache" in caplog.text and "3 sentences of the run" in caplog.text
  np.testing.assert_array_equal(evaluator.teacher_cache.lookup(["rain"]), [TABLE["rain"]])

  again = CountingTeacher()  # a filled cache: registration once, the teacher never called
  registration.calls = 0
  names, reports = teacher_cache.fill_stage(
      registration, [_HeldOut(teacher_cache.TeacherCache(str(tmp_path), again), ["rain"])])
  assert names == ["vmsst_distill_x"] and registration.calls == 1 and again.asked == []
  assert reports[str(tmp_path)].encoded == 0


def test_fill_stage_of_a_run_without_a_teacher_only_registers():
  assert teacher_cache.fill_stage(lambda: ["vmsst_ntrex128"], [object()]) == (
      ["vmsst_ntrex128"], {})
  assert teacher_cache.fill_stage(None) == ([], {})


# ---------------------------------------------- python -m vmsst.teacher_cache


class CharacterTeacher:
  """Embeds a sentence as (length, spaces, vowels); counts every sentence it encodes."""

  name = "characters"
  encoded = 0

  def encode(self, sentences):
    CharacterTeacher.encoded += len(sentences)
    return np.array([[len(s), s.count(" "), sum(s.count(v) for v in "aeiou")]
                     for s in sentences], np.float32)


gin.external_configurable(CharacterTeacher, module="tests.test_teacher_cache")


@pytest.fixture
def _clean_gin():
  yield
  gin.clear_config()


def test_command_fills_what_the_run_reads_and_train_would_encode_nothing(
    data_dir, tiny_vocab_path, tmp_path, _clean_gin):
  from vmsst import teacher_cache as command  # pylint: disable=import-outside-toplevel
  from vmsst_tasks.sources import heldout  # pylint: disable=import-outside-toplevel
  from vmsst_tasks.registry import distillation  # pylint: disable=import-outside-toplevel
  cache_dir = tmp_path / "cache"
  bindings = vmsst_testing.small_run_bindings(data_dir, tiny_vocab_path, tmp_path / "run", 1, [
      f"TEACHER_CACHE_DIR = '{cache_dir}'", "TeacherCache.teacher = @CharacterTeacher()",
      "distillation_tasks.max_sources = 3", "retrieval_sets.max_pairs = 4"])
  run = [str(vmsst_testing.ROOT / "gin/runs/distillation_cpu.gin")]
  CharacterTeacher.encoded = 0
  reports = command.fill_run(run, bindings)
  sources = distillation.distillation_sources(str(data_dir), max_sources=3)
  held_out = {s for src, _ in heldout.retrieval_sets(str(data_dir), max_pairs=4).values()
              for s in src}
  want = set(sources) | held_out
  assert list(reports) == [str(cache_dir)]  # registration's and the evaluator's: one cache
  assert reports[str(cache_dir)].encoded == len(want) == CharacterTeacher.encoded
  cache = teacher_cache.TeacherCache(str(cache_dir), CharacterTeacher())
  assert len(cache) == len(want) and all(s in cache for s in want)

  gin.clear_config()
  assert command.fill_run(run, bindings)[str(cache_dir)].encoded == 0
  assert CharacterTeacher.encoded == len(want)  # the second run never called the teacher


def test_command_refuses_a_run_without_a_teacher(data_dir, tiny_vocab_path, tmp_path,
                                                 _clean_gin):
  from vmsst.base import cli  # pylint: disable=import-outside-toplevel
  from vmsst import teacher_cache as command  # pylint: disable=import-outside-toplevel
  bindings = vmsst_testing.small_run_bindings(data_dir, tiny_vocab_path, tmp_path, 1)
  with pytest.raises(cli.UserError, match="reads no teacher cache"):
    command.fill_run([str(vmsst_testing.ROOT / "gin/runs/vmsst_cpu.gin")], bindings)
