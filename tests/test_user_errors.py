"""One error style across commands: a user's mistake is one `error:` line and exit 2.

Subprocesses, since the exit status and what reaches stderr are the behaviour.
"""

import subprocess
import sys

import pytest

import vmsst_testing
from vmsst import encoder_flags
from vmsst import cli


def _run(*args: str) -> subprocess.CompletedProcess:
  return subprocess.run([sys.executable, "-m", *args], cwd=vmsst_testing.ROOT,
                        capture_output=True, text=True, timeout=300, check=False)


@pytest.mark.parametrize("args, message", [
    (("vmsst.export", "--model_dir={tmp}/nowhere", "--output={tmp}/out"),
     "error: --model_dir={tmp}/nowhere is not a directory; give a MODEL_DIR written by "
     "`python -m vmsst.train` (an older one with config.gin only: "
     "`python -m vmsst.model_json --model_dir=DIR` writes its model.json)."),
    (("vmsst.evaluate", "--saved_model={tmp}", "--output={tmp}/eval"),
     "error: --saved_model={tmp} has no saved_model.pb; give an --output written by "
     "`python -m vmsst.export`."),
])
def test_export_and_evaluate_name_the_bad_directory_without_a_traceback(tmp_path, args,
                                                                        message):
  done = _run(*(a.format(tmp=tmp_path) for a in args))
  assert done.returncode == 2, done.stderr[-2000:]
  assert "Traceback" not in done.stderr
  assert done.stderr.splitlines()[-1] == message.format(tmp=tmp_path)


def test_a_remote_model_dir_is_left_to_the_loader():
  encoder_flags.check_paths(model_dir="gs://bucket/run", saved_model="gs://bucket/export")
  with pytest.raises(cli.UserError, match="--saved_model=/nonexistent is not a directory"):
    encoder_flags.check_paths(saved_model="/nonexistent")
