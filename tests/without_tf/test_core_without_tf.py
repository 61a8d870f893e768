"""The core imports and trains with TensorFlow, tensorflow-text, seqio and gin absent.

An accelerator image has JAX, flax, optax and orbax but none of those
(issue 18), so a subprocess blocks them with a meta-path finder and runs a
real train step of Contrastive and VMSST (bf16, dropout).
"""

import os
import subprocess
import sys

import pytest

from vmsst_testing import ROOT

_SCRIPT = r"""
import importlib.abc, importlib.machinery, os, sys
BLOCKED = ("tensorflow", "tensorflow_text", "seqio", "gin")
GIN_FOLDER = os.environ["GIN_AS"] == "config_folder"

class Block(importlib.abc.MetaPathFinder):
  def find_spec(self, name, path=None, target=None):
    if GIN_FOLDER and name == "gin":  # gin-config absent: `import gin` finds the gin/ folder
      return importlib.machinery.PathFinder.find_spec(name, [os.getcwd()])
    if name.split(".")[0] in BLOCKED:
      raise ImportError(f"{name} is blocked in this test")

sys.meta_path.insert(0, Block())

import jax
import numpy as np
from vmsst.training import checkpointing, optimizers
from vmsst.model import layers, losses, models, network, partitioning
from vmsst.training import trainer as trainer_lib
from vmsst.model.config import NetworkConfig
from vmsst.objectives import MODELS

cfg = NetworkConfig(vocab_size=300, emb_dim=32, num_heads=2, head_dim=16, mlp_dim=64,
                    num_encoder_layers=1, num_language_encoder_layers=1,
                    num_decoder_layers=1, max_length=12, dtype="bfloat16", dropout_rate=0.1)
rng = np.random.default_rng(0)
batch = {}
for side in "ab":
  tokens = rng.integers(3, 300, (8, 12)).astype(np.int32)
  tokens[:, -1] = 1
  batch[f"tokens_{side}"] = tokens
  batch[f"mask_{side}"] = np.ones((8, 12), np.int32)
  batch[f"lang_{side}"] = rng.integers(0, 10, 8).astype(np.int32)
batch["sem_side"] = (np.arange(8) % 2).astype(np.int32)
mesh = partitioning.make_mesh(1, 1, devices=jax.devices()[:1])
for name in ("contrastive", "vmsst"):
  trainer = trainer_lib.Trainer(MODELS[name](cfg), optimizers.adafactor(learning_rate=1e-2),
                                mesh, models.batch_shapes(8, 12))
  state = trainer.initialize(jax.random.key(0))
  state, metrics = trainer.step(state, batch, jax.random.key(1))
  assert np.isfinite(float(metrics["loss"])), (name, metrics)
  print(name, float(metrics["loss"]))
leaked = sorted(m for m in sys.modules if m.split(".")[0] in BLOCKED
                and not (GIN_FOLDER and m == "gin" and not hasattr(sys.modules[m], "configurable")))
assert not leaked, leaked
print("core ok")
"""


@pytest.mark.slow
@pytest.mark.parametrize("gin_as", ["absent", "config_folder"])
def test_train_step_with_tensorflow_seqio_and_gin_blocked(gin_as):
  """`config_folder`: run from the repository root with gin-config missing, `import gin`
  succeeds with the gin/ folder of .gin files (a namespace package); the core must
  still take its stand-in (vmsst.base.gin_utils.gin)."""
  result = subprocess.run([sys.executable, "-c", _SCRIPT], cwd=ROOT, capture_output=True,
                          text=True, timeout=600, check=False,
                          env={**os.environ, "GIN_AS": gin_as})
  assert result.returncode == 0, result.stderr[-3000:]
  assert "core ok" in result.stdout
