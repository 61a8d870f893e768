"""vmsst.export_formats.export_flags: the export command's flags are checked before TensorFlow and JAX load."""

import subprocess
import sys

import vmsst_testing
from vmsst.export_formats import export_flags
from vmsst.encoding import restore


def test_dtypes_are_the_inference_precisions():
  assert export_flags.DTYPES == restore.PRECISIONS


def _imported(stderr: str) -> set[str]:
  """Top-level packages a `python -X importtime` run imported."""
  return {line.split("|")[-1].strip().split(".")[0] for line in stderr.splitlines()
          if line.startswith("import time:")}


def test_a_bad_output_is_one_line_before_tensorflow_and_jax_are_imported(tmp_path):
  (tmp_path / "model" / "checkpoints" / "4").mkdir(parents=True)
  (tmp_path / "model" / "model.json").write_text("{}")
  (tmp_path / "full").mkdir()
  (tmp_path / "full" / "saved_model.pb").write_text("")
  command = [sys.executable, "-X", "importtime", "-m", "vmsst.export",
             f"--model_dir={tmp_path / 'model'}"]
  for flags, named in [
      ([f"--output={tmp_path / 'full'}"], (f"--output={tmp_path / 'full'}",)),
      ([f"--output={tmp_path / 'new'}", "--step=2"], ("--step=2", "4"))]:
    done = subprocess.run(command + flags, cwd=vmsst_testing.ROOT, capture_output=True, text=True,
                          timeout=300, check=False)
    vmsst_testing.assert_user_error(done, *named)
    assert not {"tensorflow", "jax", "flax"} & _imported(done.stderr)
