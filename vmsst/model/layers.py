"""Transformer building blocks annotated with logical axis names.

Every parameter is created through `nn.with_logical_partitioning` and every
large activation passes `nn.with_logical_constraint`, so `partitioning.py`
alone decides how a model is laid out over a mesh (as in flax's lm1b example).
Logical axes used here: batch, length, embed, heads, kv, mlp, vocab, latent,
relpos_buckets.

NetworkConfig's T5 switches select T5.1.1 pieces (relative position bias,
RMS norm, gated-GELU MLP, no biases, unscaled logits) inside the same
modules, so an mT5 checkpoint maps onto them (vmsst/model/mt5_conversion.py).
"""

import contextlib
import contextvars
import math

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from vmsst.model import xla_cpu
from vmsst.model.config import NetworkConfig

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
  init_scale: float = 1.0

  @nn.compact
  def __call__(self, x: Array, columns: Array | None = None) -> Array:
    """x · W (+ b); with `columns` (int [K]) only those output columns, [..., K].

    `columns` serves the candidate softmax (losses.softmax_candidates): the
    logits of K vocabulary rows cost K/V of the full product and its gradient.
    """
    in_shape = x.shape[x.ndim - self.in_axis_count:]
    init = nn.initializers.variance_scaling(
        self.init_scale, "fan_in", "truncated_normal", in_axis=tuple(range(self.in_axis_count)),
        out_axis=tuple(range(self.in_axis_count, len(self.axes))))
    kernel = self.param("kernel", nn.with_logical_partitioning(init, self.axes),
                        in_shape + self.features, jnp.float32)
    bias = None
    if self.use_bias:
      bias = self.param("bias", nn.with_logical_partitioning(nn.initializers.zeros,
                                                              self.axes[self.in_axis_count:]),
                        self.features, jnp.float32)
    if columns is not None:
      if self.in_axis_count != 1 or len(self.features) != 1:
        raise ValueError("Projection(columns=...) selects output columns of a 2-D kernel only.")
      kernel = jnp.take(kernel, columns, axis=1)
      bias = None if bias is None else jnp.take(bias, columns, axis=0)
    return projection(x.astype(self.cfg.dtype), kernel, self.in_axis_count, bias)


_ROW_KEYS = contextvars.ContextVar("vmsst_row_dropout_keys", default=None)


@contextlib.contextmanager
def row_dropout_keys(keys: Array):
  """Inside, every Dropout draws row i's mask from keys[i] (and its own site key).

  A sentence's mask then depends on its key and the step's key only, not on
  which sentences share its batch (what gradient caching needs, see
  objectives/contrastive.py), while the network still runs batched: running
  each sentence alone under vmap turns every weight gradient into a batch of
  per-sentence products (10x slower in bf16 on CPU, docs/results/benchmarks/README.md).
  """
  token = _ROW_KEYS.set(keys)
  try:
    yield
  finally:
    _ROW_KEYS.reset(token)


class Dropout(nn.Dropout):
  """nn.Dropout (the same masks) that honours `row_dropout_keys`.

  Masks and the pass after them go through `xla_cpu` (the same masks as
  jax.random.bernoulli, drawn fast on CPU). `broadcast_dims` is not supported.
  """

  @nn.compact
  def __call__(self, inputs, deterministic=None, rng=None):
    deterministic = nn.merge_param("deterministic", self.deterministic, deterministic)
    if self.rate == 0.0 or deterministic:
      return inputs
    if self.broadcast_dims:
      raise ValueError("layers.Dropout draws a full mask; broadcast_dims is not supported.")
    if self.rate == 1.0:  # as flax: x / 0 would make the gradient NaN
      return jnp.zeros_like(inputs)
    keep = 1.0 - self.rate
    rng = rng if rng is not None else self.make_rng(self.rng_collection)
    row_keys = _ROW_KEYS.get()
    if row_keys is None:
      mask = xla_cpu.bernoulli(rng, keep, inputs.shape)
    else:
      if row_keys.shape[0] != inputs.shape[0]:
        raise ValueError(f"row_dropout_keys holds {row_keys.shape[0]} keys for a batch of "
                         f"{inputs.shape[0]} rows.")
      site = jax.random.bits(rng)
      mask = jax.vmap(lambda key: xla_cpu.bernoulli(
          jax.random.fold_in(key, site), keep, inputs.shape[1:]))(row_keys)
    return xla_cpu.separate(jax.lax.select(mask, inputs / keep, jnp.zeros_like(inputs)))


