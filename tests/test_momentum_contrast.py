"""Dual momentum contrast: the loss by hand, EMA and FIFO queues, sharding, resume, learning."""

import flax.linen as nn
import gin
import jax
import numpy as np
import optax
import pytest

import vmsst.train
import vmsst_testing
from vmsst_testing import TINY, init_params, random_batch
from vmsst import checkpointing
from vmsst import models
from vmsst import partitioning
from vmsst import trainer as trainer_lib
from vmsst.objectives import MomentumContrast
from vmsst.objectives import momentum_contrast

needs_8_devices = pytest.mark.skipif(
    jax.device_count() < 8,
    reason="needs XLA_FLAGS=--xla_force_host_platform_device_count=8 (tests/conftest.py sets it)")


@pytest.fixture(autouse=True)
def _clean_gin():
  yield
  gin.clear_config()


def _normalize(x):
  x = np.asarray(x, np.float64)
  return x / np.linalg.norm(x, axis=-1, keepdims=True)


def _numpy_queue_info_nce(q, k, queue, temperature):
  q, k = _normalize(q), _normalize(k)
  logits = np.concatenate([np.sum(q * k, -1, keepdims=True), q @ np.asarray(queue).T], -1)
  logits /= temperature
  top = logits.max(-1)
  lse = top + np.log(np.exp(logits - top[:, None]).sum(-1))
  return np.mean(lse - logits[:, 0]), np.mean(logits[:, 0] > logits[:, 1:].max(-1))


def _trainer(model, batch_size=4, mesh=None, optimizer=None):
  mesh = mesh or partitioning.make_mesh(1, 1, devices=jax.devices()[:1])
  return trainer_lib.Trainer(model, optimizer or optax.adam(3e-3), mesh,
                             models.batch_shapes(batch_size, 12))


def test_queue_info_nce_by_hand_and_against_numpy():
  # logits [1, 0, -1] at τ = 1: loss = log(e + 1 + 1/e) − 1; the positive wins.
  loss, accuracy = momentum_contrast.queue_info_nce(
      np.array([[2.0, 0.0]]), np.array([[3.0, 0.0]]), np.array([[0.0, 1.0], [-1.0, 0.0]]), 1.0)
  assert float(loss) == pytest.approx(np.log(np.e + 1 + 1 / np.e) - 1, rel=1e-6)
  assert float(accuracy) == 1.0
  rng = np.random.default_rng(0)
  q, k, queue = rng.normal(size=(3, 5)), rng.normal(size=(3, 5)), _normalize(rng.normal(size=(7, 5)))
  loss, accuracy = momentum_contrast.queue_info_nce(q, k, queue.astype(np.float32), 0.04)
  want_loss, want_accuracy = _numpy_queue_info_nce(q, k, queue, 0.04)
  assert float(loss) == pytest.approx(want_loss, rel=1e-4)
  assert float(accuracy) == pytest.approx(want_accuracy)


@pytest.fixture(scope="module")
def shared_tower():
  """(model, params, unboxed model state, batch) of a shared-tower model, K = 8."""
  model = MomentumContrast(TINY, temperature=0.1, queue_size=8)
  params = init_params(model)
  state = jax.device_get(nn.unbox(model.init_model_state(params, jax.random.key(3))))
  return model, params, state, random_batch()


def test_loss_is_both_directions_against_momentum_keys_and_the_other_queue(shared_tower):
  model, params, state, batch = shared_tower
  state = dict(state, momentum=init_params(model, seed=1))  # keys come from here, not `params`
  loss, (m, aux) = jax.jit(model.loss_fn_with_state)(params, state, batch, jax.random.key(0))
  encode = jax.jit(model.encode)  # TINY has dropout 0, so queries are deterministic too
  q = {s: encode(params, batch[f"tokens_{s}"], batch[f"mask_{s}"]) for s in "ab"}
  k = {s: encode(state["momentum"], batch[f"tokens_{s}"], batch[f"mask_{s}"]) for s in "ab"}
  ab, _ = _numpy_queue_info_nce(q["a"], k["b"], state["queue_b"], 0.1)
  ba, _ = _numpy_queue_info_nce(q["b"], k["a"], state["queue_a"], 0.1)
  assert float(loss) == pytest.approx(ab + ba, rel=1e-4)
  assert float(m["momentum_contrast_loss_ab"]) == pytest.approx(ab, rel=1e-4)
  np.testing.assert_allclose(aux["keys_b"], _normalize(k["b"]), rtol=1e-5, atol=1e-6)
  with pytest.raises(TypeError, match="loss_fn_with_state"):
    model.loss_fn(params, batch, jax.random.key(0))


