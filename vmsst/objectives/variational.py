"""VMSST: bitranslation from μ_sem plus a λ-weighted source-separation ELBO.

Per translation pair (x_a, x_b), with the semantic side s alternating across
the batch (batch["sem_side"]):

  loss = −log p(x_a | μ_sem(x_b)) − log p(x_b | μ_sem(x_a))
         + λ · [ −log p(x_a | z_la, z_sem) − log p(x_b | z_lb, z_sem)
                 + w(step) · (KL(q(z_sem | x_s)) + KL(q(z_la | x_a)) + KL(q(z_lb | x_b))) ]

z ~ q by reparameterisation; every KL is to N(0, I); w rises linearly from 0
to `kl_scale` over `kl_anneal_steps`. The bracket is the negative ELBO. The
four decodes (two translations, two reconstructions) run as one decoder call.

Every random draw is the pair's own (models.pair_keys): the dropout masks of
the semantic encoder, the language encoder and the decoder, and the
reparameterisation noise of z_sem and z_l, each from the pair's key folded
with a stream of its own (bitranslation's ENCODER_STREAM and DECODER_STREAM,
LANGUAGE_STREAM and the two noise streams here). A sentence's draws then do
not depend on which microbatch it falls in: `train.microbatches` = N gives
the update of N = 1.
"""

from vmsst.base.gin_utils import gin
import jax
import jax.numpy as jnp

from vmsst.model import losses
from vmsst.model import models
from vmsst.objectives import bitranslation
from vmsst.objectives import nested as nested_lib
from vmsst.model.config import NetworkConfig
from vmsst.model.network import VMSSTNetwork

Array = jax.Array

# fold_in streams of a pair's key beyond bitranslation's ENCODER_STREAM and
# DECODER_STREAM: the language encoder's dropout, the noise of z_sem and of z_l.
LANGUAGE_STREAM, SEMANTIC_NOISE_STREAM, LANGUAGE_NOISE_STREAM = 2, 3, 4


def elbo_latent(model: models.EmbeddingModel, params, batch: models.Batch,
                semantic: tuple[Array, Array], keys: Array) -> tuple[Array, dict[str, Array]]:
  """Sampled reconstruction latents [z_l; z_sem] for [a; b] and the KL terms.

  Args:
    semantic: (μ, log σ²) of q(z_sem | x) for [a; b] stacked, each [2B, d].
    keys: the pairs' keys [B] (models.pair_keys): the language encoder's
      dropout and both noise draws of pair i come from keys[i] alone.
  Returns:
    (latent [2B, 2d], {"kl_sem", "kl_lang_a", "kl_lang_b"} each [B]).
  """
  tokens, mask, languages = models.both_sides(batch)
  lang_mu, lang_logvar = model.apply_rows(
      params, tokens, mask, languages, False, method=VMSSTNetwork.encode_language,
      row_keys=models.side_keys(models.stream_keys(keys, LANGUAGE_STREAM)))
  first = (batch["sem_side"] == 0)[:, None]
  (mu_a, mu_b), (lv_a, lv_b) = map(models.split_halves, semantic)
  sem_mu, sem_logvar = jnp.where(first, mu_a, mu_b), jnp.where(first, lv_a, lv_b)
  z_sem = losses.reparameterize_rows(models.stream_keys(keys, SEMANTIC_NOISE_STREAM),
                                     sem_mu, sem_logvar)
  z_lang = losses.reparameterize_rows(
      models.side_keys(models.stream_keys(keys, LANGUAGE_NOISE_STREAM)), lang_mu, lang_logvar)
  latent = jnp.concatenate([z_lang, jnp.concatenate([z_sem, z_sem], axis=0)], axis=-1)
  kl_la, kl_lb = models.split_halves(losses.gaussian_kl(lang_mu, lang_logvar))
  return latent, {"kl_sem": losses.gaussian_kl(sem_mu, sem_logvar),
                  "kl_lang_a": kl_la, "kl_lang_b": kl_lb}


def reconstruction_metrics(nll: Array, correct: Array, mask: Array,
                           kls: dict[str, Array], kl_weight: Array) -> dict[str, Array]:
  reconstruction = bitranslation.pair_sum(nll)
  kl = sum(kls.values())
  return {"reconstruction_nll": jnp.mean(reconstruction),
          "reconstruction_token_accuracy": jnp.sum(correct) / jnp.sum(mask).clip(1),
          "kl_weight": kl_weight, "elbo": -jnp.mean(reconstruction + kl),
          **{k: jnp.mean(v) for k, v in kls.items()}}


