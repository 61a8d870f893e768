"""Loss arithmetic shared by the objectives: pure functions of arrays.

Each function is small enough to check by hand; tests/model/test_losses.py does.
"""

import jax
import jax.numpy as jnp

Array = jax.Array


def l2_normalize(x: Array) -> Array:
  """Rows scaled to unit length (zero rows stay zero): [..., d] -> [..., d]."""
  return x / jnp.linalg.norm(x, axis=-1, keepdims=True).clip(1e-12)


def gaussian_kl(mu: Array, logvar: Array) -> Array:
  """KL(N(μ, diag σ²) ‖ N(0, I)) per example: float [B, d] ×2 -> [B].

  Closed form ½ Σ (σ² + μ² − 1 − log σ²).
  """
  return 0.5 * jnp.sum(jnp.exp(logvar) + jnp.square(mu) - 1.0 - logvar, axis=-1)


def reparameterize(rng: Array, mu: Array, logvar: Array) -> Array:
  """z = μ + σ ⊙ ε with ε ~ N(0, I): a sample differentiable in μ and log σ²."""
  eps = jax.random.normal(rng, mu.shape, mu.dtype)
  return mu + jnp.exp(0.5 * logvar) * eps


def reparameterize_rows(keys: Array, mu: Array, logvar: Array) -> Array:
  """`reparameterize` with row i's ε drawn from keys[i] alone: mu, logvar [B, d], keys [B]."""
  return jax.vmap(reparameterize)(keys, mu, logvar)


def linear_annealing(step: Array, anneal_steps: int) -> Array:
  """KL weight rising linearly from 0 at step 0 to 1 at `anneal_steps`.

  anneal_steps <= 0 means no annealing (weight 1 from the start).
  """
  if anneal_steps <= 0:
    return jnp.ones((), jnp.float32)
  return jnp.minimum(1.0, jnp.asarray(step, jnp.float32) / float(anneal_steps))


def sequence_nll(logits: Array, targets: Array, mask: Array) -> tuple[Array, Array]:
  """Sentence negative log-likelihood and correct-token counts.

  Args:
    logits: float [B, L, V].
    targets: int [B, L].
    mask: int [B, L], 1 on tokens that count (padding contributes nothing).

  Returns:
    (nll float32 [B] summed over the sentence's tokens,
     correct float32 [B] number of argmax hits on counted tokens).
  """
  logp = jax.nn.log_softmax(logits.astype(jnp.float32), axis=-1)
  token_logp = jnp.take_along_axis(logp, targets[..., None].astype(jnp.int32), axis=-1)[..., 0]
  weights = mask.astype(jnp.float32)
  nll = -jnp.sum(token_logp * weights, axis=-1)
  correct = jnp.sum((jnp.argmax(logits, axis=-1) == targets) * weights, axis=-1)
  return nll, correct


def softmax_candidates(targets: Array, mask: Array, vocab_size: int, num_candidates: int,
                       rng: Array) -> tuple[Array, Array, Array]:
  """The vocabulary ids a candidate softmax normalises over, and the targets among them.

  The candidates are every id that is a counted target somewhere in the batch
  (the mini-batch's target vocabulary, Jean et al. 2015 §3), then ids drawn
  uniformly without replacement from the rest until there are
  `num_candidates`. The softmax over them is a biased estimate of the full
  one: each step's partition function misses the ids no sentence of the batch
  uses, which are the ones a full softmax pushes down least. It serves CPU
  runs, where the d × V output product is most of a translation step
  (docs/cpu_recipe.md §9); the paper's runs keep the full vocabulary.

  Args:
    targets: int [..., L] token ids; mask: int [..., L], 1 where a target counts.
    vocab_size: V. num_candidates: K ≤ V.
    rng: key of the uniform draw.
  Returns:
    (candidates int32 [K]; target_index int32 [..., L], each target's column
     among the candidates (0 where it has none); found bool [..., L], False
     where a counted target's id did not fit in K: more distinct target ids
     than K. Callers mask those out of the loss and report the count.)
  """
  if not 0 < num_candidates <= vocab_size:
    raise ValueError(f"num_candidates={num_candidates}: a candidate softmax needs "
                     f"0 < K <= vocab_size ({vocab_size}).")
  counted = jnp.where(mask > 0, targets, vocab_size).reshape(-1).astype(jnp.int32)
  present = jnp.zeros((vocab_size,), jnp.float32).at[counted].set(1.0, mode="drop")
  # Present ids score in [1, 2), the rest in [0, 1): top-K takes every present id first.
  priority = present + jax.random.uniform(rng, (vocab_size,))
  _, candidates = jax.lax.top_k(priority, num_candidates)
  column = jnp.full((vocab_size,), -1, jnp.int32).at[candidates].set(
      jnp.arange(num_candidates, dtype=jnp.int32))
  target_index = column[targets.astype(jnp.int32)]
  return candidates.astype(jnp.int32), jnp.maximum(target_index, 0), target_index >= 0


