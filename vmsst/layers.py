"""Transformer building blocks annotated with logical axis names.

Every parameter is created through `nn.with_logical_partitioning` and every
large activation passes `nn.with_logical_constraint`, so `partitioning.py`
alone decides how a model is laid out over a mesh (as in flax's lm1b example).
Logical axes used here: batch, length, embed, heads, kv, mlp, vocab, latent.
"""

import flax.linen as nn
import jax
import jax.numpy as jnp

from vmsst.config import NetworkConfig

Array = jax.Array

_EMBED_INIT = nn.initializers.normal(stddev=1.0)


class Projection(nn.Module):
  """x[..., in dims] · W[in dims, out dims] (+ b), W carrying logical axes.

  Written out instead of nn.DenseGeneral because DenseGeneral initialises a
  flattened kernel, whose rank disagrees with multi-axis logical names under
  a mesh context.
  """

  features: tuple[int, ...]
  axes: tuple[str, ...]
  cfg: NetworkConfig
  in_axis_count: int = 1
  use_bias: bool = False

  @nn.compact
  def __call__(self, x: Array) -> Array:
    in_shape = x.shape[x.ndim - self.in_axis_count:]
    init = nn.initializers.variance_scaling(
        1.0, "fan_in", "truncated_normal", in_axis=tuple(range(self.in_axis_count)),
        out_axis=tuple(range(self.in_axis_count, len(self.axes))))
    kernel = self.param("kernel", nn.with_logical_partitioning(init, self.axes),
                        in_shape + self.features, jnp.float32)
    contract = tuple(range(x.ndim - self.in_axis_count, x.ndim))
    y = jax.lax.dot_general(x.astype(self.cfg.dtype), kernel.astype(self.cfg.dtype),
                            ((contract, tuple(range(self.in_axis_count))), ((), ())))
    if self.use_bias:
      bias = self.param("bias", nn.with_logical_partitioning(nn.initializers.zeros,
                                                              self.axes[self.in_axis_count:]),
                        self.features, jnp.float32)
      y = y + bias.astype(self.cfg.dtype)
    return y


def dense(features, axes, cfg: NetworkConfig, name: str, in_axis_count: int = 1,
          use_bias: bool = False) -> Projection:
  """A Projection to `features` (int or tuple) whose kernel has logical `axes`."""
  features = (features,) if isinstance(features, int) else tuple(features)
  return Projection(features, tuple(axes), cfg, in_axis_count, use_bias, name=name)


def layer_norm(name: str, cfg: NetworkConfig) -> nn.LayerNorm:
  return nn.LayerNorm(
      dtype=cfg.dtype,
      scale_init=nn.with_logical_partitioning(nn.initializers.ones, ("embed",)),
      bias_init=nn.with_logical_partitioning(nn.initializers.zeros, ("embed",)),
      name=name,
  )


class Embed(nn.Module):
  """Token embedding table shared by every encoder and the decoder input."""

  cfg: NetworkConfig

  def setup(self):
    self.embedding = self.param(
        "embedding",
        nn.with_logical_partitioning(_EMBED_INIT, ("vocab", "embed")),
        (self.cfg.vocab_size, self.cfg.emb_dim),
    )

  def __call__(self, ids: Array) -> Array:
    """int32 [..., L] -> cfg.dtype [..., L, d] (T5-style unit-variance table)."""
    return jnp.take(jnp.asarray(self.embedding, self.cfg.dtype), ids, axis=0)


class PositionEmbed(nn.Module):
  """Learned absolute positions (one table per stack, not shared)."""

  cfg: NetworkConfig

  @nn.compact
  def __call__(self, x: Array) -> Array:
    table = self.param(
        "positions",
        nn.with_logical_partitioning(nn.initializers.normal(0.02), ("length", "embed")),
        (self.cfg.max_length, self.cfg.emb_dim),
    )
    length = x.shape[-2]
    if length > self.cfg.max_length:
      raise ValueError(
          f"sequence length {length} exceeds NetworkConfig.max_length "
          f"{self.cfg.max_length}; raise max_length in the model gin file.")
    return x + jnp.asarray(table[:length], x.dtype)


class SelfAttention(nn.Module):
  """Multi-head self-attention; `mask` is [B, 1, Lq, Lk] boolean."""

  cfg: NetworkConfig

  @nn.compact
  def __call__(self, x: Array, mask: Array, deterministic: bool) -> Array:
    cfg = self.cfg
    heads = (cfg.num_heads, cfg.head_dim)
    q = dense(heads, ("embed", "heads", "kv"), cfg, "query")(x)
    k = dense(heads, ("embed", "heads", "kv"), cfg, "key")(x)
    v = dense(heads, ("embed", "heads", "kv"), cfg, "value")(x)
    q = nn.with_logical_constraint(q, ("batch", "length", "heads", "kv"))
    out = nn.dot_product_attention(q, k, v, mask=mask, dtype=cfg.dtype)
    out = nn.with_logical_constraint(out, ("batch", "length", "heads", "kv"))
    out = dense(cfg.emb_dim, ("heads", "kv", "embed"), cfg, "out", in_axis_count=2)(out)
    return nn.Dropout(cfg.dropout_rate)(out, deterministic=deterministic)


