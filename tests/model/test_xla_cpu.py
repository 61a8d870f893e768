"""The XLA:CPU switch: on and off compute the same step; only the program differs."""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from vmsst_testing import TINY, init_params, random_batch
from vmsst.model import xla_cpu
from vmsst.objectives import MODELS

BF16_DROPOUT = dataclasses.replace(TINY, dtype="bfloat16", dropout_rate=0.1)


def _loss_and_grads(name, tuned):
  """Loss and gradients of one bf16 dropout step, traced with the switch set to `tuned`."""
  model = MODELS[name](BF16_DROPOUT)
  params = init_params(model)
  batch = random_batch()
  with xla_cpu.tuning(tuned):
    fn = jax.jit(jax.value_and_grad(lambda p: model.loss_fn(p, batch, jax.random.key(3))[0]))
    loss, grads = fn(params)
  return float(loss), jax.device_get(grads)


@pytest.mark.slow
@pytest.mark.parametrize("name", ["contrastive", "vmsst"])
def test_both_settings_give_the_same_step(name):
  loss_on, grads_on = _loss_and_grads(name, True)
  loss_off, grads_off = _loss_and_grads(name, False)
  # Same masks bit for bit and the same forward products; untuned, autodiff
  # rounds each kernel gradient to bf16 before summing it in, tuned it stays
  # f32 (measured: up to 1% of a leaf's norm in VMSST, whose decoder reuses
  # the embedding).
  assert loss_on == pytest.approx(loss_off, rel=1e-3)
  for a, b in zip(jax.tree.leaves(grads_on), jax.tree.leaves(grads_off)):
    assert np.linalg.norm(a - b) <= 0.02 * np.linalg.norm(b) + 1e-6


def test_switch_changes_the_program():
  x = jnp.ones((8, 16), jnp.bfloat16)
  kernel = jnp.ones((16, 32), jnp.float32)

  def hlo(tuned):
    with xla_cpu.tuning(tuned):
      grad = jax.grad(lambda x, k: xla_cpu.matmul(x, k).sum(), argnums=(0, 1))
      return jax.jit(grad).lower(x, kernel).as_text()

  assert "optimization_barrier" in hlo(True)
  assert "optimization_barrier" not in hlo(False)


def test_masks_are_jax_random_either_way():
  key = jax.random.key(5)
  for tuned in (True, False):
    with xla_cpu.tuning(tuned):
      np.testing.assert_array_equal(xla_cpu.bernoulli(key, 0.9, (64, 33)),
                                    jax.random.bernoulli(key, 0.9, (64, 33)))


def test_default_follows_backend_and_env(monkeypatch):
  monkeypatch.delenv("VMSST_XLA_CPU_TUNING", raising=False)
  assert xla_cpu.enabled() == (jax.default_backend() == "cpu")
  monkeypatch.setenv("VMSST_XLA_CPU_TUNING", "0")
  assert not xla_cpu.enabled()
  with xla_cpu.tuning(True):
    assert xla_cpu.enabled()
  monkeypatch.setenv("VMSST_XLA_CPU_TUNING", "yes")
  with pytest.raises(ValueError, match="VMSST_XLA_CPU_TUNING='yes'.*1.*0"):
    xla_cpu.enabled()