def test_no_gradient_reaches_momentum_encoders_or_queues(shared_tower):
  model, params, state, batch = shared_tower
  floats = {k: v for k, v in state.items() if k != "queue_pointer"}
  loss = lambda p, f: model.loss_fn_with_state(p, dict(state, **f), batch, jax.random.key(0))[0]
  grad_params, grad_state = jax.jit(jax.grad(loss, argnums=(0, 1)))(params, floats)
  assert all(not np.any(g) for g in jax.tree.leaves(grad_state))
  assert any(np.any(g) for g in jax.tree.leaves(grad_params))
  # Momentum weights and queues are no optimizer parameters.
  trainer = _trainer(model)
  adam = trainer.abstract_state.opt_state[0]
  assert jax.tree.structure(adam.mu) == jax.tree.structure(trainer.abstract_state.params)


def test_ema_update_is_exact_and_zero_momentum_copies_the_base_encoder(shared_tower):
  np.testing.assert_array_equal(
      momentum_contrast.ema({"w": np.array([2.0, 4.0])}, {"w": np.array([0.0, 8.0])}, 0.75)["w"],
      [1.5, 5.0])
  _, old, state, _ = shared_tower
  model, new = MomentumContrast(TINY, momentum=0.9, queue_size=8), init_params(MomentumContrast(TINY), seed=1)
  keys = {"keys_a": np.zeros((4, 32), np.float32), "keys_b": np.zeros((4, 32), np.float32)}
  updated = jax.jit(model.update_model_state)(state, new, keys)
  jax.tree.map(lambda u, o, n: np.testing.assert_allclose(u, 0.9 * o + 0.1 * n, rtol=1e-6,
                                                          atol=1e-7),
               updated["momentum"], old, new)
  # m = 0, the paper's degenerate case, is a documented binding, not a code path.
  assert "momentum = 0.0" in (vmsst_testing.ROOT / "gin/models/momentum_contrast.gin").read_text()
  assert "degenerate" in MomentumContrast.__init__.__doc__
  with pytest.raises(ValueError, match="momentum"):
    MomentumContrast(TINY, momentum=1.5)
  trainer = _trainer(MomentumContrast(TINY, momentum=0.0, queue_size=8))
  state = trainer.initialize(jax.random.key(0))
  for seed in range(2):
    state, _ = trainer.step(state, random_batch(seed=seed), jax.random.key(1))
    host = jax.device_get(state)
    jax.tree.map(np.testing.assert_array_equal, host.model_state["momentum"], host.params)


@pytest.fixture(scope="module")
def separate_towers_run():
  """5 steps of B = 4 into queues of K = 16 (the ring wraps once), separate towers.

  Returns the trainer, the live final state, and host copies: the initial
  and after-3-steps model states and the keys [B, d] each step should enqueue.
  """
  model = MomentumContrast(TINY, momentum=0.9, queue_size=16, separate_towers=True)
  trainer = _trainer(model)
  embed = jax.jit(model.embed_side, static_argnums=2)
  state = trainer.initialize(jax.random.key(0))
  run = {"trainer": trainer, "initial": jax.device_get(state.model_state), "keys": []}
  for step in range(5):
    batch = random_batch(seed=step)
    momentum = jax.device_get(state.model_state["momentum"])
    run["keys"].append({s: _normalize(embed(momentum, batch, s)) for s in "ab"})
    state, _ = trainer.step(state, batch, jax.random.key(1))
    if step == 2:
      run["after_3"] = jax.device_get(state.model_state)
  run["final"], run["state"] = jax.device_get(state.model_state), state
  return run


