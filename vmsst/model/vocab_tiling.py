"""The decoder's vocabulary head and its softmax, a tile of tokens at a time.

A decoding objective needs, per token, −log softmax(logits)[target] and
whether the argmax hits the target. Computed from whole logits, a batch holds
float32 [tokens, V] twice (logits and their gradient): at the paper's shape
(batch 2048, four decodes a pair, 32 positions, mT5's 250,112 ids) 262 GB.
Here the tokens are cut into tiles and the head runs one tile at a time:

* forward: a `lax.scan` over tiles; each computes its logits [n, V], keeps
  the per-token NLL and argmax hit, and drops the logits;
* backward (`jax.custom_vjp`): a second scan recomputes each tile's logits,
  forms the softmax gradient (p − onehot(target)) · g, and pulls it back
  through the head with `jax.vjp`, adding the head parameters' gradients
  into one float32 accumulator and emitting the tile's input gradient.

The math is the whole-logit path's (tests/model/test_vocab_tiling.py checks
loss, metrics and gradients against it); the price is one more forward of
the head per step (its logits are recomputed instead of stored). The head's
matmuls run in the network's dtype with float32 accumulation, as in the
whole path: the float32 softmax gradient is cast back by the head's own
`astype` before its matmuls (a float32 logit gradient would otherwise pull
the backward matmuls up to float32).

Tiles are strided, token i in tile i mod T: the tokens arrive in contiguous
blocks over the mesh's data axis, so a strided tile takes n / shards tokens
from every device's block and stays sharded there (the vocabulary axis of
the logits stays where the head's kernel puts it, over "model").
"""

import functools
from typing import Any, Callable

import flax.linen as nn
import jax
import jax.numpy as jnp

from vmsst.model import losses
from vmsst.model import partitioning

Array = jax.Array
# (head parameters, inputs [n, ...] per leaf) -> float32 logits [n, V]
LogitsFn = Callable[[Any, Any], Array]


def data_shards() -> int:
  """Devices the token axis is split over: the data axis of the mesh in context (1 without)."""
  mesh = jax.sharding.get_abstract_mesh()
  axis = dict(partitioning.LOGICAL_AXIS_RULES)["batch"]
  if mesh.empty or axis not in mesh.axis_names:
    return 1
  return mesh.shape[axis]