def same_sequence_matrix(tokens: Array) -> Array:
  """bool [B, B]: True where rows i and j hold identical token sequences.

  Multi-parallel corpora (NTREX) put the same English sentence in several
  pairs of a batch; those copies must not count as negatives of each other.
  """
  return jnp.all(tokens[:, None, :] == tokens[None, :, :], axis=-1)


SIMILARITIES = ("dot", "cosine")


def check_similarity(similarity: str, temperature: float) -> None:
  """Raises ValueError on an unknown similarity or a temperature <= 0."""
  if similarity not in SIMILARITIES:
    raise ValueError(f"similarity must be one of {SIMILARITIES}, got {similarity!r} "
                     "(gin: Contrastive.similarity / VMSSTContrastive.similarity).")
  if temperature <= 0:
    raise ValueError(f"temperature must be > 0, got {temperature} "
                     "(gin: Contrastive.temperature / VMSSTContrastive.temperature).")


def pair_scores(a: Array, b: Array, similarity: str, temperature: float) -> Array:
  """float32 [B, B] scores of every a_i against every b_j.

  "dot": a_i · b_j, the VMSST paper's Contrastive baseline (§6.3: p(s_i | t_i)
  = exp(s_i · t_i) / Σ_j exp(s_i · t_j), no normalisation, no temperature);
  `temperature` divides it all the same (1.0 is the paper's form).
  "cosine": cos(a_i, b_j) / temperature (SimCLR / SimCSE style).

  Raises:
    ValueError: see `check_similarity`.
  """
  check_similarity(similarity, temperature)
  # float32 first: bfloat16 scores would be coarser than 1/τ needs.
  a, b = a.astype(jnp.float32), b.astype(jnp.float32)
  if similarity == "cosine":
    a, b = l2_normalize(a), l2_normalize(b)
  return (a @ b.T) / temperature


def symmetric_info_nce(a: Array, b: Array, temperature: float,
                       duplicates_a: Array | None = None,
                       duplicates_b: Array | None = None, *,
                       similarity: str = "cosine") -> tuple[Array, Array]:
  """In-batch symmetric InfoNCE.

  Row i of `a` is paired with row i of `b`; every other row of the other side
  is a negative, except rows that duplicate the positive's sentence.

  Args:
    a, b: float [B, d] embeddings.
    temperature: τ dividing the scores.
    duplicates_a, duplicates_b: optional bool [B, B] same-sentence matrices
      of each side; b_j with b_j == b_i is masked out of a_i's candidates
      (and symmetrically), keeping the diagonal.
    similarity: "dot" (a · b / τ) or "cosine" (cos / τ); see `pair_scores`.

  Returns:
    (loss: mean of the a→b and b→a cross-entropies, float32 [];
     accuracy: fraction of argmax hits over both directions, float32 []).
  """
  sim = pair_scores(a, b, similarity, temperature)
  eye = jnp.eye(sim.shape[0], dtype=bool)
  sim_ab = _mask_duplicates(sim, duplicates_b, eye)
  sim_ba = _mask_duplicates(sim.T, duplicates_a, eye)
  labels = jnp.arange(sim.shape[0])
  loss_ab = -jnp.mean(diagonal(jax.nn.log_softmax(sim_ab, axis=-1)))
  loss_ba = -jnp.mean(diagonal(jax.nn.log_softmax(sim_ba, axis=-1)))
  hits = jnp.concatenate([jnp.argmax(sim_ab, -1) == labels, jnp.argmax(sim_ba, -1) == labels])
  return 0.5 * (loss_ab + loss_ba), jnp.mean(hits.astype(jnp.float32))