def test_queues_hold_the_last_keys_in_order_oldest_overwritten_first(separate_towers_run):
  run = separate_towers_run
  after_3, final = run["after_3"], run["final"]
  assert int(after_3["queue_pointer"]) == 12 and int(final["queue_pointer"]) == 4
  for s in "ab":
    keys = np.concatenate([k[s] for k in run["keys"]])  # 20 keys, oldest first
    # N·B = 12 ≤ K: rows 0..11 are the keys in order, rows 12..15 untouched.
    np.testing.assert_allclose(after_3[f"queue_{s}"][:12], keys[:12], rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(after_3[f"queue_{s}"][12:], run["initial"][f"queue_{s}"][12:])
    # N·B = 20 > K: the last 16 keys, read from the pointer (the oldest) on.
    oldest_first = np.roll(final[f"queue_{s}"], -int(final["queue_pointer"]), axis=0)
    np.testing.assert_allclose(oldest_first, keys[-16:], rtol=1e-5, atol=1e-6)


@needs_8_devices
def test_data4_model2_equals_single_device_with_the_queue_split_over_data():
  batches = [random_batch(batch_size=8, seed=s) for s in range(3)]
  runs = []
  for mesh in (partitioning.make_mesh(1, 1, devices=jax.devices()[:1]),
               partitioning.make_mesh(4, 2, devices=jax.devices()[:8])):
    trainer = _trainer(MomentumContrast(TINY, momentum=0.9, queue_size=32), 8, mesh)
    state, losses = trainer.initialize(jax.random.key(0)), []
    for batch in batches:
      state, metrics = trainer.step(state, batch, jax.random.key(1))
      losses.append(float(metrics["loss"]))
    runs.append((trainer, losses, jax.device_get(state)))
  (_, losses_1, state_1), (trainer_8, losses_8, state_8) = runs
  np.testing.assert_allclose(losses_1, losses_8, rtol=1e-5)
  jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=2e-4, atol=2e-5),
               (state_1.params, state_1.model_state), (state_8.params, state_8.model_state))
  shardings = trainer_8.state_shardings.model_state
  assert tuple(shardings["queue_a"].spec) == ("data", None)
  assert tuple(shardings["momentum"]["token_embed"]["embedding"].spec) == ("model", None)


def test_checkpoint_round_trip_restores_the_model_state_and_resumes_identically(
    separate_towers_run, tmp_path):
  trainer, state = separate_towers_run["trainer"], separate_towers_run["state"]
  manager = checkpointing.make_manager(str(tmp_path))
  checkpointing.save(manager, 5, state, force=True)
  manager.wait_until_finished()
  restored = checkpointing.restore_latest(manager, trainer.abstract_state)
  jax.tree.map(np.testing.assert_array_equal, jax.device_get(restored), jax.device_get(state))
  assert restored.model_state["queue_a"].sharding == trainer.state_shardings.model_state["queue_a"]
  after = [jax.device_get(trainer.step(s, random_batch(seed=7), jax.random.key(1))[0])
           for s in (restored, state)]  # `state` is donated last: nothing reads it afterwards
  jax.tree.map(np.testing.assert_array_equal, after[0], after[1])


def test_short_run_on_real_data_learns_its_queue_contrast(data_dir, tiny_vocab_path, tmp_path):
  # K = 256 keys of B = 32: real keys fill the queues after 8 steps; before
  # that, random unit vectors are easy negatives and the loss is near 0. The
  # EMA is shortened (m = 0.9) so that 60 steps move the key encoders at all.
  vmsst_testing.configure_small_run(
      data_dir, tiny_vocab_path, tmp_path / "m", steps=60, objective="momentum_contrast",
      extra=["train.evaluator = None", "train.mixture_name = 'vmsst_multi30k'",
             "MomentumContrast.queue_size = 256", "MomentumContrast.momentum = 0.9",
             "train.log_every = 10"])
  result = vmsst.train.train()
  full = [loss for step, loss in result["loss_history"] if step > 256 // 32]
  assert result["step"] == 60
  assert np.mean(full[-2:]) < 0.6 * full[0], result["loss_history"]
  # Positives above all 256 queued negatives (chance is well below 1 / 257 per side).
  assert result["final_metrics"]["queue_accuracy"] > 0.5, result["final_metrics"]
