"""The compiled train step: sharded equals single-device, and it learns."""

import dataclasses

import jax
import numpy as np
import optax
import pytest

from vmsst_testing import TINY, random_batch
from vmsst.model import models
from vmsst.training import optimizers
from vmsst.model import partitioning
from vmsst.training import trainer as trainer_lib
from vmsst.objectives import MODELS

needs_8_devices = pytest.mark.skipif(
    jax.device_count() < 8,
    reason="needs XLA_FLAGS=--xla_force_host_platform_device_count=8 (tests/conftest.py sets it)")


def _run_steps(model, mesh, batch, steps=1):
  optimizer = optimizers.adafactor(learning_rate=1e-2)
  trainer = trainer_lib.Trainer(model, optimizer, mesh, models.batch_shapes(8, 12))
  state = trainer.initialize(jax.random.key(0))
  for _ in range(steps):
    state, metrics = trainer.step(state, batch, jax.random.key(1))
  return trainer, jax.device_get(state), jax.device_get(metrics)


# bf16 Contrastive with dropout: per-row dropout keys and the bf16 projections'
# custom gradient under the mesh; bf16 sums in another order round differently
# (measured: 0.17% on the loss; another dropout key moves it 2.1%).
BF16_DROPOUT = dataclasses.replace(TINY, dtype="bfloat16", dropout_rate=0.1)


@needs_8_devices
@pytest.mark.parametrize("name,cfg,tolerance", [
    ("vmsst", TINY, 1e-5), ("contrastive", TINY, 1e-5),
    ("contrastive", BF16_DROPOUT, 5e-3)], ids=["vmsst", "contrastive", "contrastive_bf16"])
@pytest.mark.slow
def test_data4_model2_step_equals_single_device(name, cfg, tolerance):
  batch = random_batch(batch_size=8)
  single = partitioning.make_mesh(1, 1, devices=jax.devices()[:1])
  sharded = partitioning.make_mesh(4, 2, devices=jax.devices()[:8])
  _, state_1, metrics_1 = _run_steps(MODELS[name](cfg), single, batch)
  trainer_8, state_8, metrics_8 = _run_steps(MODELS[name](cfg), sharded, batch)
  assert metrics_1["loss"] == pytest.approx(metrics_8["loss"], rel=tolerance)
  if cfg.dtype == np.float32:
    jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=2e-4, atol=2e-5),
                 state_1.params, state_8.params)
  else:  # Adafactor's update is about ±lr whatever the gradient's size, so a
    # gradient near 0 whose bf16 sign flips moves its parameter by 2 lr (0.02).
    for a, b in zip(jax.tree.leaves(state_1.params), jax.tree.leaves(state_8.params)):
      assert np.abs(a - b).max() <= 0.021 and np.mean(np.abs(a - b) > 1e-3) < 0.01
  # The vocabulary axis of the embedding really is split over "model".
  spec = trainer_8.state_shardings.params["token_embed"]["embedding"].spec
  assert tuple(spec) == ("model", None)


@needs_8_devices
@pytest.mark.slow
def test_train_step_compiles_ahead_of_time_for_the_mesh():
  """The step of test_data4_model2_step_equals_single_device[vmsst] (its optimizer and mesh):
  after that test, the session's compilation cache holds the program."""
  mesh = partitioning.make_mesh(4, 2, devices=jax.devices()[:8])
  trainer = trainer_lib.Trainer(MODELS["vmsst"](TINY), optimizers.adafactor(learning_rate=1e-2),
                                mesh, models.batch_shapes(8, 12))
  compiled = trainer.compile_step(jax.random.key(0))
  assert compiled.memory_analysis().argument_size_in_bytes > 0


# VMSST's optimizer in the one-device tests below: one step program (without skipping) for both,
# compiled once per session (its compilation cache).
ADAM = lambda: optax.adam(3e-3)