def diagonal(matrix: Array) -> Array:
  """`matrix[i, i]` of a square [n, n] matrix, as one gather (and, in the gradient, one
  scatter) that the compiler orders with the step's other collectives.

  Not `jnp.diagonal`: for a square matrix it lowers to a platform-dependent `conditional`
  that holds the gather. With the matrix sharded over devices, the partitioner puts the
  gather's collectives inside that conditional, and XLA:CPU does not keep them in one order
  with the step's other collectives: with several CPU devices one device waited in the
  conditional's all-gather while the others waited in a later all-to-all, until XLA aborted
  the process (docs/results/tests/). The gather here is the conditional's own default branch,
  the one every backend took, so the values are the same.
  """
  rows = jnp.arange(matrix.shape[0])
  return matrix[rows, rows]


def _mask_duplicates(sim: Array, duplicates: Array | None, eye: Array) -> Array:
  if duplicates is None:
    return sim
  return jnp.where(duplicates & ~eye, -1e9, sim)


def hard_negative_scores(a: Array, negatives: Array, similarity: str, temperature: float) -> Array:
  """float32 [B, K] scores of each a_i against its own K negatives n_ik ([B, d], [B, K, d]).

  The same score as `pair_scores` (dot or cosine, over τ), row by row.
  """
  check_similarity(similarity, temperature)
  a, negatives = a.astype(jnp.float32), negatives.astype(jnp.float32)
  if similarity == "cosine":
    a, negatives = l2_normalize(a), l2_normalize(negatives)
  return jnp.einsum("bd,bkd->bk", a, negatives) / temperature


def info_nce_with_hard_negatives(a: Array, b: Array, negatives: Array, valid: Array,
                                 temperature: float, duplicates_a: Array | None = None,
                                 duplicates_b: Array | None = None, *,
                                 similarity: str = "cosine") -> tuple[Array, Array]:
  """`symmetric_info_nce` whose a→b rows also hold each anchor's own hard negatives.

  Row i of the a→b softmax is [s(a_i, b_1..B), s(a_i, n_i1..iK)]: the in-batch
  candidates plus a_i's K mined negatives (in b's language, so they compete
  with b_i; another anchor's negatives are not a_i's). Invalid negatives (a
  row mined fewer than K) are masked out. b→a is unchanged: the negatives are
  in b's language and were mined for a.

  Args:
    a, b: float [B, d]; negatives: float [B, K, d]; valid: bool [B, K].
    temperature, duplicates_a, duplicates_b, similarity: as `symmetric_info_nce`.

  Returns:
    (loss, accuracy) as `symmetric_info_nce`; a hit on a→b must beat the negatives too.
  """
  sim = pair_scores(a, b, similarity, temperature)
  eye = jnp.eye(sim.shape[0], dtype=bool)
  hard = jnp.where(valid, hard_negative_scores(a, negatives, similarity, temperature), -1e9)
  sim_ab = jnp.concatenate([_mask_duplicates(sim, duplicates_b, eye), hard], axis=-1)
  sim_ba = _mask_duplicates(sim.T, duplicates_a, eye)
  labels = jnp.arange(sim.shape[0])
  loss_ab = -jnp.mean(jax.nn.log_softmax(sim_ab, axis=-1)[labels, labels])
  loss_ba = -jnp.mean(diagonal(jax.nn.log_softmax(sim_ba, axis=-1)))
  hits = jnp.concatenate([jnp.argmax(sim_ab, -1) == labels, jnp.argmax(sim_ba, -1) == labels])
  return 0.5 * (loss_ab + loss_ba), jnp.mean(hits.astype(jnp.float32))
