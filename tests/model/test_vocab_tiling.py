"""The tiled vocabulary head gives the whole-logit path's loss, metrics and gradients,
without a [tokens, V] array beyond one tile."""

import dataclasses

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from vmsst_testing import TINY, init_params, random_batch
from vmsst.compiler import step as compiler_step
from vmsst.model import losses
from vmsst.model import models
from vmsst.model import partitioning
from vmsst.model import vocab_tiling
from vmsst.objectives import BiTranslation, VMSSTContrastive
from vmsst.objectives.nested import NestedDims
from vmsst.training import trainer as trainer_lib


def _matmul_logits(kernel, inputs):
  (x,) = inputs
  return (x @ kernel).astype(jnp.float32)


def test_tile_counts_divide_each_devices_tokens_and_respect_the_tile_size():
  assert vocab_tiling.tile_count(4096, 1024, shards=1) == 4
  assert vocab_tiling.tile_count(4096, 1024, shards=4) == 1   # 1,024 tokens a device
  assert vocab_tiling.tile_count(4096, 300, shards=4) == 4    # ceil(1024 / 300) = 4 divides
  assert vocab_tiling.tile_count(96, 40, shards=1) == 3
  assert vocab_tiling.tile_count(98, 40, shards=1) == 7       # 3 does not divide 98: 7 does
  assert vocab_tiling.tile_count(10, 4, shards=3) == 5        # shards do not divide: all tokens
  assert vocab_tiling.tile_count(12, 1_000_000) == 1


def test_token_nll_and_its_gradients_equal_the_whole_softmax():
  rng = np.random.default_rng(0)
  x = jnp.asarray(rng.normal(size=(24, 8)), jnp.float32)
  kernel = jnp.asarray(rng.normal(size=(8, 50)), jnp.float32)
  targets = jnp.asarray(rng.integers(0, 50, (4, 6)), jnp.int32)
  mask = jnp.asarray(rng.integers(0, 2, (4, 6)), jnp.int32)
  weights = jnp.arange(1.0, 5.0)  # a different cotangent per sentence

  def whole(kernel, x):
    nll, hits = losses.sequence_nll(_matmul_logits(kernel, (x,)).reshape(4, 6, 50), targets, mask)
    return jnp.sum(nll * weights), hits

  def tiled(kernel, x):
    nll, hits = vocab_tiling.sequence_nll(_matmul_logits, kernel, (x.reshape(4, 6, 8),),
                                          targets, mask, tile_tokens=5)
    return jnp.sum(nll * weights), hits

  (want, want_hits), want_grads = jax.value_and_grad(whole, (0, 1), has_aux=True)(kernel, x)
  (got, got_hits), got_grads = jax.value_and_grad(tiled, (0, 1), has_aux=True)(kernel, x)
  np.testing.assert_allclose(got, want, rtol=1e-6)
  np.testing.assert_array_equal(got_hits, want_hits)
  for g, w in zip(got_grads, want_grads):
    np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)


def _loss_and_grads(model, params, batch):
  fn = jax.value_and_grad(lambda p: model.loss_fn(p, batch, jax.random.key(3), 7), has_aux=True)
  (loss, metrics), grads = jax.jit(fn)(params)
  return loss, metrics, grads


def _relative_error(got, want) -> float:
  return max(float(jnp.max(jnp.abs(g - w)) / (jnp.max(jnp.abs(w)) + 1e-12))
             for g, w in zip(jax.tree.leaves(got), jax.tree.leaves(want)))


DECODERS = {  # every decoding objective and head: VMSST's terms run inside VMSST-Contrastive
    "vmsst_contrastive_nested_factorized": lambda cfg: VMSSTContrastive(
        dataclasses.replace(cfg, factorized_output=True), multitask_weight=0.5,
        nested=NestedDims(sizes=(8, 32))),
    "bitranslation_tied": lambda cfg: BiTranslation(dataclasses.replace(
        cfg, tie_output_embedding=True, projection_bias=False)),
}


@pytest.mark.slow  # two compiles of a decoding step's gradient
@pytest.mark.parametrize("name", sorted(DECODERS))
def test_every_decoding_objective_gives_the_whole_logit_loss_metrics_and_gradients(name):
  """float32: loss, every metric and every parameter's gradient to 1e-5 relative."""
  whole = DECODERS[name](dataclasses.replace(TINY, vocab_tile_tokens=0))
  tiled = DECODERS[name](dataclasses.replace(TINY, vocab_tile_tokens=7))
  params, batch = init_params(whole), random_batch()
  want_loss, want_metrics, want_grads = _loss_and_grads(whole, params, batch)
  loss, metrics, grads = _loss_and_grads(tiled, params, batch)
  np.testing.assert_allclose(loss, want_loss, rtol=1e-5)
  assert set(metrics) == set(want_metrics)
  for key in metrics:
    np.testing.assert_allclose(metrics[key], want_metrics[key], rtol=1e-5, atol=1e-6, err_msg=key)
  assert _relative_error(grads, want_grads) < 1e-5


