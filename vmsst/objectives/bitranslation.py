"""BiTranslation: VMSST without the ELBO and without a language encoder.

loss = −log p(x_a | μ_sem(x_b)) − log p(x_b | μ_sem(x_a)), the decoder fed
μ_sem alone (output projection 2d × V) and the target-language start symbol.

The translation terms (`translation_latent`, `decode_nll`, `pair_sum`,
`translation_metrics`) live here and are shared with VMSST (variational.py),
whose loss carries the same bitranslation term.

Every dropout mask is drawn from the pair's own key (models.pair_keys): the
encoder's rows from stream ENCODER_STREAM, the decoder's (each prefix width's
[a; b] translations, then VMSST's reconstructions) from DECODER_STREAM and
the copy's number, each side folded in (models.side_keys). A sentence's masks
then do not depend on which microbatch it falls in, so `train.microbatches`
gives the update of the whole batch (up to the order of float sums); only
the candidate softmax (`softmax_candidates`) draws once per microbatch.
"""

import functools

from vmsst.base.gin_utils import gin
import jax
import jax.numpy as jnp

from vmsst.model import losses
from vmsst.model import models
from vmsst.model import vocab_tiling
from vmsst.model.network import OUTPUT_HEAD, VMSSTNetwork
from vmsst.objectives import nested as nested_lib

Array = jax.Array

# fold_in stream of the candidate draw, apart from the decoder's dropout keys.
CANDIDATE_STREAM = 0x5A
# fold_in streams of a pair's key (models.pair_keys): the semantic encoder's
# dropout, the decoder's (variational.py adds its language encoder and noise).
ENCODER_STREAM, DECODER_STREAM = 0, 1


def encoder_row_keys(keys: Array | None) -> Array | None:
  """The semantic encoder's dropout keys of the [a; b] rows [2B], from pair keys [B]."""
  return models.side_keys(models.stream_keys(keys, ENCODER_STREAM))


def decoder_row_keys(keys: Array | None, copies: int) -> Array | None:
  """Dropout keys of `copies` stacked [a; b] decodes, [copies·2B], from pair keys [B]:
  copy c's rows fold the pair's key with DECODER_STREAM, c and the side."""
  if keys is None:
    return None
  return jnp.concatenate([models.side_keys(models.stream_keys(keys, DECODER_STREAM, copy))
                          for copy in range(copies)], axis=0)


def decode_nll(model: models.EmbeddingModel, params, targets: Array, mask: Array,
               languages: Array, latent: Array, rng: Array | None,
               softmax_candidates: int = 0) -> tuple[Array, Array, dict[str, Array]]:
  """Per-sentence NLL and correct-token counts of decoding `targets` from `latent`.

  Over the whole vocabulary the decoder hands back its states and the head
  runs a tile of tokens at a time (`vocab_tiling.sequence_nll`,
  NetworkConfig.vocab_tile_tokens; 0 there computes whole logits).

  With `softmax_candidates` = K, 0 < K < V, the softmax runs over K
  vocabulary ids (the batch's targets, then uniform draws;
  losses.softmax_candidates), so NLLs and accuracies are over those K; K ≥ V
  is the full softmax (a run file's K then needs no change for a small test
  vocabulary). The third value holds the
  candidate metrics: `softmax_candidates_missed`, counted target tokens whose
  id did not fit in K (left out of the loss; 0 whenever K ≥ the batch's
  distinct targets), empty with the full softmax.

  `rng`: the decoder's dropout key, or one key per row of `targets` (each
  row's masks then drawn from its own key, `_decoder_apply`), or None (no
  dropout). The candidate draw is one per call (from the first row's key):
  with microbatches each draws its own candidates, so the candidate softmax
  is the one term whose update depends on `train.microbatches`.
  """
  cfg = model.network_config
  if 0 < softmax_candidates < cfg.vocab_size:
    key = jax.random.PRNGKey(0) if rng is None else jax.random.fold_in(
        rng if models.is_one_key(rng) else rng[0], CANDIDATE_STREAM)  # one draw per batch
    candidates, labels, found = losses.softmax_candidates(
        targets, mask, cfg.vocab_size, softmax_candidates, key)
    logits = _decoder_apply(model, params, targets, mask, languages, latent, rng is None,
                            candidates, method=VMSSTNetwork.decode, rng=rng)
    return (*losses.sequence_nll(logits, labels, jnp.where(found, mask, 0)),
            {"softmax_candidates_missed": jnp.sum(mask * ~found).astype(jnp.float32)})
  h = _decoder_apply(model, params, targets, mask, languages, latent, rng is None,
                     method=VMSSTNetwork.decoder_states, rng=rng)
  z = VMSSTNetwork.latent_per_position(latent, h)
  head = {k: params[k] for k in OUTPUT_HEAD if k in params}
  return (*vocab_tiling.sequence_nll(functools.partial(_head_logits, model), head, (h, z),
                                     targets, mask, cfg.vocab_tile_tokens), {})


