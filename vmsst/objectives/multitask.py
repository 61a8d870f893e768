"""VMSST-Contrastive: InfoNCE on μ_sem plus λ_mt times the VMSST loss.

The two losses share one forward pass of the semantic encoder.
"""

import gin
import jax.numpy as jnp

from vmsst import models
from vmsst.objectives.contrastive import info_nce_terms
from vmsst.objectives.variational import VMSST


@gin.configurable
class VMSSTContrastive(VMSST):
  """Multitask: contrastive + multitask_weight · VMSST."""

  def __init__(self, network_config, *, multitask_weight: float = 0.01,
               temperature: float = 0.05, **vmsst_kwargs):
    """Args:
      network_config: the shared network.
      multitask_weight: λ_mt on the VMSST loss; VMSST sums token NLLs per
        sentence (~10² nats), InfoNCE is ~log B, so λ_mt ≈ 0.01 balances them.
      temperature: τ of the InfoNCE term.
      **vmsst_kwargs: elbo_weight, kl_anneal_steps, kl_scale of VMSST.
    """
    super().__init__(network_config, **vmsst_kwargs)
    self.multitask_weight = multitask_weight
    self.temperature = temperature

  def loss_fn(self, params, batch, dropout_rng, step=0):
    per_pair, metrics, mu = self.vmsst_terms(params, batch, dropout_rng, step)
    mu_a, mu_b = models.split_halves(mu)
    contrastive, contrastive_metrics = info_nce_terms(batch, mu_a, mu_b, self.temperature)
    vmsst_loss = jnp.mean(per_pair)
    loss = contrastive + self.multitask_weight * vmsst_loss
    return loss, metrics | contrastive_metrics | {"vmsst_loss": vmsst_loss, "loss": loss}