@pytest.mark.slow  # three compiles
def test_bfloat16_tiles_differ_from_float32_no_more_than_whole_bfloat16_logits_do():
  f32 = BiTranslation(dataclasses.replace(TINY, vocab_tile_tokens=0))
  bf16 = dataclasses.replace(TINY, dtype="bfloat16")
  params, batch = init_params(f32), random_batch()
  reference = _loss_and_grads(f32, params, batch)
  whole = _loss_and_grads(BiTranslation(dataclasses.replace(bf16, vocab_tile_tokens=0)), params, batch)
  tiled = _loss_and_grads(BiTranslation(dataclasses.replace(bf16, vocab_tile_tokens=7)), params, batch)
  loss_drift = abs(float(whole[0] - reference[0]))
  assert abs(float(tiled[0] - reference[0])) <= 2 * loss_drift + 1e-6 * abs(float(reference[0]))
  assert _relative_error(tiled[2], reference[2]) <= 2 * _relative_error(whole[2], reference[2])


@pytest.mark.slow  # two compiles of the step on eight devices
def test_the_sharded_step_with_the_vocabulary_over_model_equals_the_whole_logit_step():
  """A 4 × 2 mesh (batch over "data", the head's vocabulary columns over "model"):
  one optimizer step from the same state gives the same parameters either way."""
  mesh = partitioning.make_mesh(4, 2, devices=jax.devices()[:8])
  cfg = dataclasses.replace(TINY, vocab_size=304)  # the vocabulary divides over "model"
  batch = random_batch(batch_size=8, vocab_size=304)
  states = {}
  for tile in (0, 5):
    model = BiTranslation(dataclasses.replace(cfg, vocab_tile_tokens=tile))
    trainer = trainer_lib.Trainer(model, optax.sgd(0.1), mesh, models.batch_shapes(8, 12))
    state = trainer.initialize(jax.random.key(0))
    states[tile] = trainer.step(state, batch, jax.random.key(1))
  (whole, whole_metrics), (tiled, tiled_metrics) = states[0], states[5]
  np.testing.assert_allclose(tiled_metrics["loss"], whole_metrics["loss"], rtol=1e-5)
  assert _relative_error(tiled.params, whole.params) < 1e-5


def _temporaries(vocab_size: int, tile_tokens: int) -> int:
  cfg = dataclasses.replace(TINY, vocab_size=vocab_size, vocab_tile_tokens=tile_tokens,
                            max_length=16)
  return compiler_step.step_memory(
      BiTranslation(cfg), optax.adafactor(1e-3),
      partitioning.make_mesh(1, 1, devices=jax.devices()[:1]),
      batch_size=32, sequence_length=16).temp


def _head_bytes(vocab_size: int) -> int:
  """float32 bytes of the parameters whose size grows with V (the token table and the head)."""
  cfg = dataclasses.replace(TINY, vocab_size=vocab_size)
  shapes = jax.eval_shape(lambda: nn.unbox(BiTranslation(cfg).get_initial_variables(
      jax.random.key(0), models.batch_shapes(2, 8))["params"]))
  return 4 * sum(int(np.prod(x.shape)) for x in jax.tree.leaves(shapes))


@pytest.mark.slow  # two CPU compiles
def test_the_compiled_steps_temporaries_do_not_grow_with_the_vocabulary():
  """Doubling V grows the tiled step's temporaries by at most the parameters' and
  gradients' share (plus a tile's few [tile, V] float32 arrays), 7.0 MiB here. Whole
  logits grow by at least the [tokens, V] float32 logits, 16 MiB here (measured when
  this test was written: whole logits 49.5 MiB, tiled 3.5 MiB)."""
  small, large, tile = 4096, 8192, 64
  grown = _temporaries(large, tile) - _temporaries(small, tile)
  share = 2 * (_head_bytes(large) - _head_bytes(small))    # gradients and the update
  tile_arrays = 4 * tile * (large - small) * 4             # logits, softmax, their gradient
  tokens = 2 * 32 * 16                                     # both sides decoded, 16 positions
  assert share + tile_arrays < tokens * (large - small) * 4
  assert grown <= share + tile_arrays, (grown, share, tile_arrays)
