"""The suite table: names and groups, where each suite's data is found, what a miss says."""

import pathlib

import pytest

from vmsst.evaluation import suites


def test_every_suite_has_a_runner_a_table_and_a_title():
  for name, suite in suites.SUITES.items():
    assert callable(suite.run) and callable(suite.table), name
    assert suite.title, name


def test_a_group_expands_and_a_list_keeps_its_order():
  assert suites.parse_suites("all") == (list(suites.SUITES), True)
  assert suites.parse_suites(" tatoeba, stsb ,") == (["tatoeba", "stsb"], False)
  assert set(suites.GROUPS["score"]) <= set(suites.SUITES)


def test_an_unknown_suite_names_the_choices():
  with pytest.raises(ValueError, match=r"unknown suite\(s\) \['tatoba'\]; choose from .*tatoeba"):
    suites.parse_suites("tatoeba,tatoba")


def test_locate_takes_the_first_data_dir_and_the_first_folder_alias(tmp_path):
  first, second = tmp_path / "first", tmp_path / "second"
  (second / "sts17").mkdir(parents=True)
  (second / "STS2017.eval.v1.1").mkdir()
  (first / "STS2017.eval.v1.1").mkdir(parents=True)
  # The first data dir wins even with the second alias; within a dir, the first alias.
  assert suites.locate("sts17", [first, second]) == first / "STS2017.eval.v1.1"
  assert suites.locate("sts17", [second, first]) == second / "sts17"
  assert suites.locate("stsb", [first, second]) is None


def test_parallel_is_located_by_its_two_files_not_a_folder(tmp_path):
  assert suites.locate("parallel", [tmp_path]) is None
  only_src = suites.SuiteOptions(src="a.txt")
  assert suites.locate("parallel", [tmp_path], only_src) is None
  both = suites.SuiteOptions(src="a.txt", trg="b.txt")
  assert suites.locate("parallel", [tmp_path], both) == pathlib.Path("a.txt")


def test_a_miss_names_every_path_searched_and_the_fix(tmp_path):
  message = suites.missing_message("bucc", [tmp_path / "x", tmp_path / "y"])
  assert str(tmp_path / "x" / "bucc2018") in message and str(tmp_path / "y" / "bucc2018") in message
  assert "python -m vmsst.build_bucc" in message
  shipped = suites.missing_message("tatoeba", [tmp_path])
  assert "pass their root with --data_dir" in shipped
  assert "--src=a.txt --trg=b.txt" in suites.missing_message("parallel", [tmp_path])


def test_every_builder_named_in_a_fix_is_a_module(tmp_path):
  """The commands a miss tells the user to run exist (python -m <module>)."""
  import importlib.util  # pylint: disable=import-outside-toplevel
  import re  # pylint: disable=import-outside-toplevel
  for name in suites.SUITES:
    for module in re.findall(r"python -m ([\w.]+)", suites.missing_message(name, [tmp_path])):
      assert importlib.util.find_spec(module) is not None, (name, module)
