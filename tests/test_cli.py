"""vmsst.cli: a user error is one `error:` line on stderr and exit 2."""

import logging
import os
import subprocess
import sys

import pytest
from absl import logging as absl_logging

import vmsst_testing
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


def test_quiet_logs_also_drops_tensorflow_info_and_orbaxs_metadata_warning_unless_debug():
  chatter = cli._Chatter()  # pylint: disable=protected-access
  saver = "/venv/site-packages/tensorflow/python/saved_model/builder_impl.py"
  metadata = "/venv/site-packages/orbax/checkpoint/_src/metadata/checkpoint.py"
  assert not chatter.filter(_record(saver, logging.INFO, "Assets written to: %s"))
  assert chatter.filter(_record(saver, logging.WARNING, "Skipping full serialization"))
  assert not chatter.filter(_record(metadata, logging.WARNING, "Metadata file does not exist: %s"))
  previous = absl_logging.get_verbosity()
  absl_logging.set_verbosity(absl_logging.DEBUG)  # --verbosity=1 keeps everything
  try:
    assert chatter.filter(_record(saver, logging.INFO, "Assets written to: %s"))
  finally:
    absl_logging.set_verbosity(previous)


def test_quiet_logs_is_installed_once():
  cli.quiet_logs()
  cli.quiet_logs()
  for target in (absl_logging.get_absl_handler(), logging.getLogger("tensorflow")):
    assert sum(isinstance(f, cli._Chatter) for f in target.filters) == 1  # pylint: disable=protected-access


# What a CPU-only start printed before the commands were quieted (issue 17 item 8).
_CHATTER = ("cuInit", "Unable to initialize backend", "checkpoint_manager.py",
            "Metadata file does not exist", "orbax-checkpoint version", "Assets written to",
            "fingerprint")


def _command(*args: str, env_extra=()) -> subprocess.CompletedProcess:
  env = {k: v for k, v in os.environ.items() if k not in ("JAX_PLATFORMS", "TF_CPP_MIN_LOG_LEVEL")}
  env.update(env_extra)
  return subprocess.run([sys.executable, "-m", *args], cwd=vmsst_testing.ROOT, env=env,
                        capture_output=True, text=True, timeout=600, check=False)


@pytest.mark.slow
def test_commands_are_quiet_by_default_and_verbose_with_verbosity_1(tiny_model, tmp_path):
  model_dir, _ = tiny_model
  (tmp_path / "in.txt").write_text("A man rides a bicycle.\nHallo.\n")
  embed = ("vmsst.embed", f"--model_dir={model_dir}", f"--input={tmp_path / 'in.txt'}",
           f"--output={tmp_path / 'out.npy'}")
  for args in (embed, ("vmsst.export", f"--model_dir={model_dir}",
                       f"--output={tmp_path / 'export'}")):
    done = _command(*args)
    assert done.returncode == 0, done.stderr[-3000:]
    assert not [line for line in done.stderr.splitlines()
                if any(noise in line for noise in _CHATTER)], done.stderr[-3000:]
  assert "2 lines -> float32 [2," in _command(*embed).stdout  # the summary stays
  verbose = _command(*embed, "--verbosity=1")
  assert verbose.returncode == 0 and "checkpoint_manager.py" in verbose.stderr
