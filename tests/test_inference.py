"""Restoring a trained directory: same parameters, same embeddings, clear errors."""

import jax
import numpy as np
import pytest

from vmsst import inference
from vmsst import text_inputs

SENTENCES = ["A man rides a bicycle.", "Ein Mann fährt Fahrrad auf einer sehr langen Straße "
             "neben einem roten Bus und vielen Autos.", "", "Hello."] * 5


@pytest.fixture(scope="module")
def trained(tiny_model):
  return tiny_model


def test_restore_gives_the_trained_parameters_and_a_self_contained_directory(trained):
  model_dir, params = trained
  assert (model_dir / inference.VOCABULARY_FILE).exists()
  restored = inference.restore(str(model_dir))
  assert restored.step == 4 and restored.sequence_length == 32
  jax.tree.map(np.testing.assert_array_equal, jax.device_get(restored.params), params)


@pytest.mark.slow
def test_length_bucketed_encoding_equals_full_length_encoding(trained):
  model_dir, _ = trained
  encoder = inference.CheckpointEncoder.from_model_dir(str(model_dir), batch_size=8)
  bucketed = encoder.encode(SENTENCES)
  restored = encoder.restored
  full = text_inputs.embed_sentences(
      lambda t, m: restored.model.encode(restored.params, t, m), restored.vocabulary,
      SENTENCES, restored.sequence_length, 8)
  assert bucketed.shape == (len(SENTENCES), 64)
  np.testing.assert_allclose(bucketed, full, atol=1e-5)
  assert encoder.name == "vmsst"


def test_missing_config_or_checkpoint_is_a_clear_error(trained, tmp_path):
  with pytest.raises(FileNotFoundError, match="config.gin not found"):
    inference.restore(str(tmp_path))
  model_dir, _ = trained
  empty = tmp_path / "empty"
  empty.mkdir()
  (empty / "config.gin").write_text((model_dir / "config.gin").read_text())
  (empty / "spm.model").write_bytes((model_dir / "spm.model").read_bytes())
  with pytest.raises(FileNotFoundError, match="has no checkpoint"):
    inference.restore(str(empty))