@pytest.mark.slow
def test_repeated_steps_on_one_batch_drive_the_loss_down():
  mesh = partitioning.make_mesh(1, 1, devices=jax.devices()[:1])
  model = MODELS["vmsst"](TINY)
  trainer = trainer_lib.Trainer(model, ADAM(), mesh, models.batch_shapes(8, 12))
  state = trainer.initialize(jax.random.key(0))
  batch = random_batch(batch_size=8)
  first = None
  for _ in range(30):
    state, metrics = trainer.step(state, batch, jax.random.key(1))
    first = first if first is not None else float(metrics["loss"])
  assert float(metrics["loss"]) < 0.5 * first
  assert int(state.step) == 30


def test_optimizer_state_follows_parameter_shardings():
  mesh = partitioning.make_mesh(1, 1, devices=jax.devices()[:1])
  trainer = trainer_lib.Trainer(MODELS["contrastive"](TINY), optax.adam(1e-3), mesh,
                                models.batch_shapes(8, 12))
  adam_state = trainer.state_shardings.opt_state[0]
  assert adam_state.mu == trainer.state_shardings.params


def _poisoned(batch):
  """A token id past the vocabulary: its embedding lookup (jnp.take, mode "fill") is NaN."""
  batch = {k: v.copy() for k, v in batch.items()}
  batch["tokens_a"][0, 0] = TINY.vocab_size + 5
  return batch


@pytest.mark.slow
def test_a_nonfinite_step_is_discarded_when_skipping_and_flagged_either_way():
  """A finite step is flagged 0 and a non-finite one 1, with the (static) skip switch on or
  off; only with it on is the bad update discarded."""
  mesh = partitioning.make_mesh(1, 1, devices=jax.devices()[:1])
  good, bad = random_batch(batch_size=8, seed=1), _poisoned(random_batch(batch_size=8, seed=2))
  runs = {}
  for skip in (False, True):
    trainer = trainer_lib.Trainer(MODELS["vmsst"](TINY), ADAM(), mesh,
                                  models.batch_shapes(8, 12), skip_nonfinite=skip)
    state, good_metrics = trainer.step(trainer.initialize(jax.random.key(0)), good,
                                       jax.random.key(1))
    assert float(good_metrics["nonfinite"]) == 0.0 and int(state.step) == 1
    before = jax.device_get(state)
    after, metrics = trainer.step(state, bad, jax.random.key(1))
    runs[skip] = before, jax.device_get(after), jax.device_get(metrics)
  (before_f, after_f, metrics_f), (before_t, after_t, metrics_t) = runs[False], runs[True]
  # The good step is the same with or without the (static) skip switch.
  jax.tree.map(np.testing.assert_array_equal, before_f, before_t)
  assert float(metrics_f["nonfinite"]) == float(metrics_t["nonfinite"]) == 1.0
  assert not np.isfinite(float(metrics_t["loss"]))
  # Without skipping the NaN reaches the parameters; with it nothing moves but the step.
  assert np.isnan(after_f.params["token_embed"]["embedding"]).any()
  assert int(after_t.step) == 2
  jax.tree.map(np.testing.assert_array_equal, (after_t.params, after_t.opt_state),
               (before_t.params, before_t.opt_state))


# The objectives' constructor arguments beyond the network's configuration.
_OBJECTIVE_ARGS = {"entity_contrastive": dict(num_entities=7, num_hard_negatives=1),
                   "distillation": dict(teacher_dim=5)}


@needs_8_devices
@pytest.mark.parametrize("name", sorted(MODELS))
def test_the_sharded_step_holds_no_conditional(name):
  """A conditional in the step can hold collectives (the partitioner puts a sharded gather's
  inside it), and XLA:CPU does not order those with the step's other collectives: with
  several devices, one waited in the conditional's all-gather while the rest waited in a later
  all-to-all until XLA aborted the process. `jnp.diagonal` of a square matrix was one
  (`losses.diagonal` is not)."""
  model = MODELS[name](dataclasses.replace(TINY, dropout_rate=0.1),
                       **_OBJECTIVE_ARGS.get(name, {}))
  mesh = partitioning.make_mesh(8, 1, devices=jax.devices()[:8])
  trainer = trainer_lib.Trainer(model, optax.adam(1e-3), mesh, model.input_shapes(8, 12))
  program = trainer.lower_step(jax.random.key(0)).as_text()
  assert "stablehlo.case" not in program and "stablehlo.if" not in program


# --- gradient accumulation (train.microbatches) ----------------------------------

