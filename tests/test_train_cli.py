"""`python -m vmsst.train`'s command line: gin parsing and user errors, in-process and fast."""

import pytest

import vmsst.training.loop
from vmsst.base.gin_utils import gin
from vmsst.training import preflight
import vmsst_testing
from vmsst.base import cli
from vmsst.training import configurables

RUN_FILE = str(vmsst_testing.ROOT / "gin/runs/vmsst_cpu.gin")


@pytest.fixture(autouse=True)
def _clean_gin():
  gin.clear_config()
  yield
  gin.clear_config()


def test_a_bound_macro_nothing_reads_names_the_closest_macro(tmp_path):
  with pytest.raises(cli.UserError,
                     match=r"^TRAIN_STEP\b.*\bTRAIN_STEPS\b"):  # the typo and the macro meant
    configurables.parse_gin([RUN_FILE], [f"MODEL_DIR = '{tmp_path}'", "TRAIN_STEP = 3"],
                        [str(vmsst_testing.ROOT)])
  assert not (tmp_path / "config.gin").exists()


def test_bound_macros_that_are_read_parse():
  configurables.parse_gin([RUN_FILE], ["TRAIN_STEPS = 3", "VMSST.kl_anneal_steps = 7"],
                      [str(vmsst_testing.ROOT)])
  assert gin.query_parameter("TRAIN_STEPS/macro.value") == 3


def test_a_run_file_parses_from_any_directory(tmp_path, monkeypatch):
  monkeypatch.chdir(tmp_path)
  configurables.parse_gin(["gin/runs/vmsst_cpu.gin"], [])  # no --gin_search_path
  assert gin.query_parameter("%TRAIN_STEPS") == 1600


def test_a_missing_gin_file_names_it_and_the_flag_to_pass(tmp_path, monkeypatch):
  monkeypatch.chdir(tmp_path)
  with pytest.raises(cli.UserError, match=r"gin/runs/nope\.gin.*--gin_search_path"):
    configurables.parse_gin(["gin/runs/nope.gin"], [])


def test_an_unquoted_string_binding_shows_the_quoting():
  with pytest.raises(cli.UserError) as error:
    configurables.parse_gin([RUN_FILE], ["MODEL_DIR = /tmp/x"])
  assert "--gin.MODEL_DIR=/tmp/x" in str(error.value)  # the binding at fault
  assert "--gin.MODEL_DIR=\"'/tmp/x'\"" in str(error.value)  # and the binding that works


def test_a_missing_data_dir_names_the_macro_and_the_working_directory(tmp_path, monkeypatch):
  monkeypatch.chdir(tmp_path)
  configurables.parse_gin(["gin/runs/vmsst_cpu.gin"], [])
  with pytest.raises(cli.UserError, match=r"^DATA_DIR\b.*\.\./shared/data.*working directory"):
    preflight.check_paths()
