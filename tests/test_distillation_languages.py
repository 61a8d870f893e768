"""bench/distillation_languages.py: student vs teacher split by the teacher's languages."""

import importlib.util
import pathlib

import pytest

from vmsst.evaluation import flores

ROOT = pathlib.Path(__file__).resolve().parents[1]
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
