"""vmsst.cli: a user error is one `error:` line on stderr and exit 2."""

import logging
import os

import pytest

from vmsst import cli


def test_a_user_error_is_one_line_and_exit_2(capsys):
  def main(argv):
    raise cli.UserError(f"--input={argv[1]} does not exist; give a text file.")

  with pytest.raises(SystemExit) as exit_info:
    cli.user_errors(main)(["prog", "x.txt"])
  assert exit_info.value.code == 2
  assert capsys.readouterr().err == "error: --input=x.txt does not exist; give a text file.\n"


def test_other_exceptions_are_bugs_and_keep_their_traceback():
  def main(argv):
    raise KeyError(argv[0])

  with pytest.raises(KeyError):
    cli.user_errors(main)(["prog"])


def test_ctrl_c_outside_training_is_one_line_and_exit_130(capsys):
  def main(argv):
    raise KeyboardInterrupt

  with pytest.raises(SystemExit) as exit_info:
    cli.user_errors(main)(["prog"])
  assert exit_info.value.code == 130
  assert capsys.readouterr().err == "interrupted (Ctrl-C)\n"


def test_quiet_startup_picks_the_cpu_only_without_an_accelerator(monkeypatch, tmp_path):
  for name in ("JAX_PLATFORMS", "TF_CPP_MIN_LOG_LEVEL"):
    monkeypatch.delenv(name, raising=False)
  (tmp_path / "nvidia0").touch()
  monkeypatch.setattr(cli, "_ACCELERATOR_DEVICES", (str(tmp_path / "nvidia[0-9]*"),))
  cli.quiet_startup()  # a GPU machine: every backend and C++ log line kept
  assert "JAX_PLATFORMS" not in os.environ and "TF_CPP_MIN_LOG_LEVEL" not in os.environ
  monkeypatch.setattr(cli, "_ACCELERATOR_DEVICES", (str(tmp_path / "accel[0-9]*"),))
  monkeypatch.setenv("TF_CPP_MIN_LOG_LEVEL", "1")
  cli.quiet_startup()
  assert os.environ["JAX_PLATFORMS"] == "cpu"
  assert os.environ["TF_CPP_MIN_LOG_LEVEL"] == "1"  # the user's setting wins


def _record(pathname: str, level: int, msg: str) -> logging.LogRecord:
  return logging.LogRecord("absl", level, pathname, 1, msg, (), None)


def test_quiet_logs_drops_orbax_info_and_seqios_uncached_warning_only():
  chatter = cli._Chatter()  # pylint: disable=protected-access
  orbax = "/venv/site-packages/orbax/checkpoint/checkpoint_manager.py"
  seqio = ("Using an uncached FunctionDataset for training is not recommended since it often "
           "results in insufficient shuffling on restarts, resulting in overfitting.")
  assert not chatter.filter(_record(orbax, logging.INFO, "Saving checkpoint"))
  assert chatter.filter(_record(orbax, logging.WARNING, "could not save"))
  assert not chatter.filter(_record("/seqio/dataset_providers.py", logging.WARNING, seqio))
  assert chatter.filter(_record("/vmsst/tasks/sources.py", logging.INFO, "read=3 kept=3"))
