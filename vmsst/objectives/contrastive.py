"""Contrastive: in-batch symmetric InfoNCE over μ_sem (encoder only).

The VMSST paper's baseline (Wieting et al. 2023, §6.3) scores a pair by the
dot product of the two representations, p(s_i | t_i) = exp(s_i · t_i) /
Σ_j exp(s_i · t_j), with no normalisation and no temperature:
`similarity="dot", temperature=1.0`, the defaults. `similarity="cosine"` with a
temperature (e.g. 0.05) is the SimCLR/SimCSE form, kept as an option.

Duplicated sentences inside a batch (multi-parallel corpora repeat the pivot)
are not negatives of each other.

Gradient caching (`gradient_cache_chunk`): the InfoNCE needs every embedding
of the batch at once, but an embedding's activations need not outlive it. The
encoder runs chunk by chunk under jax.lax.map of a jax.checkpoint'ed
function, so the forward keeps only the [2B, d] embeddings and the backward
recomputes one chunk's activations at a time: the memory of a batch of
`chunk` sentences, the negatives of the whole batch, and the same loss and
gradient as without it (only the order of the gradient's sums differs).
Dropout draws one key per sentence (split from the step's key) in both
modes, so a sentence sees the same mask whichever chunk encodes it.
"""

from vmsst.gin_utils import gin
import jax
import jax.numpy as jnp

from vmsst import layers
from vmsst import losses
from vmsst import models


def info_nce_terms(batch: models.Batch, mu_a, mu_b, temperature: float,
                   similarity: str):
  """Symmetric InfoNCE of the (a, b) pairs with duplicate masking: (loss, metrics).

  similarity: "dot" or "cosine" (losses.pair_scores), divided by temperature.
  """
  loss, accuracy = losses.symmetric_info_nce(
      mu_a, mu_b, temperature,
      duplicates_a=losses.same_sequence_matrix(batch["tokens_a"]),
      duplicates_b=losses.same_sequence_matrix(batch["tokens_b"]),
      similarity=similarity)
  return loss, {"contrastive_loss": loss, "contrastive_accuracy": accuracy}


@gin.configurable
class Contrastive(models.EmbeddingModel):
  """Dual encoder trained with in-batch negatives."""

  init_paths = staticmethod(models.init_semantic_path)

  def __init__(self, network_config, *, similarity: str = "dot",
               temperature: float = 1.0, gradient_cache_chunk: int = 0):
    """Args:
      network_config: the shared network (the paper uses dropout 0.1 here only).
      similarity: pair score, "dot" (the paper, §6.3) or "cosine".
      temperature: τ dividing the scores (the paper: none, i.e. 1.0).
      gradient_cache_chunk: sentences encoded together under gradient
        caching (must divide 2B, both sides stacked; a multiple of the data
        axis keeps chunks sharded); 0 encodes the whole [2B] batch at once.
        Activation memory then scales with the chunk, not the batch.
    """
    super().__init__(network_config)
    losses.check_similarity(similarity, temperature)
    self.similarity = similarity
    self.temperature = temperature
    self.gradient_cache_chunk = gradient_cache_chunk

  def loss_fn(self, params, batch, dropout_rng, step=0):
    tokens, mask, _ = models.both_sides(batch)
    rngs = self.sentence_rngs(dropout_rng, tokens.shape[0])
    if self.gradient_cache_chunk:
      mu = self.chunked_embeddings(params, tokens, mask, rngs, dropout_rng)
    else:
      mu = self.embeddings(params, tokens, mask, rngs, dropout_rng)
    mu_a, mu_b = models.split_halves(mu)
    loss, metrics = info_nce_terms(batch, mu_a, mu_b, self.temperature, self.similarity)
    return loss, metrics | {"loss": loss, "embedding_norm": jnp.mean(jnp.linalg.norm(mu_a, axis=-1))}

  def sentence_rngs(self, dropout_rng, rows: int):
    """One dropout key per sentence [rows], or None when dropout is off."""
    if dropout_rng is None or self.network_config.dropout_rate == 0:
      return None
    return jax.random.split(dropout_rng, rows)

  def embeddings(self, params, tokens, mask, rngs, dropout_rng):
    """μ_sem float32 [N, d] of tokens/mask [N, L]; rngs [N] keys or None.

    With per-sentence keys each row's dropout masks are drawn from its own
    key (layers.row_dropout_keys), so they do not depend on which rows share
    its batch; the encoder still runs on the whole batch at once.
    """
    if rngs is None:
      return self.semantic(params, tokens, mask, dropout_rng)[0]
    with layers.row_dropout_keys(rngs):  # one fixed key for the sites: masks vary by row key
      return self.semantic(params, tokens, mask, jax.random.key(0))[0]

  def chunked_embeddings(self, params, tokens, mask, rngs, dropout_rng):
    """`embeddings` computed `gradient_cache_chunk` rows at a time (see module doc).

    Chunk k holds rows k, k + n, k + 2n, ... (n chunks): the batch is split
    into contiguous blocks over the data axis, so a strided chunk takes
    chunk / data rows from every device's block and stays sharded.
    """
    rows, chunk = tokens.shape[0], self.gradient_cache_chunk
    if rows % chunk:
      raise ValueError(
          f"Contrastive.gradient_cache_chunk={chunk} does not divide the {rows} sentences "
          f"of a batch (2 × batch size); pick a divisor in the gin file.")
    n = rows // chunk
    to_chunks = lambda x: None if x is None else jnp.swapaxes(
        x.reshape((chunk, n) + x.shape[1:]), 0, 1)

    @jax.checkpoint  # keep only the chunk's inputs; recompute it in the backward
    def encode_chunk(args):
      t, m, k = args
      return self.embeddings(params, t, m, k, dropout_rng)

    mu = jax.lax.map(encode_chunk, (to_chunks(tokens), to_chunks(mask), to_chunks(rngs)))
    return jnp.swapaxes(mu, 0, 1).reshape(rows, -1)
