"""train(init_params=...): a converted parameter file seeds a fresh run, never a resumed one."""

import jax
import numpy as np
import pytest

import vmsst.training.loop
import vmsst_testing
from vmsst.base.gin_utils import gin
from vmsst.model import param_files
from vmsst.base import sentencepiece_vocabulary


@pytest.fixture(autouse=True)
def _clean_gin():
  yield
  gin.clear_config()


@pytest.mark.slow
def test_a_fresh_run_starts_from_the_file_and_a_restart_ignores_it(data_dir, tiny_vocab_path,
                                                                  tmp_path):
  vocab_size = sentencepiece_vocabulary.get_vocabulary(str(tiny_vocab_path)).vocab_size
  table = np.full((vocab_size, 64), 0.5, np.float32)  # small_run_bindings: emb_dim 64
  param_files.save_params(str(tmp_path / "init.safetensors"), {"token_embed/embedding": table})
  common = ["train.evaluator = None", "make_manager.save_interval_steps = 1",
            f"train.init_params = '{tmp_path / 'init.safetensors'}'"]
  vmsst_testing.configure_small_run(data_dir, tiny_vocab_path, tmp_path / "m", steps=1,
                                    extra=common)
  first = jax.device_get(vmsst.training.loop.train()["params"])
  # One Adam step at the first warm-up learning rate moves entries by < 1e-3.
  np.testing.assert_allclose(first["token_embed"]["embedding"], table, atol=1e-3)
  assert np.std(first["semantic_encoder"]["layer_0"]["mlp"]["wi"]["kernel"]) > 0.01

  wrong = {"token_embed/embedding": np.zeros((3, 3), np.float32)}
  param_files.save_params(str(tmp_path / "init.safetensors"), wrong)
  vmsst_testing.configure_small_run(data_dir, tiny_vocab_path, tmp_path / "m", steps=2,
                                    extra=common)
  resumed = vmsst.training.loop.train()  # resumes from step 1: the misfitting file is not read
  assert resumed["start_step"] == 1

  vmsst_testing.configure_small_run(data_dir, tiny_vocab_path, tmp_path / "fresh", steps=1,
                                    extra=common)
  with pytest.raises(ValueError, match=r"shape of token_embed/embedding: stored \(3, 3\)"):
    vmsst.training.loop.train()
