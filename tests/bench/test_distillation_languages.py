"""bench/distillation_languages.py: student vs teacher split by the teacher's languages."""

import importlib.util
import json
import pathlib

import pytest

from vmsst.evaluation import flores

ROOT = pathlib.Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location(
    "distillation_languages", ROOT / "bench" / "distillation_languages.py")
report = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(report)


def test_covered_languages_are_usem3s_sixteen_and_their_regional_variants_minus_english():
  covered = set(report.teacher_languages())
  assert len(covered) == 15 + 3 and "eng" not in covered
  assert {"arb", "zho-CN", "zho-TW", "por-BR", "fra-CA", "spa-MX"} <= covered
  groups = report.split_codes(["deu", "zho_Hant", "swh_Latn", "ace_Arab", "por-BR"],
                              flores.canonical)
  assert groups == {"covered": ["deu", "zho_Hant", "por-BR"],
                    "not_covered": ["swh_Latn", "ace_Arab"]}  # unknown codes are not covered


def test_goals_within_ten_points_on_covered_and_ahead_elsewhere_either_metric_direction():
  student = {"deu": {"avg": 80.0}, "fra": {"avg": 60.0}, "swh": {"avg": 30.0}}
  teacher = {"deu": {"avg": 95.0}, "fra": {"avg": 65.0}, "swh": {"avg": 10.0}}
  groups = {"covered": ["deu", "fra"], "not_covered": ["swh"], "empty": []}
  accuracy = report.compare_groups(student, teacher, groups, "avg", higher_is_better=True)
  assert accuracy == {
      "covered": {"languages": 2, "student": 70.0, "teacher": 80.0, "student_margin": -10.0,
                  "goal_met": True},
      "not_covered": {"languages": 1, "student": 30.0, "teacher": 10.0, "student_margin": 20.0,
                      "goal_met": True}}
  error = report.compare_groups(student, teacher, groups, "avg", higher_is_better=False)
  assert error["covered"]["student_margin"] == pytest.approx(10.0)  # a lower error is better
  assert error["not_covered"] == {"languages": 1, "student": 30.0, "teacher": 10.0,
                                  "student_margin": -20.0, "goal_met": False}


def test_speed_times_every_encoder_on_the_same_sentences():
  seen = {}

  class Counting:
    def __init__(self, name):
      self.name = name

    def encode(self, batch):
      seen.setdefault(self.name, []).extend(batch)

  sentences = [f"s{i}" for i in range(600)]
  rates = report.speed({"a": Counting("a"), "b": Counting("b")}, sentences, rounds=2)
  assert set(rates) == {"a", "b"} and all(r > 0 for r in rates.values())
  assert seen["a"] == seen["b"] == sentences * 2


def _earlier_results(tmp_path, **extra):
  path = tmp_path / "results.json"
  path.write_text(json.dumps({
      "date_utc": "2026-11-25 00:59", "command": "python bench/distillation_languages.py x",
      "tatoeba": {"per_language": {"deu": {"student": 6.6, "teacher": 97.8},
                                   "afr": {"student": 5.2, "teacher": 56.8}}},
      **extra}))
  return path


def test_recorded_teacher_reuses_the_earlier_figures_for_the_same_languages(tmp_path):
  path = _earlier_results(tmp_path)
  assert report.recorded_teacher(path, "tatoeba", ["afr", "deu"]) == {
      "afr": {"avg": 56.8}, "deu": {"avg": 97.8}}
  assert report.teacher_provenance(path) == {
      "date_utc": "2026-11-25 00:59", "command": "python bench/distillation_languages.py x"}
  chained = _earlier_results(tmp_path, teacher_measured={"date_utc": "first", "command": "c"})
  assert report.teacher_provenance(chained) == {"date_utc": "first", "command": "c"}


def test_recorded_teacher_refuses_a_different_language_set(tmp_path):
  path = _earlier_results(tmp_path)
  with pytest.raises(ValueError, match=r"missing \['fra'\], extra \['afr'\]"):
    report.recorded_teacher(path, "tatoeba", ["deu", "fra"])
