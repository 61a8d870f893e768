"""Partial parameter files: named tensors fitted onto a model's parameter tree.

A file maps "/"-joined parameter names (flax paths, e.g.
`semantic_encoder/layers_0/attention/query/kernel`) to arrays; a name
`x[:k]` holds rows 0..k-1 of parameter x only (e.g. the h rows of the
output projection, whose z rows have no pretrained counterpart). Used to start
training from converted checkpoints (`train(init_params=...)`,
`vmsst.mt5_import`): names or shapes that do not fit are one error listing
them all, and each process reads only the shards its devices hold.

`load_params` also takes a model directory written by `python -m vmsst.train`
(its latest orbax checkpoint): then the stored parameters the model shares by
name are loaded, and stored parameters the model lacks are left out (a VMSST
checkpoint's decoder for a semantic-path objective), counted in the log; a
shared name whose shape differs is still an error. The directory's
config.gin is never parsed, so the caller's gin configuration is untouched.
"""

import math
import os
import re
from typing import Any, Mapping

import jax
import numpy as np
from absl import logging

from vmsst.base import files
from vmsst.base import run_directory
from vmsst.base.gin_utils import gin

Params = dict[str, Any]


def flatten(tree: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
  """{"a": {"b": x}} -> {"a/b": x}."""
  flat = {}
  for key, value in tree.items():
    if isinstance(value, Mapping):
      flat.update(flatten(value, f"{prefix}{key}/"))
    else:
      flat[f"{prefix}{key}"] = value
  return flat


def unflatten(flat: Mapping[str, Any]) -> Params:
  tree: Params = {}
  for name, value in flat.items():
    *parents, leaf = name.split("/")
    node = tree
    for part in parents:
      node = node.setdefault(part, {})
    node[leaf] = value
  return tree


def split_rows(key: str) -> tuple[str, int | None]:
  """"a/kernel[:32]" -> ("a/kernel", 32); "a/kernel" -> ("a/kernel", None)."""
  m = re.fullmatch(r"(.+)\[:(\d+)\]", key)
  return (m.group(1), int(m.group(2))) if m else (key, None)


def scanned_name(name: str) -> tuple[str, int] | None:
  """A per-layer name in the scan_layers layout: (stacked name, layer index), else None.

  "S/layer_3/x" -> ("S/layers/x", 3); "decoder_layer_3/x" -> ("decoder/layers/x", 3)
  (the network's decoder, `vmsst/model/network.py`).
  """
  if m := re.fullmatch(r"decoder_layer_(\d+)/(.+)", name):
    return f"decoder/layers/{m.group(2)}", int(m.group(1))
  if m := re.fullmatch(r"(.+)/layer_(\d+)/(.+)", name):
    return f"{m.group(1)}/layers/{m.group(3)}", int(m.group(2))
  return None


def per_layer_shapes(shapes: Mapping[str, tuple[int, ...]]) -> dict[str, tuple[int, ...]]:
  """A model's shapes with each stacked parameter [L, ...] as its L per-layer names.

  Files always hold the per-layer layout (what `vmsst.mt5_import` writes, what
  a run without scan_layers stores), so one file starts either kind of run.
  """
  out = {}
  for name, shape in shapes.items():
    if m := re.fullmatch(r"(?:decoder/layers|(.+)/layers)/(.+)", name):
      for i in range(shape[0]):
        layer = f"{m.group(1)}/layer_{i}" if m.group(1) else f"decoder_layer_{i}"
        out[f"{layer}/{m.group(2)}"] = tuple(shape[1:])
    else:
      out[name] = tuple(shape)
  return out


def fit_problems(stored: Mapping[str, tuple[int, ...]],
                 model: Mapping[str, tuple[int, ...]]) -> list[str]:
  """Stored names the model lacks or whose shapes differ, one line each."""
  problems = []
  for key, shape in sorted(stored.items()):
    name, rows = split_rows(key)
    if name not in model:
      problems.append(f"unexpected: {key} (the model has no {name})")
      continue
    want = tuple(model[name]) if rows is None else (rows,) + tuple(model[name][1:])
    if tuple(shape) != want or (rows or 0) > model[name][0]:
      problems.append(f"shape of {key}: stored {tuple(shape)}, model {want}")
  return problems


def raise_unfit(source: str, problems: list[str]) -> None:
  if problems:
    raise ValueError(
        f"{source} does not fit this model ({len(problems)} problems):\n  "
        + "\n  ".join(problems) + "\nConvert again with the run's gin files "
        "(python -m vmsst.mt5_import --gin_file=...).")


def merge(params: Params, converted: Mapping[str, np.ndarray]) -> Params:
  """Host-side: `params` with the converted tensors put in (tests, one host)."""
  flat = flatten(params)
  raise_unfit("the converted parameters", fit_problems(
      {k: v.shape for k, v in converted.items()}, {k: v.shape for k, v in flat.items()}))
  for key, value in converted.items():
    name, rows = split_rows(key)
    flat[name] = value if rows is None else np.concatenate([value, np.asarray(flat[name])[rows:]])
  return unflatten(flat)


def save_params(path: str, converted: Mapping[str, np.ndarray]) -> None:
  """Writes the converted tensors as safetensors under their "/"-joined names."""
  from safetensors.numpy import save_file  # pylint: disable=import-outside-toplevel
  with files.local_output(path) as local:  # safetensors writes only to the local disk
    save_file({k: np.ascontiguousarray(v, np.float32) for k, v in converted.items()}, local)


def load_params(path: str, params: Params) -> Params:
  """`params` (initialised, sharded) with every tensor of `path` put in place.

  Each process reads only the shards its devices hold; parameters absent
  from the file keep their values. Under scan_layers the file's per-layer
  tensors (`S/layer_<i>/x`) are stacked into the model's `S/layers/x`.

  Args:
    path: a file written by `save_params` (the converter's --output), or a
      model directory written by `python -m vmsst.train` (`load_model_dir`).
    params: the model's freshly initialised jax.Array tree.
  Raises:
    ValueError listing every unexpected or mis-shaped name.
  """
  if files.isdir(path):
    return load_model_dir(path, params)
  from safetensors import safe_open  # pylint: disable=import-outside-toplevel
  # safetensors reads only the local disk: a bucket file is copied first.
  with files.local_copy(path) as local, safe_open(local, "numpy") as f:
    stored = {key: tuple(f.get_slice(key).get_shape()) for key in f.keys()}
    return _place(path, stored, lambda key, index: f.get_slice(key)[index], params)


def load_arrays(source: str, arrays: Mapping[str, np.ndarray], params: Params) -> Params:
  """`params` with the named host `arrays` (keys as in a parameter file) put in place."""
  return _place(source, {k: np.shape(v) for k, v in arrays.items()},
                lambda key, index: np.asarray(arrays[key])[index], params)


def _place(source: str, stored: Mapping[str, tuple[int, ...]], read, params: Params) -> Params:
  """`params` with every stored tensor put in place, each device reading its shard.

  `read(key, index)` is the slice `index` (a tuple of slices) of stored
  tensor `key`. A stacked (scan_layers) parameter's shard is its layers'
  slices of the per-layer tensors, stacked.
  """
  flat = flatten(params)
  problems = fit_problems(stored, per_layer_shapes({k: v.shape for k, v in flat.items()}))
  stacks = _layer_stacks(stored, flat, problems)
  raise_unfit(source, problems)
  for name, keys in stacks.items():
    target = flat[name]
    flat[name] = jax.make_array_from_callback(
        target.shape, target.sharding,
        lambda index, ks=keys, t=target: np.stack(
            [np.asarray(read(k, index[1:]), t.dtype) for k in ks[index[0]]]))
  stacked = {k for keys in stacks.values() for k in keys}
  for key, shape in stored.items():
    if key in stacked:
      continue
    name, rows = split_rows(key)
    target = flat[name]
    value = jax.make_array_from_callback(
        shape, target.sharding,
        lambda index, k=key, t=target: np.asarray(read(k, index), t.dtype))
    flat[name] = value if rows is None else _set_rows(target, value)
  logging.info("loaded %d tensors (%d of %d parameters) from %s", len(stored),
               sum(math.prod(s) for s in stored.values()), sum(x.size for x in flat.values()),
               source)
  return unflatten(flat)


def _layer_stacks(stored: Mapping[str, tuple[int, ...]], flat: Mapping[str, Any],
                  problems: list[str]) -> dict[str, list[str]]:
  """Each stacked parameter the stored per-layer tensors fill -> their keys by layer.

  A stack is filled whole or not at all (a partial one would mix fresh and
  loaded layers in one array): a partial one is added to `problems`.
  """
  layers: dict[str, dict[int, str]] = {}
  for key in stored:
    found = scanned_name(key)
    if key not in flat and found and found[0] in flat:
      layers.setdefault(found[0], {})[found[1]] = key
  stacks = {}
  for name, keys in sorted(layers.items()):
    depth = flat[name].shape[0]
    if set(keys) == set(range(depth)):
      stacks[name] = [keys[i] for i in range(depth)]
    elif set(keys) < set(range(depth)):
      problems.append(f"{name} stacks {depth} layers (scan_layers) but only layers "
                      f"{sorted(keys)} are stored: give every layer or none")
  return stacks


def _set_rows(target: jax.Array, rows: jax.Array) -> jax.Array:
  return jax.jit(lambda a, b: a.at[:b.shape[0]].set(b), out_shardings=target.sharding,
                 donate_argnums=0)(target, rows)


def checkpoint_item(model_dir: str, step: int | None = None) -> str:
  """The orbax item directory of a model directory's checkpoint (default: the latest)."""
  import orbax.checkpoint as ocp  # pylint: disable=import-outside-toplevel
  checkpoints = run_directory.of(model_dir).checkpoints
  step = ocp.CheckpointManager(checkpoints).latest_step() if step is None else step
  if step is None:
    raise FileNotFoundError(f"{checkpoints} has no checkpoint: init_params must be a "
                            "parameter file or a directory written by python -m vmsst.train.")
  return files.join(checkpoints, str(step), run_directory.STATE)


def load_model_dir(model_dir: str, params: Params, step: int | None = None) -> Params:
  """`params` with every parameter a trained model directory shares with it put in place.

  Shared means the same "/"-joined name; each is restored straight onto the
  sharding of `params` (each process reads its shards). Stored parameters
  the model lacks are left out (logged); the model's parameters the
  checkpoint lacks keep their values.

  Raises:
    ValueError: a shared name with another shape, or no shared name at all.
  """
  import orbax.checkpoint as ocp  # pylint: disable=import-outside-toplevel
  item = checkpoint_item(model_dir, step)
  checkpointer = ocp.PyTreeCheckpointer()
  stored = flatten(checkpointer.metadata(item).item_metadata.tree["params"])
  flat = flatten(params)
  shared = sorted(set(stored) & set(flat))
  problems = [f"shape of {k}: stored {tuple(stored[k].shape)}, model {tuple(flat[k].shape)}"
              for k in shared if tuple(stored[k].shape) != tuple(flat[k].shape)]
  if not shared:
    problems.append(f"no parameter name in common (stored e.g. {sorted(stored)[:3]})")
  if problems:
    raise ValueError(f"{model_dir} does not fit this model ({len(problems)} problems):\n  "
                     + "\n  ".join(problems) + "\nStart from a checkpoint of the same "
                     "network size (gin/models/sizes/).")
  target = {"params": unflatten({k: jax.ShapeDtypeStruct(flat[k].shape, flat[k].dtype,
                                                         sharding=flat[k].sharding)
                                 for k in shared})}
  restored = checkpointer.restore(item, args=ocp.args.PyTreeRestore(
      item=target, restore_args=ocp.checkpoint_utils.construct_restore_args(target),
      partial_restore=True))
  flat.update(flatten(restored["params"]))
  left_out = sorted(set(stored) - set(flat))
  logging.info("loaded %d of %d parameter tensors from %s (%d stored tensors the model lacks "
               "left out%s)", len(shared), len(flat), item, len(left_out),
               f", e.g. {left_out[0]}" if left_out else "")
  return unflatten(flat)


@gin.configurable
def compared_model_dir(*, objective: str = gin.REQUIRED, output: str = gin.REQUIRED) -> str:
  """OUTPUT/seed<s>/<objective> of the running `python -m vmsst.compare` (same seed).

  For an objective that starts from another's checkpoint (query-tower tuning
  from contrastive): its gin/runs/compare/ overlay binds `objective`,
  compare binds `output` (list the source objective first in --objectives).
  Lives here, not in vmsst.compare, because that module also runs as
  `__main__`, where gin would register it a second time.
  """
  return os.path.join(output, objective)
