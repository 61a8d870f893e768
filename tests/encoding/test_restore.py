"""Restoring a trained directory: same parameters, no gin, clear errors."""

import subprocess
import sys

import jax
import numpy as np
import pytest

from vmsst.base.gin_utils import gin
from vmsst.encoding import restore
from vmsst.base import run_directory


@pytest.fixture(scope="module")
def trained(tiny_model):
  return tiny_model


def test_restore_gives_the_trained_parameters_and_a_self_contained_directory(trained):
  model_dir, params = trained
  assert (model_dir / run_directory.VOCABULARY).exists()
  restored = restore.restore(str(model_dir))
  assert restored.step == 4 and restored.sequence_length == 32
  jax.tree.map(np.testing.assert_array_equal, jax.device_get(restored.params), params)


def test_a_command_encoding_a_checkpoint_imports_no_tensorflow(trained, tmp_path):
  """A restored model tokenizes in Python (sentencepiece_vocabulary.read_vocabulary): seqio's
  vocabulary would import TensorFlow, half of `python -m vmsst.embed`'s start, for the same
  ids. `-X importtime` lists every module the process imported."""
  model_dir, _ = trained
  (tmp_path / "in.txt").write_text("A man rides a bicycle.\nEin Mann fährt Fahrrad.\n")
  done = subprocess.run([sys.executable, "-X", "importtime", "-m", "vmsst.embed",
                         f"--model_dir={model_dir}", f"--input={tmp_path / 'in.txt'}",
                         f"--output={tmp_path / 'out.npy'}"], capture_output=True, text=True,
                        timeout=300, check=False)
  assert done.returncode == 0, done.stderr[-3000:]
  imported = {line.rsplit("|", 1)[-1].strip() for line in done.stderr.splitlines()
              if line.startswith("import time:")}
  assert "jax" in imported and not imported & {"seqio", "tensorflow"}
  restored = restore.restore(str(model_dir))
  assert np.load(tmp_path / "out.npy").shape == (2, restored.model.network_config.emb_dim)
  assert restored.vocabulary.sp_model == (model_dir / run_directory.VOCABULARY).read_bytes()


def test_missing_config_or_checkpoint_is_a_clear_error(trained, tmp_path):
  with pytest.raises(FileNotFoundError, match="model.json not found"):
    restore.restore(str(tmp_path))
  model_dir, _ = trained
  empty = tmp_path / "empty"
  empty.mkdir()
  (empty / "model.json").write_text((model_dir / "model.json").read_text())
  (empty / "spm.model").write_bytes((model_dir / "spm.model").read_bytes())
  with pytest.raises(FileNotFoundError, match="has no checkpoint"):
    restore.restore(str(empty))


def test_restore_needs_no_gin_and_leaves_a_callers_config_alone(trained):
  model_dir, params = trained
  with gin.unlock_config():
    gin.bind_parameter("NetworkConfig.num_heads", 3)  # a caller half-way through its config
  try:
    restored = restore.restore(str(model_dir))
    assert gin.query_parameter("NetworkConfig.num_heads") == 3
  finally:
    gin.clear_config()
  assert restored.model.network_config.num_heads != 3
  jax.tree.map(np.testing.assert_array_equal, jax.device_get(restored.params), params)

