"""`python -m vmsst.train`'s command line: gin parsing and user errors, in-process and fast."""

import gin
import pytest

import vmsst.train
import vmsst_testing
from vmsst import cli

RUN_FILE = str(vmsst_testing.ROOT / "gin/runs/vmsst_cpu.gin")


@pytest.fixture(autouse=True)
def _clean_gin():
  gin.clear_config()
  yield
  gin.clear_config()


def test_a_bound_macro_nothing_reads_names_the_closest_macro(tmp_path):
  with pytest.raises(cli.UserError,
                     match=r"^TRAIN_STEP is bound but never read; did you mean TRAIN_STEPS\?$"):
    vmsst.train.parse_gin([RUN_FILE], [f"MODEL_DIR = '{tmp_path}'", "TRAIN_STEP = 3"],
                          [str(vmsst_testing.ROOT)])
  assert not (tmp_path / "config.gin").exists()


def test_bound_macros_that_are_read_parse():
  vmsst.train.parse_gin([RUN_FILE], ["TRAIN_STEPS = 3", "VMSST.kl_anneal_steps = 7"],
                        [str(vmsst_testing.ROOT)])
  assert gin.query_parameter("TRAIN_STEPS/macro.value") == 3
