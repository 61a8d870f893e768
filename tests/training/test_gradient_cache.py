"""Contrastive gradient caching: the uncached loss and gradient at a chunk's memory."""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from vmsst_testing import TINY, init_params, random_batch
from vmsst.compiler import step as compile_lib
from vmsst.model import partitioning
from vmsst.objectives import Contrastive

CFG = dataclasses.replace(TINY, num_encoder_layers=2, dropout_rate=0.1)


def _loss_and_grads(model, params, batch, rng):
  fn = lambda p: model.loss_fn(p, batch, rng)
  return jax.jit(jax.value_and_grad(fn, has_aux=True))(params)


@pytest.mark.parametrize("chunk", [4])
@pytest.mark.slow
def test_cached_loss_and_gradient_equal_the_uncached_ones_with_dropout(chunk):
  batch, rng = random_batch(batch_size=8), jax.random.key(7)
  params = init_params(Contrastive(CFG))
  (loss, metrics), grads = _loss_and_grads(Contrastive(CFG), params, batch, rng)
  (cached_loss, cached_metrics), cached_grads = _loss_and_grads(
      Contrastive(CFG, gradient_cache_chunk=chunk), params, batch, rng)
  np.testing.assert_allclose(cached_loss, loss, rtol=1e-6)
  np.testing.assert_allclose(cached_metrics["embedding_norm"], metrics["embedding_norm"],
                             rtol=1e-6)
  for got, want in zip(jax.tree.leaves(cached_grads), jax.tree.leaves(grads)):
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-6)
  # Dropout is really on: another key changes the loss, and no key at all too.
  other = Contrastive(CFG, gradient_cache_chunk=chunk).loss_fn(params, batch,
                                                                jax.random.key(8))[0]
  assert abs(float(other) - float(loss)) > 1e-4
  deterministic = Contrastive(CFG, gradient_cache_chunk=chunk).loss_fn(params, batch, None)[0]
  assert abs(float(deterministic) - float(loss)) > 1e-4


@pytest.mark.slow
def test_a_sentence_keeps_its_dropout_mask_in_any_chunk():
  """Per-sentence keys: row i's embedding does not depend on its batch-mates."""
  model = Contrastive(CFG)
  params = init_params(model)
  batch = random_batch(batch_size=8)
  tokens, mask = batch["tokens_a"], batch["mask_a"]
  rngs = model.sentence_rngs(jax.random.key(1), 8)
  whole = model.embeddings(params, tokens, mask, rngs, None)
  half = model.embeddings(params, tokens[4:], mask[4:], rngs[4:], None)
  np.testing.assert_allclose(half, whole[4:], rtol=1e-5, atol=1e-6)


def test_chunk_must_divide_both_sides_of_the_batch():
  model = Contrastive(CFG, gradient_cache_chunk=3)
  params = init_params(model)
  with pytest.raises(ValueError, match="gradient_cache_chunk=3 does not divide the 8"):
    model.loss_fn(params, random_batch(batch_size=4), jax.random.key(0))


@pytest.mark.slow
def test_cached_step_at_batch_256_needs_far_less_temp_memory():
  """512 sentences through 2 layers; chunk 32 keeps 1/16 of the activations alive."""
  cfg = dataclasses.replace(TINY, emb_dim=64, head_dim=32, mlp_dim=256, num_encoder_layers=2,
                            max_length=32, dropout_rate=0.1)
  mesh = partitioning.make_mesh(2, 1, devices=jax.devices()[:2])
  measure = lambda model: compile_lib.step_memory(model, optax.adam(1e-3), mesh,
                                                    batch_size=256, sequence_length=32)
  uncached = measure(Contrastive(cfg))
  cached = measure(Contrastive(cfg, gradient_cache_chunk=32))
  print(f"temp bytes per device: uncached {uncached.temp}, cached {cached.temp}")
  assert cached.params == uncached.params
  assert cached.temp < uncached.temp / 4
