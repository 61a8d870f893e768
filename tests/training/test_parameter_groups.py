"""Parameter groups on the real tree; frozen groups: no optimizer state, bit-identical, checkpointed."""

import dataclasses

import jax
import numpy as np
import optax
import pytest

from vmsst_testing import TINY, init_params, param_shapes, random_batch
from vmsst.training import checkpointing
from vmsst.model import param_files
from vmsst.training import parameter_groups as pg
from vmsst.model import partitioning
from vmsst.training import trainer as trainer_lib
from vmsst.objectives import VMSST, QueryTower

THREE_LAYERS = dataclasses.replace(TINY, num_encoder_layers=3)


@pytest.fixture(scope="module")
def params():
  return init_params(QueryTower(THREE_LAYERS))


def test_the_language_table_is_an_embedding_and_nothing_else():
  tree = param_shapes(VMSST(TINY))
  embeddings = pg.members(tree, "embeddings")
  assert "language_embed/embedding" in embeddings and "token_embed/embedding" in embeddings
  assert not any(n.startswith("language_embed") for group in ("norms", "head", "blocks")
                 for n in pg.members(tree, group))


def test_groups_resolve_on_the_semantic_encoder_tree(params):
  assert pg.members(params, "embeddings") == ["semantic_positions/positions",
                                              "token_embed/embedding"]
  assert pg.members(params, "attention:1") == [
      "semantic_encoder/layer_1/attention/key/kernel",
      "semantic_encoder/layer_1/attention/out/kernel",
      "semantic_encoder/layer_1/attention/query/kernel",
      "semantic_encoder/layer_1/attention/value/kernel",
      "semantic_encoder/layer_1/pre_attention_norm/bias",
      "semantic_encoder/layer_1/pre_attention_norm/scale"]
  assert pg.members(params, "intermediate:2") == [
      "semantic_encoder/layer_2/mlp/wi/bias", "semantic_encoder/layer_2/mlp/wi/kernel",
      "semantic_encoder/layer_2/pre_mlp_norm/bias", "semantic_encoder/layer_2/pre_mlp_norm/scale"]
  assert len(pg.members(params, "output")) == 6  # wo kernel + bias of three layers
  blocks = pg.members(params, "blocks:0-1")
  # Per block: 4 attention kernels, wi and wo (kernel + bias), 2 norms (scale + bias) = 12.
  assert len(blocks) == 2 * 12 and not any("layer_2" in n for n in blocks)
  assert pg.members(params, "final_norm") == ["semantic_encoder/final_norm/bias",
                                              "semantic_encoder/final_norm/scale"]
  assert len(pg.members(params, "norms")) == 3 * 4 + 2
  assert len(pg.members(params, "head")) == 4
  assert pg.members(params, r"re:mu/kernel$") == ["semantic_head/mu/kernel"]


def test_bad_group_names_are_clear_errors(params):
  with pytest.raises(ValueError, match="unknown parameter group 'atention'"):
    pg.labels(params, ["atention"])
  with pytest.raises(ValueError, match="matches no parameter"):
    pg.labels(params, ["blocks:5"])
  with pytest.raises(ValueError, match="i <= j"):
    pg.labels(params, ["blocks:2-1"])


def _nbytes(tree) -> int:
  return sum(np.asarray(x).nbytes for x in jax.tree.leaves(tree))


@pytest.mark.slow
def test_frozen_leaves_carry_no_optimizer_state_and_stay_bit_identical(params):
  groups = ["embeddings", "blocks:0"]
  optimizer = pg.frozen_groups(optimizer=optax.adam(1e-2), groups=groups)
  state = optimizer.init(params)
  frozen = set(pg.members(params, "embeddings")) | set(pg.members(params, "blocks:0"))
  flat = param_files.flatten(params)
  trainable_bytes = sum(v.nbytes for k, v in flat.items() if k not in frozen)
  # Adam: μ and ν for each trainable parameter, one int32 step count; nothing for frozen ones.
  assert _nbytes(state) == 2 * trainable_bytes + 4
  assert _nbytes(optax.adam(1e-2).init(params)) == 2 * _nbytes(params) + 4
  rng = np.random.default_rng(0)
  current = params
  for _ in range(3):
    grads = jax.tree.map(lambda p: rng.normal(size=p.shape).astype(np.float32), current)
    updates, state = optimizer.update(grads, state, current)
    current = optax.apply_updates(current, updates)
  after = param_files.flatten(jax.device_get(current))
  for name, value in flat.items():
    assert np.array_equal(after[name], value) == (name in frozen), name


@pytest.mark.slow
def test_frozen_train_state_checkpoints_and_restores(tmp_path):
  model = QueryTower(TINY)
  mesh = partitioning.make_mesh(1, 1, devices=jax.devices()[:1])
  optimizer = pg.frozen_groups(optimizer=optax.adam(1e-2), groups=["embeddings", "head"])
  trainer = trainer_lib.Trainer(model, optimizer, mesh, model.input_shapes(4, 12))
  state = trainer.initialize(jax.random.key(0))
  batch = random_batch()
  batch["tokens_negative"] = random_batch(seed=5)["tokens_a"]
  state, _ = trainer.step(state, batch, jax.random.key(1))
  manager = checkpointing.make_manager(str(tmp_path))
  checkpointing.save(manager, 1, state, force=True)
  manager.wait_until_finished()
  restored = checkpointing.restore_latest(manager, trainer.abstract_state)
  saved, back = jax.device_get(state), jax.device_get(restored)
  assert jax.tree.structure(back.opt_state) == jax.tree.structure(saved.opt_state)
  for a, b in zip(jax.tree.leaves(saved), jax.tree.leaves(back)):
    assert np.array_equal(a, b)
  state, metrics = trainer.step(restored, batch, jax.random.key(1))  # resumes
  assert np.isfinite(float(metrics["loss"]))
