"""bfloat16 activations with float32 parameters: what is bf16, what stays f32, it trains."""

import dataclasses
import re

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from vmsst_testing import ROOT, TINY, init_params, param_shapes, random_batch
from vmsst.training import configurables
from vmsst.base.gin_utils import gin
from vmsst.model import layers
from vmsst.model.config import NetworkConfig
from vmsst.model.network import VMSSTNetwork
from vmsst.objectives import VMSST

configurables.register()  # what the run files name (imports TensorFlow: at collection)

BF16 = dataclasses.replace(TINY, dtype="bfloat16")


def test_gin_file_binds_bfloat16_and_the_config_stays_hashable():
  gin.clear_config()
  gin.parse_config_files_and_bindings([str(ROOT / "gin/models/precision/bf16.gin")], [],
                                      finalize_config=False)
  try:
    cfg = NetworkConfig()
  finally:
    gin.clear_config()
  assert cfg.dtype == jnp.bfloat16
  assert hash(cfg) == hash(dataclasses.replace(TINY, dtype=jnp.bfloat16, **{
      k: getattr(cfg, k) for k in ("vocab_size", "emb_dim", "num_heads", "head_dim", "mlp_dim",
                                    "num_encoder_layers", "num_language_encoder_layers",
                                    "num_decoder_layers", "max_length")}))


def test_parameters_embeddings_and_logits_are_float32_token_states_bfloat16():
  """Dtypes are fixed when JAX traces: `jax.eval_shape` gives the ones a run computes in,
  without compiling the step (op by op, the eager forward and gradient took ~45 s CPU)."""
  model = VMSST(BF16)
  batch = random_batch()

  def everything(params):
    mu, aux = model.semantic(params, batch["tokens_a"], batch["mask_a"])
    logits = model.apply(params, batch["tokens_a"], batch["mask_a"], batch["lang_a"],
                         jnp.concatenate([mu, mu], -1), True, method=VMSSTNetwork.decode)
    loss, grads = jax.value_and_grad(
        lambda p: model.loss_fn(p, batch, jax.random.key(0))[0])(params)
    return mu, aux, logits, loss, grads

  params = param_shapes(model)
  assert {x.dtype for x in jax.tree.leaves(params)} == {jnp.dtype(jnp.float32)}
  mu, aux, logits, loss, grads = jax.eval_shape(everything, params)
  assert mu.dtype == jnp.float32 and aux["pooled"].dtype == jnp.float32
  assert aux["token_states"].dtype == jnp.bfloat16
  assert logits.dtype == jnp.float32
  assert loss.dtype == jnp.float32
  assert {x.dtype for x in jax.tree.leaves(grads)} == {jnp.dtype(jnp.float32)}


@pytest.mark.slow
def test_bfloat16_starts_near_float32_and_trains_30_steps():
  batch = random_batch(batch_size=8, seed=4)
  f32, bf16 = VMSST(TINY), VMSST(BF16)
  params = init_params(f32)
  rng = jax.random.key(0)
  # Compiled, the float32 loss of the first step's key; the bfloat16 one is that step's own
  # loss (history[0]): one compile less than a separate bfloat16 forward (op by op, both
  # forwards took ~20 s CPU).
  loss_f32 = float(jax.jit(lambda p: f32.loss_fn(p, batch, jax.random.fold_in(rng, 0), 0)[0])(
      params))

  optimizer = optax.adam(3e-3)

  @jax.jit
  def step(params, opt_state, i):
    loss, grads = jax.value_and_grad(
        lambda p: bf16.loss_fn(p, batch, jax.random.fold_in(rng, i), i)[0])(params)
    updates, opt_state = optimizer.update(grads, opt_state, params)
    return optax.apply_updates(params, updates), opt_state, loss

  opt_state, history = optimizer.init(params), []
  for i in range(30):
    params, opt_state, loss = step(params, opt_state, i)
    history.append(float(loss))
  assert abs(history[0] - loss_f32) < 0.01 * loss_f32  # before any update: the same params
  print("bf16 loss every 5 steps:", [round(x, 2) for x in history[::5]], round(history[-1], 2))
  assert np.all(np.isfinite(history))
  assert np.mean(history[-5:]) < 0.8 * np.mean(history[:5])


