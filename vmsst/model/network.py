"""The VMSST network: semantic encoder, language encoder(s), latent-fed decoder.

Objectives call the three methods they need (`encode_semantic`,
`encode_language`, `decode`) through `Module.apply(..., method=...)`; flax only
creates the parameters of the methods an objective's initialisation runs, so
Contrastive has no decoder and BiTranslation no language encoder.

Shapes: tokens/mask int32 [B, L]; languages int32 [B] (language ids: indices
into vmsst.base.languages.LANGUAGES); latents float32 [B, d] each.

Language ids have their own table, `language_embed/embedding` [num_languages,
d] (logical axes ("languages", "embed")), outside the token vocabulary: a row
is added to every language-encoder input position and is the decoder's first
input (the paper's "input embedding to indicate the language", §7.2). Any
SentencePiece model therefore works unchanged, mT5's included (§5 uses the mT5
vocabulary for every model). Checkpoints written before this embedded
`<2xxx>` vocabulary pieces through the token table and have no
`language_embed`: `vmsst.encoding.restore` rebuilds it from those rows;
resuming training in such a MODEL_DIR is refused (vmsst.training.checkpointing).

Positions are learned absolute tables per stack, or (NetworkConfig.
relative_attention) T5 relative biases owned by each encoder stack and by the
decoder; then no `*_positions` parameters exist.

Memory switches (NetworkConfig.remat, scan_layers) change how the layers run,
not what they compute; scan_layers stacks each stack's layers
(`decoder/layers/...` instead of `decoder_layer_<i>/...`).
"""

import flax.linen as nn
import jax
import jax.numpy as jnp

from vmsst.model import layer_stacks
from vmsst.model import layers
from vmsst.model.config import NetworkConfig

Array = jax.Array


# The parameters `output_logits` reads: the vocabulary head, run a tile at a time by
# vmsst.model.vocab_tiling (token_embed only when tie_output_embedding puts it there).
OUTPUT_HEAD = ("output_projection", "output_bottleneck", "token_embed")


