"""VMSST-Contrastive: InfoNCE on μ_sem plus λ times the VMSST loss.

Wieting et al. 2023, §6.3: "incorporating a contrastive loss to use in a
multitask setting. Again, we weight the contribution of the VMSST loss by λ";
§6.4 sets λ = 0.0005 (pretrained and 6-layer) and 0.001 (random 24-layer).
The contrastive term is the Contrastive baseline's (dot product, no
temperature, by default). The two losses share one forward pass of the
semantic encoder.
"""

from vmsst.base.gin_utils import gin
import jax
import jax.numpy as jnp

from vmsst.model import losses
from vmsst.model import models
from vmsst.objectives import contrastive as contrastive_lib
from vmsst.objectives import nested as nested_lib
from vmsst.objectives.variational import VMSST


@gin.configurable
class VMSSTContrastive(VMSST):
  """Multitask: contrastive + multitask_weight · VMSST."""

  loss_is_mean_over_pairs = False  # the contrastive term's negatives are the batch's

  def __init__(self, network_config, *, multitask_weight: float = 0.0005,
               similarity: str = "dot", temperature: float = 1.0, hard_negatives: int = 0,
               **vmsst_kwargs):
    """Args:
      network_config: the shared network.
      multitask_weight: λ on the whole VMSST loss (its translation terms and
        its λ-weighted ELBO); the paper's 6-layer / pretrained value by default.
      similarity: the contrastive term's pair score, "dot" (the paper) or
        "cosine" (losses.pair_scores).
      temperature: τ dividing the scores (the paper: none, i.e. 1.0).
      hard_negatives: K mined negatives per pair in the contrastive term
        (Contrastive's `hard_negatives`); the VMSST terms never see them.
      **vmsst_kwargs: elbo_weight, kl_anneal_steps, kl_scale, softmax_candidates and
        nested of VMSST; nested (objectives/nested.py) also sums the
        contrastive term over the k-prefixes of μ_sem.
    """
    super().__init__(network_config, **vmsst_kwargs)
    losses.check_similarity(similarity, temperature)
    self.multitask_weight = multitask_weight
    self.similarity = similarity
    self.temperature = temperature
    self.hard_negatives = hard_negatives

  def extra_features(self, batch_size: int, length: int) -> dict[str, jax.ShapeDtypeStruct]:
    return contrastive_lib.negative_features(batch_size, length, self.hard_negatives)

  def negative_embeddings(self, params, batch, dropout_rng):
    """μ_sem [B·K, d] of the pairs' mined negatives (a dropout key of their own), or None."""
    if not self.hard_negatives:
      return None
    tokens, mask = contrastive_lib.negative_rows(batch, self.hard_negatives)
    rng = None if dropout_rng is None else jax.random.fold_in(dropout_rng, 1)
    return self.semantic(params, tokens, mask, rng)[0]

  def loss_fn(self, params, batch, dropout_rng, step=0):
    per_pair, metrics, mu = self.vmsst_terms(params, batch, dropout_rng, step)
    mu_a, mu_b = models.split_halves(mu)
    mu_negatives = self.negative_embeddings(params, batch, dropout_rng)
    cut = lambda x, k: None if x is None else nested_lib.prefix(x, k)
    contrastive, contrastive_metrics = nested_lib.nested_loss(
        self.nested, mu_a.shape[-1], lambda k: contrastive_lib.hard_negative_terms(
            batch, cut(mu_a, k), cut(mu_b, k), cut(mu_negatives, k), self.temperature,
            self.similarity))
    vmsst_loss = jnp.mean(per_pair)
    loss = contrastive + self.multitask_weight * vmsst_loss
    return loss, metrics | contrastive_metrics | {"vmsst_loss": vmsst_loss, "loss": loss}
