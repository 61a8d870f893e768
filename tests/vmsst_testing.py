"""Small real models and batches shared by the model tests (no mocks)."""

import flax.linen as nn
import jax
import numpy as np

from vmsst import models
from vmsst.config import NetworkConfig

TINY = NetworkConfig(vocab_size=300, emb_dim=32, num_heads=2, head_dim=16, mlp_dim=64,
                     num_encoder_layers=1, num_language_encoder_layers=1,
                     num_decoder_layers=1, max_length=12)


def random_batch(batch_size: int = 4, length: int = 12, vocab_size: int = 300,
                 seed: int = 0) -> dict[str, np.ndarray]:
  """Pairs of random sentences of random lengths (EOS=1 last, 0-padded)."""
  rng = np.random.default_rng(seed)
  batch = {}
  for side in "ab":
    tokens = np.zeros((batch_size, length), np.int32)
    for row in range(batch_size):
      n = rng.integers(2, length)
      tokens[row, : n - 1] = rng.integers(3, vocab_size, n - 1)
      tokens[row, n - 1] = 1
    batch[f"tokens_{side}"] = tokens
    batch[f"mask_{side}"] = (tokens != 0).astype(np.int32)
    batch[f"lang_{side}"] = rng.integers(3, vocab_size, batch_size).astype(np.int32)
  batch["sem_side"] = (np.arange(batch_size) % 2).astype(np.int32)
  return batch


def init_params(model: models.EmbeddingModel, batch_size: int = 4, length: int = 12, seed=0):
  variables = model.get_initial_variables(jax.random.key(seed),
                                          models.batch_shapes(batch_size, length))
  return nn.unbox(variables["params"])