def projection(x: Array, kernel: Array, in_axis_count: int, bias: Array | None = None) -> Array:
  """x[..., in dims] · kernel[in dims, out dims] (f32) (+ bias, f32) -> x.dtype.

  Computed as one [M, K] x [K, N] product of the flattened operands, the
  bias added to its float32 result:
  * low precision (bf16 x): accumulated in float32 (`xla_cpu.matmul`);
  * the bias gradient is then a column sum of a 2-D [M, N] array. Added to
    the [B, L, N] result instead, its gradient sums over two axes, which
    XLA:CPU runs as a float32 convert plus a windowed tree reduction: 70 ms
    for one MLP bias of the cpu6 bf16 step against 2.6 ms.
  """
  lead, ins = x.shape[:x.ndim - in_axis_count], x.shape[x.ndim - in_axis_count:]
  outs = kernel.shape[in_axis_count:]
  x = x.reshape(math.prod(lead), math.prod(ins))
  kernel = kernel.reshape(math.prod(ins), math.prod(outs))
  y = xla_cpu.matmul(x, kernel)
  if bias is not None:
    y = y + bias.reshape(-1)
  return y.reshape(lead + outs).astype(x.dtype)


def dense(features, axes, cfg: NetworkConfig, name: str, in_axis_count: int = 1,
          use_bias: bool = False, init_scale: float = 1.0) -> Projection:
  """A Projection to `features` (int or tuple) whose kernel has logical `axes`.

  `init_scale` multiplies the fan-in variance of the initial kernel.
  """
  features = (features,) if isinstance(features, int) else tuple(features)
  return Projection(features, tuple(axes), cfg, in_axis_count, use_bias, init_scale,
                    name=name)


def layer_norm(name: str, cfg: NetworkConfig) -> nn.Module:
  """LayerNorm, or T5LayerNorm (RMS, scale only) under `cfg.rms_norm`."""
  if cfg.rms_norm:
    return nn.RMSNorm(
        epsilon=1e-6, dtype=cfg.dtype,
        scale_init=nn.with_logical_partitioning(nn.initializers.ones, ("embed",)),
        name=name)
  return nn.LayerNorm(
      dtype=cfg.dtype,
      scale_init=nn.with_logical_partitioning(nn.initializers.ones, ("embed",)),
      bias_init=nn.with_logical_partitioning(nn.initializers.zeros, ("embed",)),
      name=name,
  )


class Embed(nn.Module):
  """Token embedding table shared by every encoder and the decoder input."""

  cfg: NetworkConfig
  # The table's logical axes; a subclass names its own rows (`_rows`).
  axes = ("vocab", "embed")

  def _rows(self) -> int:
    return self.cfg.vocab_size

  def setup(self):
    self.embedding = self.param(
        "embedding",
        nn.with_logical_partitioning(_EMBED_INIT, self.axes),
        (self._rows(), self.cfg.emb_dim),
    )

  def __call__(self, ids: Array) -> Array:
    """int32 [...] row ids -> cfg.dtype [..., d] (T5-style unit-variance table)."""
    return jnp.take(jnp.asarray(self.embedding, self.cfg.dtype), ids, axis=0)


class LanguageEmbed(Embed):
  """The language table: one row per language id (index in vmsst.base.languages.LANGUAGES).

  Kept apart from the token table so that language ids need no pieces in the
  SentencePiece vocabulary (any model works unchanged, mT5's included). Its
  rows feed the language encoder's input and the decoder's first position.
  """

  axes = ("languages", "embed")

  def _rows(self) -> int:
    return self.cfg.num_languages


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


def relative_position_buckets(length: int, *, bidirectional: bool, num_buckets: int,
                              max_distance: int) -> np.ndarray:
  """T5's bucket of every (query i, key j) offset j - i, int32 [L, L]."""
  offset = np.arange(length)[None, :] - np.arange(length)[:, None]
  return offset_buckets(offset, bidirectional=bidirectional, num_buckets=num_buckets,
                        max_distance=max_distance)


