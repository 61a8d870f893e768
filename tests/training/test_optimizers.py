"""The learning-rate schedules and optimizers, each against values worked out by hand."""

import jax.numpy as jnp
import numpy as np
import optax
import pytest

from vmsst.training import optimizers


def _at(schedule, *steps):
  return [float(schedule(s)) for s in steps]


def test_inverse_sqrt_warms_up_linearly_then_decays_as_one_over_sqrt_step():
  schedule = optimizers.inverse_sqrt_schedule(peak_learning_rate=1e-3, warmup_steps=100)
  # step 0 is treated as step 1 so the first update is not wasted.
  assert _at(schedule, 0, 1, 50, 100, 400, 10_000) == pytest.approx(
      [1e-5, 1e-5, 5e-4, 1e-3, 5e-4, 1e-4], rel=1e-6)


@pytest.mark.parametrize("name, middle", [("warmup_linear_schedule", 0.5),
                                          ("warmup_cosine_schedule", 0.5)])
def test_warmup_then_decay_starts_at_zero_peaks_and_ends_at_zero(name, middle):
  schedule = getattr(optimizers, name)(peak_learning_rate=2.0, warmup_steps=10, total_steps=110)
  start, half_warm, peak, mid_decay, end = _at(schedule, 0, 5, 10, 60, 110)
  assert (start, half_warm, peak, end) == pytest.approx((0.0, 1.0, 2.0, 0.0), abs=1e-6)
  assert mid_decay == pytest.approx(2.0 * middle, rel=1e-5)


def test_linear_and_cosine_decays_differ_a_quarter_of_the_way():
  """A quarter into the decay: linear 3/4 of the peak, cosine (1 + cos(π/4)) / 2."""
  linear = optimizers.warmup_linear_schedule(peak_learning_rate=1.0, warmup_steps=10,
                                             total_steps=110)
  cosine = optimizers.warmup_cosine_schedule(peak_learning_rate=1.0, warmup_steps=10,
                                             total_steps=110)
  assert float(linear(35)) == pytest.approx(0.75, rel=1e-5)
  assert float(cosine(35)) == pytest.approx((1 + np.cos(np.pi / 4)) / 2, rel=1e-5)


def _first_update(optimizer, params, grads):
  updates, _ = optimizer.update(grads, optimizer.init(params), params)
  return np.asarray(updates)


def test_adamw_first_step_clips_the_global_norm_then_normalises():
  """Adam's first step is −lr · g / (|g| + eps); clipping [3, 4] to norm 1 gives [.6, .8]."""
  params, grads = jnp.zeros(2), jnp.array([3.0, 4.0])
  clipped = optimizers.adamw(learning_rate=0.1, eps=1.0, clip_global_norm=1.0)
  plain = optimizers.adamw(learning_rate=0.1, eps=1.0)
  np.testing.assert_allclose(_first_update(clipped, params, grads),
                             -0.1 * np.array([0.6, 0.8]) / (np.array([0.6, 0.8]) + 1.0),
                             rtol=1e-5)
  np.testing.assert_allclose(_first_update(plain, params, grads),
                             -0.1 * np.array([3.0, 4.0]) / (np.array([3.0, 4.0]) + 1.0),
                             rtol=1e-5)


def test_adamw_weight_decay_is_decoupled_and_scaled_by_the_learning_rate():
  """With a zero gradient only the decay moves the parameters: −lr · wd · p."""
  params = jnp.array([2.0, -4.0])
  update = _first_update(optimizers.adamw(learning_rate=0.5, weight_decay=0.1), params,
                         jnp.zeros(2))
  np.testing.assert_allclose(update, [-0.1, 0.2], rtol=1e-6)


def test_adafactor_first_step_is_the_learning_rate_times_the_gradient_sign():
  """Step 1: second moment = g² (decay 1 − 1^−0.8 = 0), no momentum, RMS 1 < threshold."""
  params, grads = jnp.zeros(3), jnp.array([0.5, -2.0, 8.0])
  update = _first_update(optimizers.adafactor(learning_rate=0.01,
                                              multiply_by_parameter_scale=False), params, grads)
  np.testing.assert_allclose(update, [-0.01, 0.01, -0.01], rtol=1e-4)


def test_adafactor_parameter_scale_multiplies_the_step_by_each_tensors_rms():
  """multiply_by_parameter_scale (Shazeer & Stern 2018 Alg. 4; optax's and T5X's default):
  the step is lr · max(RMS(p), 1e-3) per tensor, so a matrix of RMS 0.02 moves 50x
  less than without it, and a zero tensor still moves lr · 1e-3.
  """
  grads = {"w": jnp.array([0.5, -2.0, 8.0, 1.0]), "zero": jnp.array([1.0, -1.0])}
  params = {"w": jnp.array([0.02, -0.02, 0.02, -0.02]), "zero": jnp.zeros(2)}
  scaled = optimizers.adafactor(learning_rate=0.01, multiply_by_parameter_scale=True)
  unscaled = optimizers.adafactor(learning_rate=0.01, multiply_by_parameter_scale=False)
  for optimizer, w_step, zero_step in ((scaled, 0.01 * 0.02, 0.01 * 1e-3),
                                       (unscaled, 0.01, 0.01)):
    updates, _ = optimizer.update(grads, optimizer.init(params), params)
    np.testing.assert_allclose(updates["w"], -w_step * np.sign(grads["w"]), rtol=1e-4)
    np.testing.assert_allclose(updates["zero"], [-zero_step, zero_step], rtol=1e-4)


def test_compensated_adds_one_state_per_parameter_after_the_optimizer():
  chained = optimizers.compensated(optimizer=optax.sgd(1.0))
  params = {"w": jnp.ones(3)}
  state = chained.init(params)
  updates, _ = chained.update({"w": jnp.array([0.5, 0.0, -0.25])}, state, params)
  np.testing.assert_allclose(updates["w"], [-0.5, 0.0, 0.25])
  with pytest.raises(ValueError, match="needs the parameters"):
    chained.update({"w": jnp.ones(3)}, state)
