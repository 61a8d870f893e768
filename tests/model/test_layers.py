"""The network's building blocks: masks, pooling, projections, position buckets, latent injection."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from vmsst_testing import TINY
from vmsst.model import layers


def test_padding_mask_allows_only_token_pairs_and_causal_only_the_past():
  mask = jnp.array([[1, 1, 0]])
  padding = np.asarray(layers.padding_attention_mask(mask))[0, 0]
  np.testing.assert_array_equal(padding, [[1, 1, 0], [1, 1, 0], [0, 0, 0]])
  causal = np.asarray(layers.causal_attention_mask(mask))[0, 0]
  np.testing.assert_array_equal(causal, [[1, 0, 0], [1, 1, 0], [0, 0, 0]])


def test_masked_mean_averages_real_tokens_and_gives_zero_for_empty_rows():
  x = jnp.array([[[1.0, 2.0], [3.0, 4.0], [100.0, 100.0]],
                 [[5.0, 5.0], [7.0, 7.0], [9.0, 9.0]]]).astype(jnp.bfloat16)
  mask = jnp.array([[1, 1, 0], [0, 0, 0]])
  pooled = layers.masked_mean(x, mask)
  assert pooled.dtype == jnp.float32
  np.testing.assert_allclose(pooled, [[2.0, 3.0], [0.0, 0.0]])


@pytest.mark.parametrize("in_axis_count", [1, 2])
def test_projection_is_the_tensor_contraction_plus_bias(in_axis_count):
  rng = np.random.default_rng(0)
  x = rng.normal(size=(2, 3, 4, 2)).astype(np.float32)
  ins = x.shape[4 - in_axis_count:]
  kernel = rng.normal(size=ins + (5,)).astype(np.float32)
  bias = rng.normal(size=(5,)).astype(np.float32)
  got = layers.projection(jnp.asarray(x), jnp.asarray(kernel), in_axis_count, jnp.asarray(bias))
  flat = x.reshape(x.shape[:4 - in_axis_count] + (-1,))
  want = flat @ kernel.reshape(-1, 5) + bias
  np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("offset, want", [(0, 0), (-3, 3), (3, 19), (-7, 7), (-8, 8),
                                          (-16, 10), (-128, 15), (-1000, 15), (1000, 31)])
def test_bidirectional_buckets_follow_t5(offset, want):
  """32 buckets, 128 max: 16 per direction, 8 exact, then log-spaced up to 15.

  −16: 8 + floor(log(16/8) / log(128/8) · 8) = 8 + floor(0.25 · 8) = 10.
  """
  got = layers.offset_buckets(np.array([offset]), bidirectional=True, num_buckets=32,
                              max_distance=128)
  assert int(got[0]) == want


def test_causal_buckets_ignore_future_keys_and_spend_all_buckets_on_the_past():
  got = layers.offset_buckets(np.array([5, 0, -5, -16, -32, -128, -500]), bidirectional=False,
                              num_buckets=32, max_distance=128)
  # exact below 16; −32: 16 + floor(log(2) / log(8) · 16) = 21.
  np.testing.assert_array_equal(got, [0, 0, 5, 16, 21, 31, 31])
  table = layers.relative_position_buckets(4, bidirectional=False, num_buckets=32,
                                           max_distance=128)
  np.testing.assert_array_equal(table[3], [3, 2, 1, 0])  # query 3 looks back 3, 2, 1, 0


def test_attention_ignores_the_values_of_masked_keys():
  rng = np.random.default_rng(1)
  q, k, v = (jnp.asarray(rng.normal(size=(1, 3, 2, 4)), jnp.float32) for _ in range(3))
  mask = layers.padding_attention_mask(jnp.array([[1, 1, 0]]))
  out = layers.attend(q, k, v, mask, None, TINY)
  changed = layers.attend(q, k, v.at[:, 2].set(1e3), mask, None, TINY)
  np.testing.assert_allclose(out[:, :2], changed[:, :2], rtol=1e-6)


def test_latent_injection_adds_the_same_affine_function_of_z_at_every_position():
  """h + W [LN(h); z]: the change z makes is linear in z and equal at every position."""
  module = layers.LatentInjection(TINY)
  rng = np.random.default_rng(2)
  x = jnp.asarray(rng.normal(size=(2, 5, TINY.emb_dim)), jnp.float32)
  z1, z2 = (jnp.asarray(rng.normal(size=(2, 2 * TINY.emb_dim)), jnp.float32) for _ in "12")
  params = module.init(jax.random.key(0), x, z1, True)
  run = lambda z: np.asarray(module.apply(params, x, z, True))
  base = run(jnp.zeros_like(z1))
  delta1, delta2, both = run(z1) - base, run(z2) - base, run(z1 + z2) - base
  np.testing.assert_allclose(both, delta1 + delta2, atol=1e-4)
  np.testing.assert_allclose(delta1, np.broadcast_to(delta1[:, :1], delta1.shape), atol=1e-5)
  assert np.abs(delta1).max() > 1e-3  # z does reach the decoder state


def test_gaussian_head_gives_float32_mean_and_log_variance_of_the_latent_width():
  head = layers.GaussianHead(TINY)
  pooled = jnp.ones((3, TINY.emb_dim), jnp.bfloat16)
  params = head.init(jax.random.key(0), pooled)
  mu, logvar = head.apply(params, pooled)
  assert mu.shape == logvar.shape == (3, TINY.emb_dim)
  assert mu.dtype == logvar.dtype == jnp.float32
  assert not np.allclose(mu, logvar)  # two separate maps
