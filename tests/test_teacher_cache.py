"""The on-disk teacher cache, filled by a real (table) encoder: reuse, order, layout, errors."""

import hashlib
import json

import numpy as np
import pytest

from vmsst import teacher_cache
from vmsst.evaluation import encoders

TABLE = {"a cat": [1.0, 0.0], "a dog": [0.0, 1.0], "two birds": [0.5, 0.5],
         "rain": [2.0, -1.0]}


class CountingTeacher(encoders.PrecomputedEncoder):
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