class VMSSTNetwork(nn.Module):
  """Encoders and decoder sharing only the token and language embedding tables."""

  cfg: NetworkConfig

  def setup(self):
    cfg = self.cfg
    if cfg.tie_output_embedding and cfg.factorized_output:
      raise ValueError("NetworkConfig.tie_output_embedding reads h·Eᵀ straight from the "
                       "decoder state; it cannot be combined with factorized_output.")
    self.embed = layers.Embed(cfg, name="token_embed")
    self.language_embed = layers.LanguageEmbed(cfg, name="language_embed")
    self.semantic_positions = self._positions("semantic_positions")
    self.semantic_stack = layer_stacks.Stack(cfg, cfg.num_encoder_layers, name="semantic_encoder")
    self.semantic_head = layers.GaussianHead(cfg, name="semantic_head")
    if not cfg.share_encoders:
      self.language_positions = [
          self._positions(f"language_positions_{i}") for i in range(cfg.num_language_encoders)]
      self.language_stacks = [
          layer_stacks.Stack(cfg, cfg.num_language_encoder_layers, name=f"language_encoder_{i}")
          for i in range(cfg.num_language_encoders)]
    self.language_head = layers.GaussianHead(cfg, name="language_head")
    if cfg.relative_attention:
      self.decoder_position_bias = layers.RelativePositionBias(
          cfg, bidirectional=False, name="decoder_relative_position_bias")
    else:
      self.decoder_positions = layers.PositionEmbed(cfg, name="decoder_positions")
    if cfg.scan_layers:  # decoder/layers/... stacked [num_decoder_layers, ...]
      self.decoder_layers = [
          layer_stacks.ScannedDecoder(cfg, cfg.num_decoder_layers, name="decoder")]
    else:
      layer = layer_stacks.layer_class(layers.DecoderLayer, cfg)
      self.decoder_layers = [layer(cfg, name=f"decoder_layer_{i}")
                             for i in range(cfg.num_decoder_layers)]
    self.decoder_norm = layers.layer_norm("decoder_final_norm", cfg)
    self.dropout = layers.Dropout(cfg.dropout_rate)
    if cfg.factorized_output:
      self.output_bottleneck = layers.dense(cfg.emb_dim, ("latent", "embed"), cfg,
                                            "output_bottleneck")
    projection_in = "embed" if cfg.factorized_output else "latent"
    self.output_projection = layers.dense(cfg.vocab_size, (projection_in, "vocab"), cfg,
                                          "output_projection", use_bias=cfg.projection_bias)

  def _positions(self, name: str):
    """A learned position table, or identity when the stacks use relative bias."""
    if self.cfg.relative_attention:
      return lambda x: x
    return layers.PositionEmbed(self.cfg, name=name)

  def encode_semantic(self, tokens: Array, mask: Array,
                      deterministic: bool = True) -> tuple[Array, dict[str, Array]]:
    """Semantic inference network q(z_sem | x).

    Returns:
      (μ_sem float32 [B, d], aux) with aux holding `token_states` [B, L, d],
      `pooled` [B, d], `mu` and `logvar` [B, d]. The embedding is μ_sem.
    """
    x = self.semantic_positions(self.embed(tokens))
    x = self.dropout(x, deterministic=deterministic)
    states = self.semantic_stack(x, mask, deterministic)
    pooled = layers.masked_mean(states, mask)
    mu, logvar = self.semantic_head(pooled)
    return mu, {"token_states": states, "pooled": pooled, "mu": mu, "logvar": logvar}

  def encode_language(self, tokens: Array, mask: Array, languages: Array,
                      deterministic: bool = True) -> tuple[Array, Array]:
    """Language inference network q(z_lang | x): (μ, log σ²), float32 [B, d]."""
    x = self.embed(tokens)
    if self.cfg.encoder_language_embedding:
      x = x + self.language_embed(languages)[:, None, :]
    if self.cfg.share_encoders:
      paths = [(self.semantic_positions, self.semantic_stack)]
    else:
      paths = zip(self.language_positions, self.language_stacks)
    pooled = []
    for positions, stack in paths:
      h = self.dropout(positions(x), deterministic=deterministic)
      pooled.append(layers.masked_mean(stack(h, mask, deterministic), mask))
    if len(pooled) == 1:
      chosen = pooled[0]
    else:  # route each sentence to encoder (language id mod K)
      route = jax.nn.one_hot(languages % len(pooled), len(pooled), dtype=pooled[0].dtype)
      chosen = jnp.einsum("bk,kbd->bd", route, jnp.stack(pooled))
    return self.language_head(chosen)

  def decode(self, targets: Array, target_mask: Array, languages: Array,
             latent: Array, deterministic: bool = True,
             candidates: Array | None = None) -> Array:
    """Teacher-forced decoder logits, float32 [B, L, V] (or [B, L, K]).

    `decoder_states` then `output_logits`: the whole [B, L, V] array at once.
    The objectives' full-vocabulary path does not call this; it hands the
    states to `vocab_tiling.sequence_nll`, which runs `output_logits` a tile
    of tokens at a time. Kept for the candidate softmax, initialisation and
    callers that want the logits themselves.

    With `candidates` (int32 [K] vocabulary ids, losses.softmax_candidates)
    the logits are those K columns only: a CPU training speed-up whose
    softmax is over the candidates (default: the whole vocabulary).
    """
    h = self.decoder_states(targets, target_mask, languages, latent, deterministic)
    return self.output_logits(h, self.latent_per_position(latent, h), candidates)

  def decoder_states(self, targets: Array, target_mask: Array, languages: Array,
                     latent: Array, deterministic: bool = True) -> Array:
    """The decoder's final states h, cfg.dtype [B, L, d]: everything before the vocabulary.

    The input is targets shifted right behind a start position: the target
    language's row of `language_embed`, or, when `decoder_language_embedding`
    is off (the paper's "no dec. l.e." ablation), the embedding of T5's start
    id 0, which says nothing about the language. The source enters only as
    `latent` [B, k] (k = 2d for VMSST, d without a language encoder).

    Where the output language then comes from: in the ELBO reconstruction,
    from z_lang ~ q(z_lang | x) in the latent; in the translation terms
    −log p(x_i | μ_sem(x_j)) (paper §4) the language slot of the latent is 0
    (objectives.bitranslation.translation_latent), so without the start row the decoder reads
    the language off the teacher-forced prefix x_<t and predicts the first
    token blind to it (the paper's reading of the ablation, §7.1: "the
    decoder can ascertain the language being input or decoded").
    """
    inputs = jnp.concatenate([jnp.zeros_like(targets[:, :1]), targets[:, :-1]],
                             axis=1).astype(jnp.int32)
    input_mask = jnp.concatenate(
        [jnp.ones_like(target_mask[:, :1]), target_mask[:, :-1]], axis=1)
    x = self.embed(inputs)
    if self.cfg.decoder_language_embedding:
      x = jnp.concatenate([self.language_embed(languages)[:, None, :], x[:, 1:]], axis=1)
    bias = None
    if self.cfg.relative_attention:
      bias = self.decoder_position_bias(x.shape[-2])
    else:
      x = self.decoder_positions(x)
    x = self.dropout(x, deterministic=deterministic)
    attention_mask = layers.causal_attention_mask(input_mask)
    for layer in self.decoder_layers:
      x = layer(x, latent, attention_mask, deterministic, bias)
    return self.decoder_norm(x)

  @staticmethod
  def latent_per_position(latent: Array, h: Array) -> Array:
    """latent [B, k] repeated at each of h's positions, h's dtype [B, L, k]: the
    logits read concat(h, z) at every position (the latent injected at the logits)."""
    return jnp.broadcast_to(latent[:, None, :], h.shape[:2] + latent.shape[-1:]).astype(h.dtype)

  def output_logits(self, h: Array, z: Array, candidates: Array | None = None) -> Array:
    """concat(h, z) → vocabulary logits, float32 [..., V]; 3d × V, or 3d × d then d × V
    when factorized.

    h [..., d] and z [..., k] share their leading axes: [B, L] for a batch of
    sentences, [tokens] for a tile of `vocab_tiling`. With tie_output_embedding
    the h rows are the embedding table: h Eᵀ plus a projection of z alone.
    `candidates` restricts the vocabulary columns. Reads only the parameters
    `OUTPUT_HEAD` names.
    """
    axes = ("batch", "length", "vocab") if h.ndim == 3 else ("batch", "vocab")
    if self.cfg.tie_output_embedding:
      table = jnp.asarray(self.embed.embedding, h.dtype)
      if candidates is not None:
        table = jnp.take(table, candidates, axis=0)
      logits = (jnp.einsum("...d,vd->...v", h, table)
                + self.output_projection(z.astype(h.dtype), candidates))
      return nn.with_logical_constraint(logits.astype(jnp.float32), axes)
    joined = jnp.concatenate([h, z.astype(h.dtype)], axis=-1)
    if self.cfg.factorized_output:
      joined = self.output_bottleneck(joined)
    logits = self.output_projection(joined, candidates)
    return nn.with_logical_constraint(logits.astype(jnp.float32), axes)

  def __call__(self, batch: dict[str, Array], deterministic: bool = True) -> Array:
    """Runs every path once; used only to create all parameters at init."""
    mu, _ = self.encode_semantic(batch["tokens_a"], batch["mask_a"], deterministic)
    lang_mu, _ = self.encode_language(batch["tokens_a"], batch["mask_a"], batch["lang_a"],
                                      deterministic)
    latent = jnp.concatenate([lang_mu, mu], axis=-1)
    return self.decode(batch["tokens_a"], batch["mask_a"], batch["lang_a"], latent,
                       deterministic)