def _decoder_apply(model: models.EmbeddingModel, params, *args, method, rng: Array | None):
  """`model.apply` of a decoder method with `rng` one key, or row keys [rows]
  (EmbeddingModel.apply_rows: row i's dropout masks from rng[i] alone)."""
  if rng is None or models.is_one_key(rng):
    return model.apply(params, *args, method=method, rng=rng)
  return model.apply_rows(params, *args, method=method, row_keys=rng)


def _head_logits(model: models.EmbeddingModel, head_params, inputs) -> Array:
  """The vocabulary logits of one tile of (h, z) rows."""
  return model.apply(head_params, *inputs, method=VMSSTNetwork.output_logits)


def pair_sum(x: Array) -> Array:
  """[a; b] stacked values [2B] -> per-pair sums a + b [B]."""
  first, second = models.split_halves(x)
  return first + second


def translation_latent(mu_a: Array, mu_b: Array, language_slot: int) -> Array:
  """Latents that decode [a; b] from the other side's meaning, [2B, language_slot + d].

  The language latent slot (width `language_slot`, 0 without a language
  encoder) is held at its prior mean 0, so the decoder learns each sentence
  from the other sentence's μ_sem plus the target language's start row:
  −log p(x_a | μ_sem(x_b)) − log p(x_b | μ_sem(x_a)) (paper §4). Without that
  row (the "no dec. l.e." ablation) the decoder reads the output language off
  the target prefix, as gin/models/ablations/no_decoder_language_embedding.gin
  explains.
  """
  mu_other = jnp.concatenate([mu_b, mu_a], axis=0)
  slot = jnp.zeros(mu_other.shape[:1] + (language_slot,), mu_other.dtype)
  return jnp.concatenate([slot, mu_other], axis=-1)


def nested_sizes(nested: nested_lib.NestedDims | None, dim: int) -> tuple[int, ...]:
  """The prefix widths the translation terms decode from: (d,) without nesting."""
  return (dim,) if nested is None else nested.sizes


def nested_translation_latents(mu_a: Array, mu_b: Array, language_slot: int,
                               sizes: tuple[int, ...]) -> Array:
  """`translation_latent` for each prefix width k, stacked: [len(sizes)·2B, slot + d].

  Width k decodes from μ_sem with coordinates k.. at their prior mean 0
  (nested_lib.masked_prefix; docs/papers/matryoshka.md says why).
  """
  latents = [translation_latent(nested_lib.masked_prefix(mu_a, k),
                                nested_lib.masked_prefix(mu_b, k), language_slot) for k in sizes]
  return latents[0] if len(latents) == 1 else jnp.concatenate(latents, axis=0)


def repeat_rows(x: Array, times: int) -> Array:
  """x stacked `times` times along the batch (x itself once)."""
  return x if times == 1 else jnp.concatenate([x] * times, axis=0)


