"""How a stack of Transformer layers runs: plain, rematerialized, or under nn.scan.

`NetworkConfig.remat` picks what a layer keeps for the backward pass
(`REMAT_POLICIES`); `NetworkConfig.scan_layers` runs the layers under
`nn.scan` with parameters stacked on a leading "layers" axis. The arithmetic
is the layers' own (vmsst/model/layers.py); only memory and compile time change.
"""


import flax.linen as nn
import jax
import jax.numpy as jnp

from vmsst.model.config import NetworkConfig
from vmsst.model.layers import (DecoderLayer, EncoderLayer, RelativePositionBias, layer_norm,
                          padding_attention_mask)

Array = jax.Array


class Stack(nn.Module):
  """N encoder layers followed by a final LayerNorm.

  Under `cfg.relative_attention` the stack owns the one bidirectional
  relative position bias all its layers add. `cfg.remat` and
  `cfg.scan_layers` choose how the layers run (`layer_class`,
  `scanned_layers`); the arithmetic is the same.
  """

  cfg: NetworkConfig
  num_layers: int

  @nn.compact
  def __call__(self, x: Array, mask: Array, deterministic: bool) -> Array:
    attention_mask = padding_attention_mask(mask)
    bias = None
    if self.cfg.relative_attention:
      bias = RelativePositionBias(self.cfg, bidirectional=True,
                                  name="relative_position_bias")(x.shape[-2])
    if self.cfg.scan_layers:
      x = scanned_layers(EncoderLayer, self.cfg, self.num_layers, deterministic,
                         name="layers")(x, attention_mask, bias)[0]
    else:
      layer = layer_class(EncoderLayer, self.cfg)
      for i in range(self.num_layers):
        x = layer(self.cfg, name=f"layer_{i}")(x, attention_mask, deterministic, bias)
    return layer_norm("final_norm", self.cfg)(x)


# cfg.remat -> what a layer keeps for the backward pass (None: everything).
REMAT_POLICIES = {
    "none": None,
    "full": jax.checkpoint_policies.nothing_saveable,
    "dots_saveable": jax.checkpoint_policies.dots_saveable,
}
# Position of `deterministic` in each layer's __call__ (self is 0): remat
# must trace it as a Python bool, not an array.
_DETERMINISTIC_ARGNUM = {"EncoderLayer": 3, "DecoderLayer": 4}


def layer_class(layer: type[nn.Module], cfg: NetworkConfig) -> type[nn.Module]:
  """`layer` (EncoderLayer or DecoderLayer), rematerialised per cfg.remat.

  nn.remat keeps the module's name, so the parameter tree does not change.
  """
  if cfg.remat == "none":
    return layer
  return nn.remat(layer, policy=REMAT_POLICIES[cfg.remat],
                  static_argnums=(_DETERMINISTIC_ARGNUM[layer.__name__],))


class _CarryEncoderLayer(EncoderLayer):
  """EncoderLayer as an nn.scan body: (x, mask, bias) -> (x, None)."""

  deterministic: bool = True

  def __call__(self, x, mask, bias):  # pylint: disable=arguments-differ
    return super().__call__(x, mask, self.deterministic, bias), None


class _CarryDecoderLayer(DecoderLayer):
  """DecoderLayer as an nn.scan body: (x, latent, mask, bias) -> (x, None)."""

  deterministic: bool = True

  def __call__(self, x, latent, mask, bias):  # pylint: disable=arguments-differ
    return super().__call__(x, latent, mask, self.deterministic, bias), None


def scanned_layers(layer: type[nn.Module], cfg: NetworkConfig, num_layers: int,
                   deterministic: bool, name: str) -> nn.Module:
  """`num_layers` copies of `layer` under nn.scan: (x, *broadcast) -> (x, None).

  Call it inside a compact method. Parameters get a leading "layers" axis
  [num_layers, ...] (replicated, partitioning.LOGICAL_AXIS_RULES); every
  layer draws its own dropout mask (split rngs). Remat wraps the body, so
  the backward pass keeps one layer input per layer.
  """
  body = {EncoderLayer: _CarryEncoderLayer, DecoderLayer: _CarryDecoderLayer}[layer]
  if cfg.remat != "none":
    body = nn.remat(body, policy=REMAT_POLICIES[cfg.remat], prevent_cse=False)
  broadcast = 2 if layer is EncoderLayer else 3
  scan = nn.scan(body, variable_axes={"params": 0},
                 split_rngs={"params": True, "dropout": True},
                 in_axes=(nn.broadcast,) * broadcast, length=num_layers,
                 metadata_params={nn.PARTITION_NAME: "layers"})
  return scan(cfg, deterministic=deterministic, name=name)


class ScannedDecoder(nn.Module):
  """The decoder layers under nn.scan (for setup-style parents)."""

  cfg: NetworkConfig
  num_layers: int

  @nn.compact
  def __call__(self, x: Array, latent: Array, mask: Array, deterministic: bool,
               bias: Array | None = None) -> Array:
    return scanned_layers(DecoderLayer, self.cfg, self.num_layers, deterministic,
                          name="layers")(x, latent, mask, bias)[0]


def stack_layer_params(params: dict) -> dict:
  """An unscanned parameter tree in the scan_layers layout (same values).

  `<stack>/layer_<i>/...` become `<stack>/layers/...` stacked on axis 0, and
  the network's `decoder_layer_<i>/...` become `decoder/layers/...`; every
  other entry is kept. For trees made without scan (a parameter file's
  `layer_<i>` tensors are stacked as they load: param_files.load_params).
  """
  def stacked(tree: dict, prefix: str) -> dict | None:
    keys = sorted((k for k in tree if k.startswith(prefix) and k[len(prefix):].isdigit()),
                  key=lambda k: int(k[len(prefix):]))
    if not keys:
      return None
    return jax.tree.map(lambda *xs: jnp.stack(xs), *[tree[k] for k in keys])

  out = {}
  for key, value in params.items():
    if key.startswith(("layer_", "decoder_layer_")) and key.split("_")[-1].isdigit():
      continue
    out[key] = stack_layer_params(value) if isinstance(value, dict) else value
  if (layers := stacked(params, "layer_")) is not None:
    out["layers"] = layers
  if (decoder := stacked(params, "decoder_layer_")) is not None:
    out["decoder"] = {"layers": decoder}
  return out
