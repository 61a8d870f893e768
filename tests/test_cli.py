"""vmsst.base.cli: a user error is one `error:` line on stderr and exit 2."""

import importlib
import importlib.util
import logging
import os
import subprocess
import sys

import pytest
from absl import logging as absl_logging

import vmsst_testing
from vmsst.base import cli
from vmsst.base import console


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
  monkeypatch.setattr(console, "_ACCELERATOR_DEVICES", (str(tmp_path / "nvidia[0-9]*"),))
  console.quiet_startup()  # a GPU machine: every backend and C++ log line kept
  assert "JAX_PLATFORMS" not in os.environ and "TF_CPP_MIN_LOG_LEVEL" not in os.environ
  monkeypatch.setattr(console, "_ACCELERATOR_DEVICES", (str(tmp_path / "accel[0-9]*"),))
  monkeypatch.setenv("TF_CPP_MIN_LOG_LEVEL", "1")
  console.quiet_startup()
  assert os.environ["JAX_PLATFORMS"] == "cpu"
  assert os.environ["TF_CPP_MIN_LOG_LEVEL"] == "1"  # the user's setting wins


def _record(pathname: str, level: int, msg: str) -> logging.LogRecord:
  return logging.LogRecord("absl", level, pathname, 1, msg, (), None)


def test_quiet_logs_drops_orbax_info_and_seqios_uncached_warning_only():
  chatter = console._Chatter()  # pylint: disable=protected-access
  orbax = "/venv/site-packages/orbax/checkpoint/checkpoint_manager.py"
  seqio = ("Using an uncached FunctionDataset for training is not recommended since it often "
           "results in insufficient shuffling on restarts, resulting in overfitting.")
  assert not chatter.filter(_record(orbax, logging.INFO, "Saving checkpoint"))
  assert chatter.filter(_record(orbax, logging.WARNING, "could not save"))
  assert not chatter.filter(_record("/seqio/dataset_providers.py", logging.WARNING, seqio))
  assert chatter.filter(_record("/vmsst/tasks/sources/pair_readers.py", logging.INFO, "read=3 kept=3"))


def test_quiet_logs_also_drops_tensorflow_info_and_orbaxs_metadata_warning_unless_debug():
  chatter = console._Chatter()  # pylint: disable=protected-access
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
  console.quiet_logs()
  console.quiet_logs()
  for target in (absl_logging.get_absl_handler(), logging.getLogger("tensorflow")):
    assert sum(isinstance(f, console._Chatter) for f in target.filters) == 1  # pylint: disable=protected-access


# What a CPU-only start printed before the commands were quieted (issue 17 item 8).
_CHATTER = ("cuInit", "Unable to initialize backend", "checkpoint_manager.py",
            "Metadata file does not exist", "orbax-checkpoint version", "Assets written to",
            "fingerprint", "oneDNN", "cudart_stub", "absl::InitializeLog", "faiss",
            "Loading faiss", "ModuleNotFoundError")


def _noise(stderr: str) -> list[str]:
  return [line for line in stderr.splitlines() if any(noise in line for noise in _CHATTER)]


def _clean_env() -> dict[str, str]:
  """This environment less what quiet_startup sets (the test process may have set them)."""
  return {k: v for k, v in os.environ.items() if k not in ("JAX_PLATFORMS", "TF_CPP_MIN_LOG_LEVEL")}


def _command(*args: str, env_extra=()) -> subprocess.CompletedProcess:
  env = _clean_env()
  env.update(env_extra)
  return subprocess.run([sys.executable, "-m", *args], cwd=vmsst_testing.ROOT, env=env,
                        capture_output=True, text=True, timeout=600, check=False)


