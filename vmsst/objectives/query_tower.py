"""Query-tower-only tuning: a frozen document tower and a query tower tuned on triplets.

An index of document embeddings stays valid only if the encoder that made
it never changes. This dual encoder starts both towers from one trained
checkpoint (`train.init_params = <model dir>`): the document tower is frozen
and the query tower alone is tuned, on English triplets (anchor, positive,
negative) with a triplet margin loss

  cosine:    L = mean max(0, m − cos(q(a), d(p)) + cos(q(a), d(n)))
  euclidean: L = mean max(0, |q(a) − d(p)| − |q(a) − d(n)| + m)

where q is the query tower (trainable; the anchor is the query) and d the
document tower (positive and negative are documents). Vectors are μ_sem, the
embedding used downstream; the Euclidean form takes them raw (as
vmsst/evaluation/pair_ranking.py does), with a 1e-12 under the square root
so a zero distance has a finite gradient.

The trainable parameters (TrainState.params) are the query tower; the
document tower is a copy of them made when they are set
(`init_model_state`, which `Trainer.with_params` calls after loading
init_params, as for the momentum encoder of momentum_contrast.py). It lives
in TrainState.model_state: no gradient (stop_gradient), no optimizer state,
and `update_model_state` returns it unchanged, so it stays bit-identical to
the checkpoint it came from. Learning rates near 1e-8 keep the query tower
close to the document tower; they need `@compensated()` (vmsst/training/optimizers.py)
so float32 does not round the updates away. Freezing part of the query tower
too: `@frozen_groups()` (vmsst/training/parameter_groups.py).

`encode` is the query tower (what `vmsst.evaluate` and export see);
`encode_documents(model_state, ...)` the frozen tower, and
`encoding.restore.restore_document_tower(model_dir)` restores it from a tuned run's
checkpoint (vmsst/evaluation/preservation.py embeds documents with it, as
the dual encoder is deployed).

`QueryTowerValidation` (vmsst/evaluation/in_training.py) is the paper's
validation (§2.3): the triplet loss and the error count on held-out triplets
after each epoch, the two metrics its early-stopping rule watches
(`train.early_stopping`, vmsst/training/early_stopping.py).
"""


from vmsst.base.gin_utils import gin
import jax
import jax.numpy as jnp

from vmsst.model import losses
from vmsst.model import models
from vmsst.objectives import nested as nested_lib

SIMILARITIES = ("cosine", "euclidean")
DOCUMENTS = "document_tower"


def triplet_scores(anchor, positive, negative, similarity: str):
  """(s(a, p), s(a, n)) float32 [B] each; for "euclidean", s is minus the distance.

  Args:
    anchor, positive, negative: float [B, d] embeddings.
    similarity: "cosine" or "euclidean".
  """
  anchor, positive, negative = (x.astype(jnp.float32) for x in (anchor, positive, negative))
  if similarity == "cosine":
    a = losses.l2_normalize(anchor)
    return (jnp.sum(a * losses.l2_normalize(positive), -1),
            jnp.sum(a * losses.l2_normalize(negative), -1))
  distance = lambda x, y: jnp.sqrt(jnp.sum(jnp.square(x - y), -1) + 1e-12)
  return -distance(anchor, positive), -distance(anchor, negative)


def triplet_margin_loss(anchor, positive, negative, *, margin: float, similarity: str):
  """Mean hinge max(0, m − s(a, p) + s(a, n)) and its metrics.

  With s = −distance this is max(0, d(a, p) − d(a, n) + m), the usual
  distance form. Returns (loss float32 [], metrics): "triplet_error_rate" is
  the fraction with s(a, p) <= s(a, n) (ties are errors, as in pair_ranking),
  "active_fraction" the fraction with a non-zero hinge.
  """
  positive_score, negative_score = triplet_scores(anchor, positive, negative, similarity)
  hinge = jnp.maximum(0.0, margin - positive_score + negative_score)
  loss = jnp.mean(hinge)
  return loss, {"loss": loss, "triplet_loss": loss,
                "triplet_error_rate": jnp.mean((positive_score <= negative_score)
                                               .astype(jnp.float32)),
                "active_fraction": jnp.mean((hinge > 0).astype(jnp.float32)),
                "positive_similarity": jnp.mean(positive_score),
                "negative_similarity": jnp.mean(negative_score)}


@gin.configurable
class QueryTower(models.EmbeddingModel):
  """Tuned query tower (params) over a frozen document tower (model state)."""

  init_paths = staticmethod(models.init_semantic_path)

  def __init__(self, network_config, *, margin: float = 0.1, similarity: str = "cosine",
               nested: nested_lib.NestedDims | None = None):
    """Args:
      network_config: the checkpoint's network (only its semantic path is used).
      margin: m of the hinge; in cosine units (0.1: a positive must beat the
        negative by a tenth of the cosine range before it stops pulling) or,
        for "euclidean", in the embedding's distance units.
      similarity: "cosine" or "euclidean" (see the module docstring).
      nested: Matryoshka sizes (objectives/nested.py): the triplet loss on
        each k-prefix of query and document vectors, weighted; None: full only.
    """
    super().__init__(network_config)
    if similarity not in SIMILARITIES:
      raise ValueError(f"QueryTower.similarity must be one of {SIMILARITIES}, "
                       f"got {similarity!r}.")
    self.margin, self.similarity = margin, similarity
    self.nested = nested_lib.checked(nested, network_config.emb_dim, "QueryTower")

  def extra_features(self, batch_size: int, length: int) -> dict[str, jax.ShapeDtypeStruct]:
    """`tokens_negative` int32 [B, L], the negative of the pair (a = anchor, b = positive)."""
    return {"tokens_negative": jax.ShapeDtypeStruct((batch_size, length), jnp.int32)}

  def init_model_state(self, params, rng):
    """The document tower: an exact copy of the parameters, in its own buffers."""
    del rng
    return {DOCUMENTS: jax.tree.map(jnp.copy, params)}

  def encode_documents(self, model_state, tokens, mask):
    """μ_sem of the frozen document tower, float32 [B, d]."""
    return self.encode(model_state[DOCUMENTS], tokens, mask)

  def loss_fn(self, params, batch, dropout_rng, step=0):
    raise TypeError("QueryTower needs its document tower: call loss_fn_with_state(params, "
                    "model_state, ...) (vmsst.training.trainer.train_step does).")

  def loss_fn_with_state(self, params, model_state, batch, dropout_rng, step=0):
    if "tokens_negative" not in batch:
      raise KeyError("QueryTower needs batch['tokens_negative']: train on a triplet task "
                     "(vmsst_stsb_triplets, gin/runs/query_tower_cpu.gin).")
    documents = jax.lax.stop_gradient(model_state)
    anchor = self.semantic(params, batch["tokens_a"], batch["mask_a"], dropout_rng)[0]
    positive = self.encode_documents(documents, batch["tokens_b"], batch["mask_b"])
    negative_tokens = batch["tokens_negative"]
    negative = self.encode_documents(documents, negative_tokens,
                                     (negative_tokens != 0).astype(jnp.int32))
    loss, metrics = nested_lib.nested_loss(self.nested, anchor.shape[-1], lambda k: (
        triplet_margin_loss(*(nested_lib.prefix(x, k) for x in (anchor, positive, negative)),
                            margin=self.margin, similarity=self.similarity)))
    return loss, (metrics | {"loss": loss}, {})
