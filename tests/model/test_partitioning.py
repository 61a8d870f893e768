"""Mesh construction and the logical-axis rules."""

import types

import flax.linen as nn
import jax
import jax.numpy as jnp
import pytest
from jax.sharding import PartitionSpec as P

from vmsst.model import partitioning


def test_mesh_fills_the_data_axis_and_rejects_impossible_shapes():
  devices = jax.devices()
  mesh = partitioning.make_mesh(model_parallelism=1, devices=devices)
  assert dict(mesh.shape) == {"data": len(devices), "model": 1}
  with pytest.raises(ValueError, match="model_parallelism"):
    partitioning.make_mesh(model_parallelism=len(devices) + 1, devices=devices)
  with pytest.raises(ValueError, match="needs"):
    partitioning.make_mesh(data_parallelism=len(devices) + 1, devices=devices)


def test_devices_per_process_keeps_the_first_of_each_process_in_order():
  mesh = partitioning.make_mesh(devices_per_process=2)
  assert list(mesh.devices.flat) == jax.devices()[:2]
  two_hosts = [types.SimpleNamespace(process_index=p, id=i) for p in (0, 1) for i in range(3)]
  kept = partitioning._first_of_each_process(two_hosts, 2)  # pylint: disable=protected-access
  assert [(d.process_index, d.id) for d in kept] == [(0, 0), (0, 1), (1, 0), (1, 1)]
  for count in (0, len(jax.devices()) + 1):
    with pytest.raises(ValueError, match="devices_per_process"):
      partitioning.make_mesh(devices_per_process=count)


def test_rules_split_wide_weight_axes_over_model_and_batch_over_data():
  boxed = {"embedding": nn.LogicallyPartitioned(jnp.zeros((8, 4)), ("vocab", "embed")),
           "wi": nn.LogicallyPartitioned(jnp.zeros((4, 16)), ("embed", "mlp")),
           "norm": nn.LogicallyPartitioned(jnp.zeros((4,)), ("embed",))}
  mesh = partitioning.make_mesh(devices=jax.devices()[:1])
  shardings = partitioning.logical_shardings(boxed, mesh)
  assert shardings["embedding"].spec == P("model", None)
  assert shardings["wi"].spec == P(None, "model")
  assert shardings["norm"].spec == P(None)
  assert partitioning.batch_sharding(mesh).spec == P("data")


def test_optimizer_state_of_partly_frozen_params_follows_the_trained_params():
  """optax masking leaves MaskedNode where a parameter is frozen; the rest still shards."""
  import optax  # pylint: disable=import-outside-toplevel
  boxed = {"embedding": nn.LogicallyPartitioned(jnp.zeros((8, 4)), ("vocab", "embed")),
           "wi": nn.LogicallyPartitioned(jnp.zeros((4, 16)), ("embed", "mlp"))}
  params = nn.unbox(boxed)
  optimizer = optax.multi_transform({"train": optax.adam(1e-3), "freeze": optax.set_to_zero()},
                                    {"embedding": "freeze", "wi": "train"})
  state = jax.eval_shape(optimizer.init, params)
  mesh = partitioning.make_mesh(devices=jax.devices()[:1])
  shardings = partitioning.like_params_shardings(
      state, params, partitioning.logical_shardings(boxed, mesh), mesh)
  adam_state = shardings.inner_states["train"].inner_state[0]
  assert adam_state.mu["wi"].spec == P(None, "model")
  assert adam_state.nu["wi"].spec == P(None, "model")
  assert isinstance(adam_state.mu["embedding"], optax.MaskedNode)
  assert adam_state.count.spec == P()
  assert jax.tree.structure(shardings) == jax.tree.structure(state)
