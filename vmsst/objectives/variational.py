"""VMSST: bitranslation from μ_sem plus a λ-weighted source-separation ELBO.

Per translation pair (x_a, x_b), with the semantic side s alternating across
the batch (batch["sem_side"]):

  loss = −log p(x_a | μ_sem(x_b)) − log p(x_b | μ_sem(x_a))
         + λ · [ −log p(x_a | z_la, z_sem) − log p(x_b | z_lb, z_sem)
                 + w(step) · (KL(q(z_sem | x_s)) + KL(q(z_la | x_a)) + KL(q(z_lb | x_b))) ]

z ~ q by reparameterisation; every KL is to N(0, I); w rises linearly from 0
to `kl_scale` over `kl_anneal_steps`. The bracket is the negative ELBO.
"""

import gin
import jax
import jax.numpy as jnp

from vmsst import losses
from vmsst import models
from vmsst.config import NetworkConfig
from vmsst.network import VMSSTNetwork

Array = jax.Array


def negative_elbo(model: models.EmbeddingModel, params, batch: models.Batch,
                  semantic: tuple[Array, Array], rngs: tuple[Array, Array],
                  kl_weight: Array) -> tuple[Array, models.Metrics]:
  """Negative ELBO per pair, [B].

  Args:
    semantic: (μ, log σ²) of q(z_sem | x) for [a; b] stacked, each [2B, d].
    rngs: (dropout key, reparameterisation-noise key).
    kl_weight: the annealed KL weight w, [].
  """
  dropout_rng, noise_rng = rngs
  tokens, mask, languages = models.both_sides(batch)
  lang_mu, lang_logvar = model.apply(params, tokens, mask, languages, False,
                                     method=VMSSTNetwork.encode_language, rng=dropout_rng)
  first = (batch["sem_side"] == 0)[:, None]
  (mu_a, mu_b), (lv_a, lv_b) = map(models.split_halves, semantic)
  sem_mu, sem_logvar = jnp.where(first, mu_a, mu_b), jnp.where(first, lv_a, lv_b)
  sem_key, lang_key = jax.random.split(noise_rng)
  z_sem = losses.reparameterize(sem_key, sem_mu, sem_logvar)
  z_lang = losses.reparameterize(lang_key, lang_mu, lang_logvar)
  latent = jnp.concatenate([z_lang, jnp.concatenate([z_sem, z_sem], axis=0)], axis=-1)
  nll, correct = models.decode_nll(model, params, tokens, mask, languages, latent,
                                   jax.random.fold_in(dropout_rng, 1))
  rec_a, rec_b = models.split_halves(nll)
  kl_sem = losses.gaussian_kl(sem_mu, sem_logvar)
  kl_la, kl_lb = models.split_halves(losses.gaussian_kl(lang_mu, lang_logvar))
  kl = kl_sem + kl_la + kl_lb
  metrics = {
      "reconstruction_nll": jnp.mean(rec_a + rec_b),
      "reconstruction_token_accuracy": jnp.sum(correct) / jnp.sum(mask).clip(1),
      "kl_sem": jnp.mean(kl_sem), "kl_lang_a": jnp.mean(kl_la), "kl_lang_b": jnp.mean(kl_lb),
      "kl_weight": kl_weight, "elbo": -jnp.mean(rec_a + rec_b + kl),
  }
  return rec_a + rec_b + kl_weight * kl, metrics


@gin.configurable
class VMSST(models.EmbeddingModel):
  """The Variational Multilingual Source-Separation Transformer."""

  def __init__(self, network_config: NetworkConfig, *, elbo_weight: float = 0.1,
               kl_anneal_steps: int = 1_000_000, kl_scale: float = 1.0):
    """Args:
      network_config: the shared network.
      elbo_weight: λ (paper: 0.1 from random init, 0.025 from pretrained).
      kl_anneal_steps: updates over which the KL weight rises to kl_scale.
      kl_scale: final KL weight; 0 is the paper's "no KL" ablation.
    """
    super().__init__(network_config)
    self.elbo_weight = elbo_weight
    self.kl_anneal_steps = kl_anneal_steps
    self.kl_scale = kl_scale

  def vmsst_terms(self, params, batch: models.Batch, dropout_rng: Array,
                  step) -> tuple[Array, models.Metrics, Array]:
    """Per-pair VMSST loss [B], its metrics, and μ_sem of [a; b] [2B, d]."""
    keys = jax.random.split(dropout_rng, 4)
    tokens, mask, _ = models.both_sides(batch)
    mu, aux = self.semantic(params, tokens, mask, keys[0])
    mu_a, mu_b = models.split_halves(mu)
    translation, metrics = models.translation_terms(
        self, params, batch, mu_a, mu_b, self.network_config.emb_dim, keys[1])
    kl_weight = self.kl_scale * losses.linear_annealing(step, self.kl_anneal_steps)
    elbo_loss, elbo_metrics = negative_elbo(self, params, batch, (mu, aux["logvar"]),
                                            (keys[2], keys[3]), kl_weight)
    return translation + self.elbo_weight * elbo_loss, metrics | elbo_metrics, mu

  def loss_fn(self, params, batch, dropout_rng, step=0):
    per_pair, metrics, _ = self.vmsst_terms(params, batch, dropout_rng, step)
    loss = jnp.mean(per_pair)
    return loss, metrics | {"loss": loss}