@gin.configurable
class VMSST(models.EmbeddingModel):
  """The Variational Multilingual Source-Separation Transformer."""

  loss_is_mean_over_pairs = True

  def __init__(self, network_config: NetworkConfig, *, elbo_weight: float = 0.1,
               kl_anneal_steps: int = 1_000_000, kl_scale: float = 1.0,
               softmax_candidates: int = 0, nested: nested_lib.NestedDims | None = None):
    """Args:
      network_config: the shared network.
      elbo_weight: λ (paper: 0.1 from random init, 0.025 from pretrained).
      kl_anneal_steps: updates over which the KL weight rises to kl_scale.
      kl_scale: final KL weight; 0 is the paper's "no KL" ablation.
      softmax_candidates: K > 0 normalises the four decodes' softmax over K
        vocabulary ids (the batch's targets first; losses.softmax_candidates),
        a CPU speed-up; 0 (the paper) the whole vocabulary.
      nested: Matryoshka sizes (objectives/nested.py): the translation terms
        decoded from each k-prefix of μ_sem (the rest at its prior mean 0),
        weighted; the ELBO once, on the full latents (docs/papers/matryoshka.md).
    """
    super().__init__(network_config)
    self.softmax_candidates = softmax_candidates
    self.nested = nested_lib.checked(nested, network_config.emb_dim, type(self).__name__)
    self.elbo_weight = elbo_weight
    self.kl_anneal_steps = kl_anneal_steps
    self.kl_scale = kl_scale

  def vmsst_terms(self, params, batch: models.Batch, dropout_rng: Array,
                  step) -> tuple[Array, models.Metrics, Array]:
    """Per-pair VMSST loss [B], its metrics, and μ_sem of [a; b] [2B, d].

    `dropout_rng`: the step's key or the batch's pair keys [B] (models.pair_keys).
    """
    if dropout_rng is None:
      raise ValueError(f"{type(self).__name__} draws the ELBO's noise: its loss needs a key.")
    keys = models.pair_keys(dropout_rng, batch["tokens_a"].shape[0])
    tokens, mask, languages = models.both_sides(batch)
    mu, aux = self.semantic_rows(params, tokens, mask, bitranslation.encoder_row_keys(keys))
    mu_a, mu_b = models.split_halves(mu)
    sizes = bitranslation.nested_sizes(self.nested, mu.shape[-1])
    translation = bitranslation.nested_translation_latents(mu_a, mu_b,
                                                           self.network_config.emb_dim, sizes)
    reconstruction, kls = elbo_latent(self, params, batch, (mu, aux["logvar"]), keys)
    repeat = lambda x: bitranslation.repeat_rows(x, len(sizes) + 1)
    nll, correct, extra = bitranslation.decode_nll(
        self, params, repeat(tokens), repeat(mask), repeat(languages),
        jnp.concatenate([translation, reconstruction], axis=0),
        bitranslation.decoder_row_keys(keys, len(sizes) + 1), self.softmax_candidates)
    split = len(sizes) * tokens.shape[0]  # translations first, the reconstructions last
    (nll_t, nll_r), (correct_t, correct_r) = ((x[:split], x[split:]) for x in (nll, correct))
    kl_weight = self.kl_scale * losses.linear_annealing(step, self.kl_anneal_steps)
    neg_elbo = bitranslation.pair_sum(nll_r) + kl_weight * sum(kls.values())
    per_pair = (bitranslation.nested_translation_sum(self.nested, nll_t)
                + self.elbo_weight * neg_elbo)
    metrics = (bitranslation.nested_translation_metrics(self.nested, nll_t, correct_t, mask)
               | reconstruction_metrics(nll_r, correct_r, mask, kls, kl_weight) | extra)
    return per_pair, metrics, mu

  def loss_fn(self, params, batch, dropout_rng, step=0):
    per_pair, metrics, _ = self.vmsst_terms(params, batch, dropout_rng, step)
    loss = jnp.mean(per_pair)
    return loss, metrics | {"loss": loss}
