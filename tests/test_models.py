"""The model contract: an objective without a loss cannot be built; the pair batch is all the base asks."""

import jax.numpy as jnp
import pytest

import vmsst_testing
from vmsst import models
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