def _dots(hlo: str) -> list[tuple[str, str, str]]:
  """(lhs type, rhs type, dimension numbers) of every dot in a compiled module's text."""
  found = []
  for computation in hlo.split("\n\n"):
    types = dict(re.findall(r"%(\S+) = (\w+\[[\d,]*\]\{[\d,]*\})", computation))
    for lhs, rhs, dims in re.findall(r" dot\(%(\S+), %(\S+)\), ([^,]+, [^,]+),", computation):
      found.append((types[lhs], types[rhs], dims))
  return found


@pytest.mark.parametrize("in_axis_count", [1, 2])
def test_bfloat16_projection_matches_float32_and_its_gradients(in_axis_count):
  rng = np.random.default_rng(0)
  x = rng.normal(size=(4, 6, 8, 16)).astype(np.float32)
  kernel_shape = (8, 16, 12) if in_axis_count == 2 else (16, 12)
  kernel = rng.normal(size=kernel_shape).astype(np.float32) / 4
  bias = rng.normal(size=(12,)).astype(np.float32)
  cotangent = rng.normal(size=(4, 6, 12) if in_axis_count == 2 else (4, 6, 8, 12))
  contract = tuple(range(x.ndim - in_axis_count, x.ndim))

  def reference(x, kernel, bias):
    return jax.lax.dot_general(
        x, kernel, ((contract, tuple(range(in_axis_count))), ((), ()))) + bias

  def low(x, kernel, bias):
    y = layers.projection(x.astype(jnp.bfloat16), kernel, in_axis_count, bias)
    assert y.dtype == jnp.bfloat16
    return y.astype(jnp.float32)

  def close(got, want):  # bf16 rounding of inputs and outputs: ~2^-8 of the scale
    error = np.abs(np.asarray(got, np.float32) - want).max()
    assert 0 < error < 2e-2 * np.abs(want).max()

  close(low(x, kernel, bias), reference(x, kernel, bias))
  # Compiled: one program per gradient instead of one per primitive.
  want_grads, got_grads = (
      jax.jit(jax.grad(lambda x, k, b, f=f: jnp.sum(f(x, k, b) * cotangent),
                       argnums=(0, 1, 2)))(x, kernel, bias)
      for f in (reference, low))
  assert got_grads[1].dtype == got_grads[2].dtype == jnp.float32
  for got, want in zip(got_grads, want_grads):
    close(got, want)


@pytest.mark.parametrize("dtype", [jnp.bfloat16, jnp.float32])
def test_bias_gradient_is_a_plain_column_sum(dtype):
  """Summed over [B, L] of a 3-D gradient, XLA:CPU used a windowed tree reduction
  of a float32 copy (70 ms against 2.6 ms for a [256, 32, 2048] MLP bias)."""
  x, cotangent = jnp.ones((64, 32, 128), dtype), jnp.ones((64, 32, 256), jnp.float32)
  kernel, bias = jnp.ones((128, 256), jnp.float32), jnp.zeros((256,), jnp.float32)
  # Everything is an argument: constant operands would be folded away.
  grad = jax.jit(jax.grad(lambda b, x, k, c: jnp.sum(
      layers.projection(x, k, 1, b).astype(jnp.float32) * c)))
  assert "reduce-window" not in grad.lower(bias, x, kernel, cotangent).compile().as_text()


def test_bfloat16_projection_runs_every_product_row_major_in_bfloat16():
  """XLA:CPU's fast bf16 kernels take [M, K] x [K, N] only; a transposed operand
  makes XLA convert both sides to f32 (docs/results/benchmarks/README.md). Forward and both
  gradient products must reach the dot in that form."""
  x = jnp.ones((64, 32, 128), jnp.bfloat16)
  kernel = jnp.ones((128, 256), jnp.float32)
  grad = jax.jit(jax.grad(
      lambda x, k: layers.projection(x, k, 1).astype(jnp.float32).sum(),
      argnums=(0, 1)))
  forward = jax.jit(lambda x, k: layers.projection(x, k, 1))
  dots = _dots(grad.lower(x, kernel).compile().as_text())
  dots += _dots(forward.lower(x, kernel).compile().as_text())
  assert len(dots) == 3, dots
  for lhs, rhs, dims in dots:
    assert lhs.startswith("bf16[") and lhs.endswith("{1,0}"), (lhs, rhs, dims)
    assert rhs.startswith("bf16[") and rhs.endswith("{1,0}"), (lhs, rhs, dims)
    assert dims == "lhs_contracting_dims={1}, rhs_contracting_dims={0}", dims