def nested_translation_sum(nested: nested_lib.NestedDims | None, nll: Array) -> Array:
  """Per-pair translation NLL [B] summed over the prefix widths with their weights.

  Args:
    nested: the sizes and weights, or None (one width: pair_sum(nll)).
    nll: [n·2B], the decodes of `nested_translation_latents` in its order.
  """
  if nested is None:
    return pair_sum(nll)
  total = None
  for term, weight in zip(_per_width(nll, len(nested.sizes)), nested.weights):
    total = weight * pair_sum(term) if total is None else total + weight * pair_sum(term)
  return total


def nested_translation_metrics(nested: nested_lib.NestedDims | None, nll: Array, correct: Array,
                               mask: Array) -> dict[str, Array]:
  """The largest width's `translation_metrics` ([2B] rows of mask [2B, L]) and, when
  nested, `nested_translation_nll_<k>` per width."""
  if nested is None:
    return translation_metrics(nll, correct, mask)
  widths = len(nested.sizes)
  metrics = {f"nested_translation_nll_{k}": jnp.mean(pair_sum(term))
             for k, term in zip(nested.sizes, _per_width(nll, widths))}
  return translation_metrics(_per_width(nll, widths)[-1], _per_width(correct, widths)[-1],
                             mask) | metrics


def _per_width(x: Array, widths: int) -> list[Array]:
  """[n·2B] stacked decodes -> n arrays [2B], one per prefix width."""
  rows = x.shape[0] // widths
  return [x[i * rows:(i + 1) * rows] for i in range(widths)]


def translation_metrics(nll: Array, correct: Array, mask: Array) -> dict[str, Array]:
  """Metrics of the [a; b] translation NLLs [2B] (mask [2B, L])."""
  tokens = jnp.sum(mask).clip(1)
  return {
      "translation_nll": jnp.mean(pair_sum(nll)),
      "translation_token_accuracy": jnp.sum(correct) / tokens,
      "translation_nll_per_token": jnp.sum(nll) / tokens,
  }


@gin.configurable
class BiTranslation(models.EmbeddingModel):
  """Translation in both directions through the semantic bottleneck."""

  init_paths = staticmethod(models.init_translation_paths)
  loss_is_mean_over_pairs = True

  def __init__(self, network_config, *, softmax_candidates: int = 0,
               nested: nested_lib.NestedDims | None = None):
    """Args:
      network_config: the shared network.
      softmax_candidates: K > 0 normalises each step's softmax over K
        vocabulary ids (the batch's targets first; losses.softmax_candidates),
        a CPU speed-up; 0 (the paper) the whole vocabulary.
      nested: Matryoshka sizes (objectives/nested.py): both translations
        decoded from each k-prefix of μ_sem (the rest at 0), weighted, in one
        decoder call; None decodes from the full μ_sem only.
    """
    super().__init__(network_config)
    self.softmax_candidates = softmax_candidates
    self.nested = nested_lib.checked(nested, network_config.emb_dim, "BiTranslation")

  def loss_fn(self, params, batch, dropout_rng, step=0):
    """`dropout_rng`: the step's key, the batch's pair keys [B], or None (no dropout)."""
    keys = models.pair_keys(dropout_rng, batch["tokens_a"].shape[0])
    tokens, mask, languages = models.both_sides(batch)
    mu_a, mu_b = models.split_halves(
        self.semantic_rows(params, tokens, mask, encoder_row_keys(keys))[0])
    sizes = nested_sizes(self.nested, mu_a.shape[-1])
    latent = nested_translation_latents(mu_a, mu_b, 0, sizes)
    n = len(sizes)
    nll, correct, extra = decode_nll(self, params, repeat_rows(tokens, n), repeat_rows(mask, n),
                                     repeat_rows(languages, n), latent,
                                     decoder_row_keys(keys, n), self.softmax_candidates)
    loss = jnp.mean(nested_translation_sum(self.nested, nll))
    metrics = nested_translation_metrics(self.nested, nll, correct, mask) | extra
    return loss, metrics | {"loss": loss}