def offset_buckets(offset: np.ndarray, *, bidirectional: bool, num_buckets: int,
                   max_distance: int) -> np.ndarray:
  """T5's bucket of each key-minus-query offset, int32 of offset's shape.

  Offsets below half the buckets get one bucket each; larger ones share
  log-spaced buckets up to `max_distance`, beyond which all share the last.
  Bidirectional stacks spend half the buckets on keys after the query; a
  causal stack only on keys before it. Computed on the host in float32, as
  Mesh TensorFlow and Hugging Face do, so the boundaries agree exactly.
  """
  bucket = np.zeros_like(offset)
  if bidirectional:
    num_buckets //= 2
    bucket += (offset > 0) * num_buckets
    distance = np.abs(offset)
  else:
    distance = np.maximum(-offset, 0)
  exact = num_buckets // 2
  ratio = (np.log(np.maximum(distance, 1).astype(np.float32) / exact)
           / np.float32(math.log(max_distance / exact)))
  far = np.minimum(exact + (ratio * (num_buckets - exact)).astype(offset.dtype),
                   num_buckets - 1)
  return (bucket + np.where(distance < exact, distance, far)).astype(np.int32)


class RelativePositionBias(nn.Module):
  """T5 relative position bias: one [buckets, heads] table for a whole stack.

  Computed once per stack and added to every layer's attention logits, as
  T5 does with the table of its first layer.
  """

  cfg: NetworkConfig
  bidirectional: bool

  @nn.compact
  def __call__(self, length: int) -> Array:
    """-> float32 [1, heads, L, L] logit bias."""
    cfg = self.cfg
    table = self.param(
        "embedding",
        nn.with_logical_partitioning(
            nn.initializers.variance_scaling(1.0, "fan_avg", "uniform"),
            ("relpos_buckets", "heads")),
        (cfg.relative_attention_num_buckets, cfg.num_heads), jnp.float32)
    # Offsets of ±max_distance and beyond share the last bucket, so a host
    # table over [-max_distance, max_distance] gathered at clipped offsets is
    # exact for any length, a symbolic one too (export's polymorphic shapes).
    span = cfg.relative_attention_max_distance
    by_offset = offset_buckets(np.arange(-span, span + 1), bidirectional=self.bidirectional,
                               num_buckets=cfg.relative_attention_num_buckets,
                               max_distance=span)
    positions = jnp.arange(length)
    offset = jnp.clip(positions[None, :] - positions[:, None], -span, span)
    buckets = jnp.asarray(by_offset)[offset + span]
    return jnp.transpose(table[buckets], (2, 0, 1))[None]


def attend(q: Array, k: Array, v: Array, mask: Array, bias: Array | None,
           cfg: NetworkConfig) -> Array:
  """softmax(q·k [/ sqrt(head_dim)] + bias, masked) · v over [B, L, heads, kv].

  The original configuration keeps flax's attention (bit-for-bit as before);
  the T5 switches add the position bias and may drop the logit scale
  (jax.nn.dot_product_attention takes its softmax in float32 itself).
  """
  if bias is None and cfg.scale_attention_logits:
    # Softmax in float32 also under bfloat16 activations (a no-op in float32).
    return nn.dot_product_attention(q, k, v, mask=mask, dtype=cfg.dtype,
                                    force_fp32_for_softmax=True)
  scale = None if cfg.scale_attention_logits else 1.0
  if bias is not None:
    bias = bias.astype(q.dtype)
  return jax.nn.dot_product_attention(q, k, v, bias=bias, mask=mask, scale=scale)