@pytest.mark.slow
def test_commands_are_quiet_by_default_and_verbose_with_verbosity_1(tiny_model, tmp_path):
  model_dir, _ = tiny_model
  (tmp_path / "in.txt").write_text("A man rides a bicycle.\nHallo.\n")
  embed = ("vmsst.embed", f"--model_dir={model_dir}", f"--input={tmp_path / 'in.txt'}",
           f"--output={tmp_path / 'out.npy'}")
  ended = [_command(*args) for args in (embed, ("vmsst.export", f"--model_dir={model_dir}",
                                                  f"--output={tmp_path / 'export'}"))]
  for done in ended:
    assert done.returncode == 0, done.stderr[-3000:]
    assert not _noise(done.stderr), done.stderr[-3000:]
    assert "\r" not in done.stderr  # stderr is a pipe here: no progress-bar frames in a log
  assert "2 lines -> float32 [2," in ended[0].stdout  # the summary stays
  lines = [f"Sentence number {i} of the corpus." for i in range(400)]
  for side in "ab":
    (tmp_path / f"{side}.txt").write_text("\n".join(lines) + "\n")
  mine = _command("vmsst.mine", f"--model_dir={model_dir}", f"--src={tmp_path / 'a.txt'}",
                  f"--trg={tmp_path / 'b.txt'}", f"--output={tmp_path / 'pairs.tsv'}",
                  "--index=ivf")
  assert mine.returncode == 0 and not _noise(mine.stderr), mine.stderr[-3000:]
  verbose = _command(*embed, "--verbosity=1")
  assert verbose.returncode == 0 and "checkpoint_manager.py" in verbose.stderr


@pytest.mark.slow  # restores a trained model in a fresh Python
def test_the_python_api_is_as_quiet_as_the_commands_and_warns_truncation_once(tiny_model):
  model_dir, _ = tiny_model
  script = (f"import vmsst\ne = vmsst.Encoder.from_checkpoint({str(model_dir)!r})\n"
            "long = ' '.join(['word'] * 200)\n"
            "e.encode([long, 'a']); e.encode([long + ' b'])\nprint('encoded')\n")
  env = _clean_env()
  done = subprocess.run([sys.executable, "-c", script], cwd=vmsst_testing.ROOT, env=env,
                        capture_output=True, text=True, timeout=600, check=False)
  assert done.returncode == 0 and done.stdout == "encoded\n", done.stderr[-3000:]
  assert not _noise(done.stderr), done.stderr[-3000:]
  warnings = [line for line in done.stderr.splitlines() if "were cut" in line]
  assert len(warnings) == 1 and "max_seq_length=" in warnings[0], done.stderr[-3000:]


def test_quiet_logs_drops_faiss_loader_lines():
  chatter = console._Chatter()  # pylint: disable=protected-access
  loader = "/venv/site-packages/faiss/loader.py"
  assert not chatter.filter(_record(loader, logging.INFO, "Loading faiss with AVX512 support."))
  assert chatter.filter(_record(loader, logging.WARNING, "something a user acts on"))


def test_a_command_logging_to_a_file_hides_progress_bars_the_terminal_keeps_them(tmp_path):
  script = ("from vmsst.base import cli, console\n"
            "cli.run(lambda argv: print(console.hide_progress()))\n")
  with open(tmp_path / "log", "w") as log:
    done = subprocess.run([sys.executable, "-c", script], stderr=log, stdout=subprocess.PIPE,
                          text=True, timeout=120, check=True)
  assert done.stdout == "True\n"
  assert not console.hide_progress()  # in-process (the Python API): bars as asked


def test_tensorflow_imports_muted_under_quiet_startup():
  script = ("import os\nfrom vmsst.base import console\nconsole.quiet_startup()\nimport tensorflow\n"
            "print(tensorflow.constant(2).numpy())\n")
  env = _clean_env()
  done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True,
                        timeout=300, check=False)
  assert (done.returncode, done.stdout, done.stderr) == (0, "2\n", "")


def test_a_muted_import_survives_a_find_spec_probe_and_mutes_the_import(tmp_path, monkeypatch,
                                                                         capfd):
  # etils.epath probes importlib.util.find_spec("tensorflow") for every path it touches;
  # the import after such a probe must still be muted.
  (tmp_path / "noisy_module.py").write_text(
      "import os\nos.write(2, b'C++ chatter while loading\\n')\n")
  monkeypatch.syspath_prepend(str(tmp_path))
  monkeypatch.setattr(sys, "meta_path", list(sys.meta_path))
  monkeypatch.delitem(sys.modules, "noisy_module", raising=False)
  finder = console._MutedImport("noisy_module")  # pylint: disable=protected-access
  sys.meta_path.insert(0, finder)
  assert importlib.util.find_spec("noisy_module") is not None
  assert finder in sys.meta_path
  importlib.import_module("noisy_module")
  assert "chatter" not in capfd.readouterr().err
  assert finder not in sys.meta_path
