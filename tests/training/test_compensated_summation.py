"""Kahan-compensated updates: learning rates of 1e-8 move float32 parameters exactly."""

import jax
import numpy as np
import optax

from vmsst.training import optimizers
from vmsst.training import parameter_groups

START = np.array([1.0, 0.3, -2.0, 1e-3], np.float32)


def _run(optimizer, grads_fn, steps):
  params = {"w": START.copy()}
  state = optimizer.init(params)
  update = jax.jit(optimizer.update)
  for t in range(steps):
    updates, state = update(grads_fn(t), state, params)
    params = optax.apply_updates(params, updates)
  return np.asarray(params["w"])


def test_plain_sgd_loses_1e8_steps_compensated_keeps_them():
  grads = lambda t: {"w": -np.ones(4, np.float32)}  # each step asks for +1e-8
  plain = _run(optax.sgd(1e-8), grads, 1000)
  kahan = _run(optimizers.compensated(optimizer=optax.sgd(1e-8)), grads, 1000)
  want = START.astype(np.float64) + 1000 * np.float64(np.float32(1e-8))  # 1 + 1e-5, ...
  # 1e-8 < ulp/2 of 1.0 (5.96e-8), of 0.3 (1.49e-8) and of 2.0: every step rounds away.
  assert np.array_equal(plain[:3], START[:3])
  assert np.all(np.abs(kahan - want) <= np.abs(np.spacing(want.astype(np.float32))))
  assert kahan[0] == np.float32(want[0])  # the nearest float32 to 1 + 1e-5 exactly


def test_compensated_adam_matches_a_float64_sum_of_its_updates():
  rng = np.random.default_rng(0)
  grads = [{"w": rng.normal(size=4).astype(np.float32)} for _ in range(300)]
  # Adam's updates do not depend on the parameters: sum them in float64.
  reference, state = START.astype(np.float64), optax.adam(1e-8).init({"w": START})
  for g in grads:
    u, state = optax.adam(1e-8).update(g, state)
    reference += np.asarray(u["w"], np.float64)
  kahan = _run(optimizers.compensated(optimizer=optax.adam(1e-8)), lambda t: grads[t], 300)
  plain = _run(optax.adam(1e-8), lambda t: grads[t], 300)
  ulp = np.abs(np.spacing(reference.astype(np.float32)))
  assert np.all(np.abs(kahan - reference) <= ulp)
  assert np.max(np.abs(plain[:3] - reference[:3]) / ulp[:3]) > 5  # many ulps lost


def test_compensation_composes_with_frozen_groups():
  optimizer = parameter_groups.frozen_groups(
      optimizer=optimizers.compensated(optimizer=optax.sgd(1e-8)), groups=["re:^frozen$"])
  params = {"w": START.copy(), "frozen": START.copy()}
  state = optimizer.init(params)
  assert sum(x.size for x in jax.tree.leaves(state)) == 4  # one compensation per trainable entry
  for _ in range(100):
    updates, state = optimizer.update({"w": -np.ones(4, np.float32),
                                       "frozen": -np.ones(4, np.float32)}, state, params)
    params = optax.apply_updates(params, updates)
  assert np.array_equal(params["frozen"], START)
  assert params["w"][0] == np.float32(1.0 + 100 * np.float64(np.float32(1e-8)))
