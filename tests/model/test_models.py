"""The model contract: an objective without a loss cannot be built; the pair batch is all the base asks."""

import dataclasses

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import vmsst_testing
from vmsst.model import models
from vmsst.objectives import MODELS


def test_an_objective_without_loss_fn_is_a_type_error():
  class NoLoss(models.EmbeddingModel):
    pass

  with pytest.raises(TypeError, match="abstract method.*loss_fn"):
    NoLoss(vmsst_testing.TINY)


def test_extra_features_are_declared_by_the_objective_that_needs_them():
  assert set(models.batch_shapes(4, 8)) == set(models.PAIR_DTYPES)
  distillation = MODELS["distillation"](vmsst_testing.TINY, teacher_dim=5)
  assert distillation.input_shapes(4, 8)["teacher"] == (4, 5)
  assert distillation.feature_dtypes()["teacher"] == jnp.float32
  assert MODELS["vmsst"](vmsst_testing.TINY).input_shapes(4, 8) == models.batch_shapes(4, 8)


class _Scale(nn.Module):
  """A stand-in extra parameter tree: x · w, w [d, 3]."""

  @nn.compact
  def __call__(self, x):
    return x @ self.param("w", nn.initializers.normal(1.0), (x.shape[-1], 3))


class _WithExtras(models.EmbeddingModel):
  names = ("first_extra", "second_extra")

  def extra_modules(self):
    x = jnp.zeros((1, self.network_config.emb_dim))
    return {name: (_Scale(), (x,)) for name in self.names}

  def loss_fn(self, params, batch, dropout_rng, step=0):
    raise NotImplementedError


def _plain(model, seed=0):
  return nn.unbox(model.get_initial_variables(jax.random.key(seed),
                                              models.batch_shapes(2, 8))["params"])


@pytest.mark.slow  # over ~7 s (docs/results/tests/)
def test_extra_modules_are_initialised_beside_the_network_with_keys_of_their_own():
  params = _plain(_WithExtras(vmsst_testing.TINY))
  network = _plain(MODELS["vmsst"](vmsst_testing.TINY))  # the same init_paths
  assert set(params) == set(network) | {"first_extra", "second_extra"}
  assert params["first_extra"]["w"].shape == (vmsst_testing.TINY.emb_dim, 3)
  # Each extra draws from its own key, and the network from a key apart from both.
  assert not np.allclose(params["first_extra"]["w"], params["second_extra"]["w"])
  applied = _Scale().apply({"params": params["second_extra"]}, np.ones((1, 32), np.float32))
  assert applied.shape == (1, 3)


@pytest.mark.slow  # over ~7 s (docs/results/tests/)
def test_an_extra_module_may_not_shadow_a_network_parameter():
  class Shadowing(_WithExtras):
    names = ("token_embed",)

  with pytest.raises(ValueError, match="'token_embed'.*name it apart"):
    _plain(Shadowing(vmsst_testing.TINY))


def test_objectives_with_extra_parameters_declare_them_as_modules():
  """No objective merges parameter dicts itself: its extras come from extra_modules."""
  distillation = MODELS["distillation"](vmsst_testing.TINY, teacher_dim=5)
  entities = MODELS["entity_contrastive"](
      dataclasses.replace(vmsst_testing.TINY, dropout_rate=0.1), num_entities=7,
      num_hard_negatives=1)
  for model, name in ((distillation, "teacher_head"), (entities, "entities")):
    assert type(model).get_initial_variables is models.EmbeddingModel.get_initial_variables
    assert set(model.extra_modules()) == {name}
    assert name in _plain(model)


def test_pair_keys_split_one_key_and_keep_keys_already_per_pair():
  typed = jax.random.key(3)
  keys = models.pair_keys(typed, 4)
  assert keys.shape == (4,)
  np.testing.assert_array_equal(jax.random.key_data(keys),
                                jax.random.key_data(jax.random.split(typed, 4)))
  assert models.pair_keys(keys, 4) is keys  # a microbatch's keys, split by the trainer
  raw = jax.random.PRNGKey(3)
  assert models.pair_keys(raw, 2).shape == (2, 2)  # a raw key [2] is one key, not two
  assert models.pair_keys(models.pair_keys(raw, 2), 2).shape == (2, 2)
  assert models.pair_keys(None, 4) is None
  with pytest.raises(ValueError, match="3 pair keys for a batch of 4"):
    models.pair_keys(keys[:3], 4)


def test_side_keys_are_the_pair_keys_folded_with_the_side():
  keys = models.pair_keys(jax.random.key(0), 3)
  rows = jax.random.key_data(models.side_keys(keys))
  assert rows.shape[0] == 6
  for i in range(3):
    for side in (0, 1):
      np.testing.assert_array_equal(
          rows[side * 3 + i], jax.random.key_data(jax.random.fold_in(keys[i], side)))


def test_the_mean_over_pairs_objectives_are_those_without_in_batch_negatives():
  mean = {name for name, cls in MODELS.items() if cls.loss_is_mean_over_pairs}
  assert mean == {"vmsst", "bitranslation", "distillation"}