class MlpBlock(nn.Module):
  """Position-wise feed-forward block (GELU)."""

  cfg: NetworkConfig

  @nn.compact
  def __call__(self, x: Array, deterministic: bool) -> Array:
    cfg = self.cfg
    h = dense(cfg.mlp_dim, ("embed", "mlp"), cfg, "wi", use_bias=True)(x)
    h = nn.with_logical_constraint(nn.gelu(h), ("batch", "length", "mlp"))
    h = nn.Dropout(cfg.dropout_rate)(h, deterministic=deterministic)
    out = dense(cfg.emb_dim, ("mlp", "embed"), cfg, "wo", use_bias=True)(h)
    return nn.Dropout(cfg.dropout_rate)(out, deterministic=deterministic)


class EncoderLayer(nn.Module):
  """Pre-LayerNorm bidirectional Transformer layer."""

  cfg: NetworkConfig

  @nn.compact
  def __call__(self, x: Array, mask: Array, deterministic: bool) -> Array:
    x = x + SelfAttention(self.cfg, name="attention")(
        layer_norm("pre_attention_norm", self.cfg)(x), mask, deterministic)
    x = x + MlpBlock(self.cfg, name="mlp")(
        layer_norm("pre_mlp_norm", self.cfg)(x), deterministic)
    return nn.with_logical_constraint(x, ("batch", "length", "embed"))


class LatentInjection(nn.Module):
  """Replaces cross-attention: h + W [LN(h); z], z broadcast over positions.

  The decoder sees the source sentence only through z, which is what makes the
  latent (and so μ_sem) carry the meaning.
  """

  cfg: NetworkConfig

  @nn.compact
  def __call__(self, x: Array, latent: Array, deterministic: bool) -> Array:
    normed = layer_norm("pre_latent_norm", self.cfg)(x)
    z = jnp.broadcast_to(latent[:, None, :], x.shape[:2] + latent.shape[-1:])
    joined = jnp.concatenate([normed, z.astype(x.dtype)], axis=-1)
    out = dense(self.cfg.emb_dim, ("latent", "embed"), self.cfg, "latent_proj",
                 use_bias=True)(joined)
    return x + nn.Dropout(self.cfg.dropout_rate)(out, deterministic=deterministic)


class DecoderLayer(nn.Module):
  """Causal self-attention, latent injection (no cross-attention), MLP."""

  cfg: NetworkConfig

  @nn.compact
  def __call__(self, x: Array, latent: Array, mask: Array, deterministic: bool) -> Array:
    x = x + SelfAttention(self.cfg, name="attention")(
        layer_norm("pre_attention_norm", self.cfg)(x), mask, deterministic)
    x = LatentInjection(self.cfg, name="latent")(x, latent, deterministic)
    x = x + MlpBlock(self.cfg, name="mlp")(
        layer_norm("pre_mlp_norm", self.cfg)(x), deterministic)
    return nn.with_logical_constraint(x, ("batch", "length", "embed"))


def padding_attention_mask(mask: Array) -> Array:
  """int [B, L] (1 = token) -> bool [B, 1, L, L] allowing token↔token pairs."""
  m = mask.astype(bool)
  return m[:, None, :, None] & m[:, None, None, :]


def causal_attention_mask(mask: Array) -> Array:
  """Padding mask intersected with the lower triangle, bool [B, 1, L, L]."""
  length = mask.shape[-1]
  causal = jnp.tril(jnp.ones((length, length), bool))
  return padding_attention_mask(mask) & causal[None, None]


def masked_mean(x: Array, mask: Array) -> Array:
  """Mean over real tokens: [B, L, d], [B, L] -> [B, d] (all-padding rows give 0)."""
  m = mask.astype(x.dtype)[..., None]
  return (x * m).sum(axis=-2) / jnp.maximum(m.sum(axis=-2), 1.0)


class Stack(nn.Module):
  """N encoder layers followed by a final LayerNorm."""

  cfg: NetworkConfig
  num_layers: int

  @nn.compact
  def __call__(self, x: Array, mask: Array, deterministic: bool) -> Array:
    attention_mask = padding_attention_mask(mask)
    for i in range(self.num_layers):
      x = EncoderLayer(self.cfg, name=f"layer_{i}")(x, attention_mask, deterministic)
    return layer_norm("final_norm", self.cfg)(x)


class GaussianHead(nn.Module):
  """Linear maps from a pooled state to μ and log σ² (both [B, d])."""

  cfg: NetworkConfig

  @nn.compact
  def __call__(self, pooled: Array) -> tuple[Array, Array]:
    mu = dense(self.cfg.emb_dim, ("embed", "latent"), self.cfg, "mu", use_bias=True)(pooled)
    logvar = dense(self.cfg.emb_dim, ("embed", "latent"), self.cfg, "logvar",
                    use_bias=True)(pooled)
    return mu.astype(jnp.float32), logvar.astype(jnp.float32)
