"""fast_random: the same bits and masks as jax.random, without the rolled loop on CPU."""

import jax
import numpy as np
import pytest

from vmsst.model import fast_random


@pytest.mark.parametrize("shape", [(1,), (5,), (3, 7, 11), (64, 32, 96)])
def test_bits_equal_jax_random_bits(shape):
  key = jax.random.key(17)
  np.testing.assert_array_equal(jax.jit(fast_random.threefry_bits, static_argnums=1)(key, shape),
                                jax.random.bits(key, shape))


@pytest.mark.parametrize("p", [0.0, 0.1, 0.9, 1.0])
def test_bernoulli_equals_jax_random_bernoulli(p):
  key = jax.random.key(3)
  got = jax.jit(lambda k: fast_random.bernoulli(k, p, (16, 32, 48)))(key)
  np.testing.assert_array_equal(got, jax.random.bernoulli(key, p, (16, 32, 48)))


def test_per_row_keys_under_vmap_equal_jax():
  keys = jax.random.split(jax.random.key(5), 8)

  def masks(draw):
    return jax.jit(jax.vmap(lambda k: draw(jax.random.fold_in(k, 11), 0.9, (32, 64))))(keys)

  np.testing.assert_array_equal(masks(fast_random.bernoulli), masks(jax.random.bernoulli))


def test_other_key_implementations_use_jax_random():
  key = jax.random.key(2, impl="rbg")
  np.testing.assert_array_equal(fast_random.bernoulli(key, 0.5, (40,)),
                                jax.random.bernoulli(key, 0.5, (40,)))


def test_cpu_lowering_has_no_loop_where_jax_random_has_one():
  # The reason the module exists: jax.random's CPU lowering is a rolled while loop.
  key = jax.random.key(0)

  def hlo(draw):
    return jax.jit(lambda k: draw(k, 0.9, (256, 512))).lower(key).compile().as_text()

  assert " while(" in hlo(jax.random.bernoulli)
  assert " while(" not in hlo(fast_random.bernoulli)