def tile_count(tokens: int, tile_tokens: int, shards: int = 1) -> int:
  """How many tiles hold `tokens` with at most `tile_tokens` per device in each.

  The count divides the tokens of one device (tokens / shards, or all of them
  when the shards do not divide), so every tile is the same shape and stays
  on its devices: the smallest such divisor at or above the count needed.
  """
  per_device = tokens // shards if tokens % shards == 0 else tokens
  needed = -(-per_device // max(tile_tokens, 1))
  return next(t for t in range(max(needed, 1), per_device + 1) if per_device % t == 0)


def _to_tiles(x: Array, tiles: int) -> Array:
  """[N, ...] -> [tiles, N / tiles, ...]; token i in tile i mod tiles (strided)."""
  x = x.reshape((x.shape[0] // tiles, tiles) + x.shape[1:])
  x = jnp.swapaxes(x, 0, 1)
  return nn.with_logical_constraint(x, (None, "batch") + (None,) * (x.ndim - 2))


def _from_tiles(x: Array) -> Array:
  """`_to_tiles` undone: [tiles, n, ...] -> [tiles · n, ...]."""
  return jnp.swapaxes(x, 0, 1).reshape((-1,) + x.shape[2:])


def _hits_and_nll(logits: Array, targets: Array) -> tuple[Array, Array]:
  """Per token of a tile: (−log softmax(logits)[target] float32 [n], argmax hit float32 [n])."""
  logits = logits.astype(jnp.float32)
  target_logit = jnp.take_along_axis(logits, targets[:, None], axis=-1)[:, 0]
  nll = jax.nn.logsumexp(logits, axis=-1) - target_logit
  return nll, (jnp.argmax(logits, axis=-1) == targets).astype(jnp.float32)


@functools.partial(jax.custom_vjp, nondiff_argnums=(0, 1))
def token_nll(logits_fn: LogitsFn, tiles: int, head_params: Any, inputs: Any,
              targets: Array) -> tuple[Array, Array]:
  """Per-token NLL and argmax hits of the head `logits_fn`, `tiles` tiles at a time.

  Args:
    logits_fn: (head_params, inputs of one tile) -> float32 logits [n, V];
      a function of its arguments only (no traced values closed over).
    tiles: T, dividing the token count N.
    head_params: the parameters `logits_fn` reads (differentiated).
    inputs: a tree of [N, ...] arrays, the head's inputs per token (differentiated).
    targets: int [N] vocabulary ids.
  Returns:
    (nll float32 [N], hits float32 [N], 1.0 where the argmax is the target;
     no gradient flows through the hits).
  """
  return _forward(logits_fn, tiles, head_params, inputs, targets)


def _forward(logits_fn, tiles, head_params, inputs, targets):
  def tile(_, xs):
    tile_inputs, tile_targets = xs
    return None, _hits_and_nll(logits_fn(head_params, tile_inputs), tile_targets)

  tiled = (jax.tree.map(lambda x: _to_tiles(x, tiles), inputs),
           _to_tiles(targets.astype(jnp.int32), tiles))
  _, (nll, hits) = jax.lax.scan(tile, None, tiled)
  return _from_tiles(nll), _from_tiles(hits)


def _forward_rule(logits_fn, tiles, head_params, inputs, targets):
  return (_forward(logits_fn, tiles, head_params, inputs, targets),
          (head_params, inputs, targets))


def _backward_rule(logits_fn, tiles, residuals, cotangents):
  head_params, inputs, targets = residuals
  nll_cotangent = cotangents[0].astype(jnp.float32)

  def tile(accumulated, xs):
    tile_inputs, tile_targets, tile_cotangent = xs
    logits, pull_back = jax.vjp(logits_fn, head_params, tile_inputs)
    rows = jnp.arange(tile_targets.shape[0])
    # d nll / d logits = softmax − onehot(target), scaled by each token's cotangent.
    grad = jax.nn.softmax(logits.astype(jnp.float32), axis=-1) * tile_cotangent[:, None]
    grad = grad.at[rows, tile_targets].add(-tile_cotangent)
    params_grad, inputs_grad = pull_back(grad.astype(logits.dtype))
    accumulated = jax.tree.map(lambda a, g: a + g.astype(a.dtype), accumulated, params_grad)
    return accumulated, inputs_grad

  zeros = jax.tree.map(lambda p: jnp.zeros(p.shape, jnp.float32), head_params)
  tiled = (jax.tree.map(lambda x: _to_tiles(x, tiles), inputs),
           _to_tiles(targets.astype(jnp.int32), tiles), _to_tiles(nll_cotangent, tiles))
  params_grad, inputs_grad = jax.lax.scan(tile, zeros, tiled)
  params_grad = jax.tree.map(lambda g, p: g.astype(p.dtype), params_grad, head_params)
  return params_grad, jax.tree.map(_from_tiles, inputs_grad), None


token_nll.defvjp(_forward_rule, _backward_rule)


def sequence_nll(logits_fn: LogitsFn, head_params: Any, inputs: Any, targets: Array,
                 mask: Array, tile_tokens: int) -> tuple[Array, Array]:
  """`losses.sequence_nll` of the logits `logits_fn` gives, computed in tiles.

  Args:
    logits_fn, head_params: as `token_nll`.
    inputs: a tree of [B, L, ...] arrays, the head's inputs at each position.
    targets: int [B, L]; mask: int [B, L], 1 on tokens that count.
    tile_tokens: the most tokens of one tile on one device (0: whole
      logits); when one tile holds them all, the logits are computed whole (plain autodiff, nothing
      recomputed: a small batch pays nothing for the tiles).
  Returns:
    (nll float32 [B] summed over each sentence's counted tokens,
     correct float32 [B] argmax hits on counted tokens).
  """
  rows, length = targets.shape
  tiles = tile_count(rows * length, tile_tokens, data_shards()) if tile_tokens else 1
  if tiles == 1:  # one tile holds every token (or 0 asked for whole logits): nothing recomputed
    return losses.sequence_nll(logits_fn(head_params, inputs), targets, mask)
  flat = jax.tree.map(lambda x: x.reshape((rows * length,) + x.shape[2:]), inputs)
  nll, hits = token_nll(logits_fn, tiles, head_params, flat, targets.reshape(-1))
  weights = mask.astype(jnp.float32)
  return (jnp.sum(nll.reshape(rows, length) * weights, axis=-1),
          jnp.sum(hits.reshape(rows, length) * weights, axis=-1))