class SelfAttention(nn.Module):
  """Multi-head self-attention; `mask` is [B, 1, Lq, Lk] boolean.

  `bias` (float [1, heads, Lq, Lk], the stack's relative position bias) is
  added to the logits when given. Without logit scaling the query kernel is
  initialised 1/sqrt(head_dim) smaller, T5's folding of the same factor.
  """

  cfg: NetworkConfig

  @nn.compact
  def __call__(self, x: Array, mask: Array, deterministic: bool,
               bias: Array | None = None) -> Array:
    cfg = self.cfg
    heads = (cfg.num_heads, cfg.head_dim)
    query_scale = 1.0 if cfg.scale_attention_logits else 1.0 / cfg.head_dim
    q = dense(heads, ("embed", "heads", "kv"), cfg, "query", init_scale=query_scale)(x)
    k = dense(heads, ("embed", "heads", "kv"), cfg, "key")(x)
    v = dense(heads, ("embed", "heads", "kv"), cfg, "value")(x)
    q = nn.with_logical_constraint(q, ("batch", "length", "heads", "kv"))
    out = attend(q, k, v, mask, bias, cfg)
    out = nn.with_logical_constraint(out, ("batch", "length", "heads", "kv"))
    out = dense(cfg.emb_dim, ("heads", "kv", "embed"), cfg, "out", in_axis_count=2)(out)
    return Dropout(cfg.dropout_rate)(out, deterministic=deterministic)


class MlpBlock(nn.Module):
  """Position-wise feed-forward block: GELU, or T5.1.1's gated GELU.

  Both use the tanh approximation of GELU (T5's "gelu_new"). Gated:
  gelu(x W_0) * (x W_1), kernels `wi_0` and `wi_1`.
  """

  cfg: NetworkConfig

  @nn.compact
  def __call__(self, x: Array, deterministic: bool) -> Array:
    cfg = self.cfg
    bias = cfg.projection_bias
    if cfg.gated_mlp:
      h = (nn.gelu(dense(cfg.mlp_dim, ("embed", "mlp"), cfg, "wi_0", use_bias=bias)(x))
           * dense(cfg.mlp_dim, ("embed", "mlp"), cfg, "wi_1", use_bias=bias)(x))
    else:
      h = nn.gelu(dense(cfg.mlp_dim, ("embed", "mlp"), cfg, "wi", use_bias=bias)(x))
    h = nn.with_logical_constraint(h, ("batch", "length", "mlp"))
    h = Dropout(cfg.dropout_rate)(h, deterministic=deterministic)
    out = dense(cfg.emb_dim, ("mlp", "embed"), cfg, "wo", use_bias=bias)(h)
    return Dropout(cfg.dropout_rate)(out, deterministic=deterministic)


class EncoderLayer(nn.Module):
  """Pre-LayerNorm bidirectional Transformer layer (bias: see SelfAttention)."""

  cfg: NetworkConfig

  @nn.compact
  def __call__(self, x: Array, mask: Array, deterministic: bool,
               bias: Array | None = None) -> Array:
    x = x + SelfAttention(self.cfg, name="attention")(
        layer_norm("pre_attention_norm", self.cfg)(x), mask, deterministic, bias)
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
                use_bias=self.cfg.projection_bias)(joined)
    return x + Dropout(self.cfg.dropout_rate)(out, deterministic=deterministic)


class DecoderLayer(nn.Module):
  """Causal self-attention, latent injection (no cross-attention), MLP.

  `bias` is the decoder's causal relative position bias, if any.
  """

  cfg: NetworkConfig

  @nn.compact
  def __call__(self, x: Array, latent: Array, mask: Array, deterministic: bool,
               bias: Array | None = None) -> Array:
    x = x + SelfAttention(self.cfg, name="attention")(
        layer_norm("pre_attention_norm", self.cfg)(x), mask, deterministic, bias)
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
  """Mean over real tokens: [B, L, d], [B, L] -> float32 [B, d] (all-padding rows give 0).

  Summed in float32: a bfloat16 sum over L tokens would lose the pooled
  embedding's low bits.
  """
  x = x.astype(jnp.float32)
  m = mask.astype(x.dtype)[..., None]
  return (x * m).sum(axis=-2) / jnp.maximum(m.sum(axis=-2), 1.0)


class GaussianHead(nn.Module):
  """Linear maps from a pooled state to μ and log σ² (both [B, d])."""

  cfg: NetworkConfig

  @nn.compact
  def __call__(self, pooled: Array) -> tuple[Array, Array]:
    bias = self.cfg.projection_bias
    mu = dense(self.cfg.emb_dim, ("embed", "latent"), self.cfg, "mu", use_bias=bias)(pooled)
    logvar = dense(self.cfg.emb_dim, ("embed", "latent"), self.cfg, "logvar",
                   use_bias=bias)(pooled)
    return mu.astype(jnp.float32), logvar.astype(jnp.float32)
