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

Mined hard negatives (`hard_negatives=K`, a task written by
`python -m vmsst.hard_negatives`): each pair carries its K negatives in
`tokens_negative` [K·L] (the triplet tasks' feature, K = 1), encoded with the
pair and added to its own row of the a→b softmax (`hard_negative_terms`).
"""

from vmsst.base.gin_utils import gin
import jax
import jax.numpy as jnp

from vmsst.model import layers
from vmsst.model import losses
from vmsst.model import models
from vmsst.objectives import nested as nested_lib


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


def negative_features(batch_size: int, length: int, count: int) -> dict[str, jax.ShapeDtypeStruct]:
  """`tokens_negative` int32 [B, K·L]: each pair's K negatives, each 0-padded to L; {} if K = 0."""
  if not count:
    return {}
  return {"tokens_negative": jax.ShapeDtypeStruct((batch_size, count * length), jnp.int32)}


def negative_rows(batch: models.Batch, count: int):
  """(tokens, mask) int32 [B·K, L] of the pairs' negatives: row i·K + k is pair i's k-th.

  Raises:
    ValueError: the batch has no `tokens_negative`, or not K of them per pair.
  """
  rows, length = batch["tokens_a"].shape
  if "tokens_negative" not in batch or batch["tokens_negative"].shape[1] != count * length:
    have = batch["tokens_negative"].shape if "tokens_negative" in batch else "none"
    raise ValueError(f"hard_negatives = {count} needs tokens_negative [B, {count} × {length}] "
                     f"(have {have}): train on a task written by python -m vmsst.hard_negatives "
                     "with that many negatives (hard_negative_tasks), or set hard_negatives "
                     "to it in the gin file.")
  tokens = batch["tokens_negative"].reshape(rows * count, length)
  return tokens, (tokens != 0).astype(jnp.int32)


def with_negative_rows(batch: models.Batch, tokens, mask, count: int):
  """tokens, mask [2B, L] with the negatives' rows appended ([2B + B·K, L]) when K > 0."""
  if not count:
    return tokens, mask
  negative_tokens, negative_mask = negative_rows(batch, count)
  return jnp.concatenate([tokens, negative_tokens]), jnp.concatenate([mask, negative_mask])


def hard_negative_terms(batch: models.Batch, mu_a, mu_b, mu_negatives, temperature: float,
                        similarity: str):
  """`info_nce_terms` with each pair's own K negatives in its a→b row: (loss, metrics).

  mu_negatives: float [B·K, d], rows as `negative_rows`, or None (then it is
  `info_nce_terms`). A negative that is all padding (the miner found fewer
  than K) is masked out.
  """
  if mu_negatives is None:
    return info_nce_terms(batch, mu_a, mu_b, temperature, similarity)
  rows = mu_a.shape[0]
  negatives = mu_negatives.reshape(rows, -1, mu_negatives.shape[-1])
  tokens = batch["tokens_negative"].reshape(rows, negatives.shape[1], -1)
  valid = jnp.any(tokens != 0, axis=-1)
  loss, accuracy = losses.info_nce_with_hard_negatives(
      mu_a, mu_b, negatives, valid, temperature,
      duplicates_a=losses.same_sequence_matrix(batch["tokens_a"]),
      duplicates_b=losses.same_sequence_matrix(batch["tokens_b"]),
      similarity=similarity)
  return loss, {"contrastive_loss": loss, "contrastive_accuracy": accuracy,
                "hard_negatives_valid": jnp.mean(valid.astype(jnp.float32))}


def split_negative_rows(mu, batch: models.Batch):
  """(μ of the [2B] pair rows, μ of the negatives' rows [B·K] or None)."""
  pairs = 2 * batch["tokens_a"].shape[0]
  return mu[:pairs], (mu[pairs:] if mu.shape[0] > pairs else None)


@gin.configurable
class Contrastive(models.EmbeddingModel):
  """Dual encoder trained with in-batch negatives."""

  init_paths = staticmethod(models.init_semantic_path)

  def __init__(self, network_config, *, similarity: str = "dot",
               temperature: float = 1.0, gradient_cache_chunk: int = 0,
               nested: nested_lib.NestedDims | None = None, hard_negatives: int = 0):
    """Args:
      network_config: the shared network (the paper uses dropout 0.1 here only).
      similarity: pair score, "dot" (the paper, §6.3) or "cosine".
      temperature: τ dividing the scores (the paper: none, i.e. 1.0).
      gradient_cache_chunk: sentences encoded together under gradient
        caching (must divide 2B, both sides stacked; a multiple of the data
        axis keeps chunks sharded); 0 encodes the whole [2B] batch at once.
        Activation memory then scales with the chunk, not the batch.
      nested: Matryoshka sizes (objectives/nested.py): the InfoNCE of each
        k-prefix of μ_sem, weighted; None trains the full vector only.
      hard_negatives: K mined negatives per pair in `tokens_negative`
        (`hard_negative_terms`); 0 trains on in-batch negatives only.
    """
    super().__init__(network_config)
    losses.check_similarity(similarity, temperature)
    self.similarity = similarity
    self.temperature = temperature
    self.gradient_cache_chunk = gradient_cache_chunk
    self.nested = nested_lib.checked(nested, network_config.emb_dim, "Contrastive")
    self.hard_negatives = hard_negatives

  def extra_features(self, batch_size: int, length: int) -> dict[str, jax.ShapeDtypeStruct]:
    return negative_features(batch_size, length, self.hard_negatives)

  def loss_fn(self, params, batch, dropout_rng, step=0):
    tokens, mask, _ = models.both_sides(batch)
    tokens, mask = with_negative_rows(batch, tokens, mask, self.hard_negatives)
    rngs = self.sentence_rngs(dropout_rng, tokens.shape[0])
    if self.gradient_cache_chunk:
      mu = self.chunked_embeddings(params, tokens, mask, rngs, dropout_rng)
    else:
      mu = self.embeddings(params, tokens, mask, rngs, dropout_rng)
    mu, mu_negatives = split_negative_rows(mu, batch)
    mu_a, mu_b = models.split_halves(mu)
    cut = lambda x, k: None if x is None else nested_lib.prefix(x, k)
    loss, metrics = nested_lib.nested_loss(self.nested, mu_a.shape[-1], lambda k: (
        hard_negative_terms(batch, cut(mu_a, k), cut(mu_b, k), cut(mu_negatives, k),
                            self.temperature, self.similarity)))
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
          f"of a batch (2 × batch size, plus K × batch size with hard_negatives = K); pick a "
          "divisor in the gin file.")
    n = rows // chunk
    to_chunks = lambda x: None if x is None else jnp.swapaxes(
        x.reshape((chunk, n) + x.shape[1:]), 0, 1)

    @jax.checkpoint  # keep only the chunk's inputs; recompute it in the backward
    def encode_chunk(args):
      t, m, k = args
      return self.embeddings(params, t, m, k, dropout_rng)

    mu = jax.lax.map(encode_chunk, (to_chunks(tokens), to_chunks(mask), to_chunks(rngs)))
    return jnp.swapaxes(mu, 0, 1).reshape(rows, -1)