def _with_teacher(batch, seed, teacher_dim=5):
  teacher = np.random.default_rng(seed).normal(size=(len(batch["sem_side"]), teacher_dim))
  return {**batch, "teacher": teacher.astype(np.float32)}


def _steps_with_microbatches(name, cfg, microbatches, mesh, steps=3, batch_size=8):
  """Params and metrics after `steps` plain-SGD steps on fixed batches and one base key."""
  model = MODELS[name](cfg, **_OBJECTIVE_ARGS.get(name, {}))
  trainer = trainer_lib.Trainer(model, optax.sgd(0.1), mesh,
                                model.input_shapes(batch_size, 12), microbatches=microbatches)
  state = trainer.initialize(jax.random.key(0))
  for step in range(steps):
    batch = random_batch(batch_size=batch_size, seed=step)
    if name == "distillation":
      batch = _with_teacher(batch, step)
    state, metrics = trainer.step(state, batch, jax.random.key(1))
  return jax.device_get(state.params), jax.device_get(metrics)


@pytest.mark.slow  # 2-3 compiles of a small step each
@pytest.mark.parametrize("name,counts", [("vmsst", (2,)), ("bitranslation", (2,)),
                                         ("distillation", (2, 4))])
def test_microbatches_give_the_update_of_the_whole_batch(name, counts):
  """Every dropout mask and noise draw is the pair's own (models.pair_keys), so N strided
  microbatches give N = 1's parameters up to the order of the float sums (measured:
  within 2.4e-7 absolute after three steps)."""
  cfg = dataclasses.replace(TINY, dropout_rate=0.1)
  mesh = partitioning.make_mesh(1, 1, devices=jax.devices()[:1])
  whole, metrics = _steps_with_microbatches(name, cfg, 1, mesh)
  for count in counts:
    accumulated, accumulated_metrics = _steps_with_microbatches(name, cfg, count, mesh)
    jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6),
                 whole, accumulated)
    # Each microbatch's loss is a mean over its pairs: their mean is the batch's.
    assert accumulated_metrics["loss"] == pytest.approx(metrics["loss"], rel=1e-5)


@needs_8_devices
@pytest.mark.slow
def test_the_accumulating_step_runs_sharded_and_equals_one_device():
  """4 × 2 mesh, 2 microbatches of 4 pairs: one pair per data shard, the update of one
  device without microbatches (Distillation: the cheapest objective that accumulates)."""
  cfg = dataclasses.replace(TINY, dropout_rate=0.1)
  single = partitioning.make_mesh(1, 1, devices=jax.devices()[:1])
  sharded = partitioning.make_mesh(4, 2, devices=jax.devices()[:8])
  whole, _ = _steps_with_microbatches("distillation", cfg, 1, single, steps=1)
  accumulated, metrics = _steps_with_microbatches("distillation", cfg, 2, sharded, steps=1)
  assert float(metrics["nonfinite"]) == 0.0
  jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=2e-4, atol=2e-5),
               whole, accumulated)


def test_microbatches_that_do_not_divide_the_batch_or_its_shards_are_refused():
  mesh = partitioning.make_mesh(1, 1, devices=jax.devices()[:1])
  model = MODELS["vmsst"](TINY)
  with pytest.raises(ValueError, match=r"train.microbatches = 3 .* batch size 8"):
    trainer_lib.Trainer(model, optax.sgd(0.1), mesh, model.input_shapes(8, 12), microbatches=3)
  with pytest.raises(ValueError, match="train.microbatches"):
    trainer_lib.check_microbatches(model, 8, 0)


@pytest.mark.parametrize("name", sorted(n for n, cls in MODELS.items()
                                        if not cls.loss_is_mean_over_pairs))
def test_microbatches_are_refused_for_in_batch_negatives(name):
  model = MODELS[name](dataclasses.replace(TINY, dropout_rate=0.1),
                       **_OBJECTIVE_ARGS.get(name, {}))
  with pytest.raises(ValueError, match="train.microbatches.*gradient_cache_chunk"):
    trainer_lib.check_microbatches(model, 8, 2)
  trainer_lib.check_microbatches(model, 8, 1)  # the whole batch at once: as always
