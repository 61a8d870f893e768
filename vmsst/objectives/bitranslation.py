"""BiTranslation: VMSST without the ELBO and without a language encoder.

loss = −log p(x_a | μ_sem(x_b)) − log p(x_b | μ_sem(x_a)), the decoder fed
μ_sem alone (output projection 2d × V) and the target-language start symbol.
"""

import gin
import jax
import jax.numpy as jnp

from vmsst import models


@gin.configurable
class BiTranslation(models.EmbeddingModel):
  """Translation in both directions through the semantic bottleneck."""

  init_paths = staticmethod(models.init_translation_paths)

  def loss_fn(self, params, batch, dropout_rng, step=0):
    encoder_rng, decoder_rng = jax.random.split(dropout_rng)
    tokens, mask, languages = models.both_sides(batch)
    mu_a, mu_b = models.split_halves(self.semantic(params, tokens, mask, encoder_rng)[0])
    latent = models.translation_latent(mu_a, mu_b, language_slot=0)
    nll, correct = models.decode_nll(self, params, tokens, mask, languages, latent, decoder_rng)
    loss = jnp.mean(models.pair_sum(nll))
    metrics = models.translation_metrics(nll, correct, mask)
    return loss, metrics | {"loss": loss}
