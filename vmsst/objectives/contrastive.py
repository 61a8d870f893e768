"""Contrastive: in-batch symmetric InfoNCE over μ_sem (encoder only).

Duplicated sentences inside a batch (multi-parallel corpora repeat the pivot)
are not negatives of each other.
"""

import gin
import jax.numpy as jnp

from vmsst import losses
from vmsst import models


def info_nce_terms(batch: models.Batch, mu_a, mu_b, temperature: float):
  """Symmetric InfoNCE of the (a, b) pairs with duplicate masking: (loss, metrics)."""
  loss, accuracy = losses.symmetric_info_nce(
      mu_a, mu_b, temperature,
      duplicates_a=losses.same_sequence_matrix(batch["tokens_a"]),
      duplicates_b=losses.same_sequence_matrix(batch["tokens_b"]))
  return loss, {"contrastive_loss": loss, "contrastive_accuracy": accuracy}


@gin.configurable
class Contrastive(models.EmbeddingModel):
  """Dual encoder trained with in-batch negatives."""

  init_paths = staticmethod(models.init_semantic_path)

  def __init__(self, network_config, *, temperature: float = 0.05):
    """Args:
      network_config: the shared network (the paper uses dropout 0.1 here only).
      temperature: τ of the softmax over cosine similarities.
    """
    super().__init__(network_config)
    self.temperature = temperature

  def loss_fn(self, params, batch, dropout_rng, step=0):
    tokens, mask, _ = models.both_sides(batch)
    mu_a, mu_b = models.split_halves(self.semantic(params, tokens, mask, dropout_rng)[0])
    loss, metrics = info_nce_terms(batch, mu_a, mu_b, self.temperature)
    return loss, metrics | {"loss": loss, "embedding_norm": jnp.mean(jnp.linalg.norm(mu_a, axis=-1))}
