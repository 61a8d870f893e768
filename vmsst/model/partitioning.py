"""Mesh, logical-axis rules and shardings: the one place layout is decided.

Parameters carry logical axis names (vmsst/model/layers.py); this module maps them
onto a ("data", "model") mesh. Objective code never names a PartitionSpec.
"""

from typing import Any, Sequence

import flax.linen as nn
from vmsst.base.gin_utils import gin
import jax
import numpy as np
import optax
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

# Logical axis -> mesh axis. Weights are split over "model" along their wide
# dimension (vocabulary, MLP hidden, heads); activations over "data" along
# the batch. Everything else is replicated.
LOGICAL_AXIS_RULES: tuple[tuple[str, str | None], ...] = (
    ("batch", "data"),
    ("queue", "data"),
    ("vocab", "model"),
    ("mlp", "model"),
    ("heads", "model"),
    ("kv", None),
    ("embed", None),
    ("latent", None),
    ("length", None),
    ("languages", None),  # the language table (a few hundred rows): replicated
    ("relpos_buckets", None),  # T5 relative-position tables: tiny, replicated
    ("layers", None),  # NetworkConfig.scan_layers: the stacked layer axis, replicated
)

MESH_AXES = ("data", "model")


@gin.configurable
def make_mesh(data_parallelism: int = -1, model_parallelism: int = 1,
              devices: Sequence[jax.Device] | None = None, *,
              devices_per_process: int = -1) -> Mesh:
  """A ("data", "model") mesh over all (or the given) devices.

  Args:
    data_parallelism: size of the data axis; -1 takes what model leaves.
    model_parallelism: size of the model axis.
    devices: defaults to every process's devices, ordered by process: the
      data axis then runs over process 0's devices, then process 1's, ..., so
      host h's local batch rows are the h-th block of the global batch (see
      vmsst_tasks.pipeline.input_pipeline.train_iterator).
    devices_per_process: only the first N devices of each process (-1: all). Why: a
      small run on a host that simulates many CPU devices (XLA_FLAGS'
      --xla_force_host_platform_device_count, as the tests set) compiles and steps
      faster unsharded than over devices that share its cores.
  Uses jax.sharding.Mesh directly, whose axes are Auto (jax.make_mesh would
  default to Explicit axes, which the logical-constraint flow does not use).
  """
  if devices is None:
    devices = sorted(jax.devices(), key=lambda d: (d.process_index, d.id))
  devices = list(devices)
  if devices_per_process != -1:
    devices = _first_of_each_process(devices, devices_per_process)
  if data_parallelism == -1:
    if len(devices) % model_parallelism:
      raise ValueError(f"{len(devices)} devices cannot be split into model_parallelism="
                       f"{model_parallelism}; pick a divisor of the device count.")
    data_parallelism = len(devices) // model_parallelism
  if data_parallelism * model_parallelism != len(devices):
    raise ValueError(
        f"mesh {data_parallelism} x {model_parallelism} needs "
        f"{data_parallelism * model_parallelism} devices, found {len(devices)}; "
        "set make_mesh.data_parallelism / model_parallelism in gin.")
  grid = np.asarray(devices).reshape(data_parallelism, model_parallelism)
  for row in grid:  # a data row spread over hosts would need the same rows on each
    if len({d.process_index for d in row}) > 1:
      raise ValueError(
          f"model_parallelism={model_parallelism} spreads one data row over several "
          f"processes ({jax.local_device_count()} devices each); pick a model axis that "
          "divides the devices of one process.")
  return Mesh(grid, MESH_AXES)


def _first_of_each_process(devices: list[jax.Device], count: int) -> list[jax.Device]:
  """The first `count` of each process's devices, in the order given."""
  kept, seen = [], {}
  for device in devices:
    seen[device.process_index] = seen.get(device.process_index, 0) + 1
    if seen[device.process_index] <= count:
      kept.append(device)
  if count < 1 or any(n < count for n in seen.values()):
    raise ValueError(f"make_mesh.devices_per_process={count}: the processes have "
                     f"{sorted(set(seen.values()))} devices each; give from 1 to the fewest, "
                     "or -1 for all.")
  return kept


def logical_shardings(boxed_tree: Any, mesh: Mesh,
                      rules=LOGICAL_AXIS_RULES) -> Any:
  """NamedShardings for a tree whose leaves may be nn.LogicallyPartitioned."""
  specs = nn.get_partition_spec(boxed_tree)
  return nn.logical_to_mesh_sharding(specs, mesh, rules)


def replicated(mesh: Mesh) -> NamedSharding:
  return NamedSharding(mesh, P())


def batch_sharding(mesh: Mesh) -> NamedSharding:
  """Leading (batch) dimension split over the data axis."""
  return NamedSharding(mesh, P("data"))


def like_params_shardings(abstract_tree: Any, abstract_params: Any,
                          param_shardings: Any, mesh: Mesh) -> Any:
  """Shardings for optimizer state: param-shaped subtrees follow the params.

  Optax states hold subtrees with the parameters' structure (moments, or
  Adafactor's factored statistics). A leaf of such a subtree with the shape
  of its parameter takes the parameter's sharding; every other leaf (factored
  rows/columns, counters) is small and replicated.
  """
  params_def = jax.tree.structure(abstract_params)
  shardings = jax.tree.unflatten(params_def, jax.tree.leaves(
      param_shardings, is_leaf=lambda x: isinstance(x, NamedSharding)))

  def param_shaped(node) -> bool:
    return jax.tree.structure(node, is_leaf=_is_masked) == params_def

  def assign(node):
    if not param_shaped(node):  # a lone leaf of the state
      return replicated(mesh)
    return jax.tree.map(
        lambda leaf, param, sharding: leaf if _is_masked(leaf)
        else sharding if leaf.shape == param.shape else replicated(mesh),
        node, abstract_params, shardings, is_leaf=_is_masked)

  return jax.tree.map(assign, abstract_tree, is_leaf=param_shaped)


def _is_masked(node) -> bool:
  """optax's placeholder for a parameter a masked transformation leaves alone (frozen)."""
  return isinstance(node, optax.MaskedNode)
