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

import gin
import jax
import numpy as np
from absl import logging

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
  save_file({k: np.ascontiguousarray(v, np.float32) for k, v in converted.items()}, path)


def load_params(path: str, params: Params) -> Params:
  """`params` (initialised, sharded) with every tensor of `path` put in place.

  Each process reads only the shards its devices hold; parameters absent
  from the file keep their values.

  Args:
    path: a file written by `save_params` (the converter's --output), or a
      model directory written by `python -m vmsst.train` (`load_model_dir`).
    params: the model's freshly initialised jax.Array tree.
  Raises:
    ValueError listing every unexpected or mis-shaped name.
  """
  if os.path.isdir(path):
    return load_model_dir(path, params)
  from safetensors import safe_open  # pylint: disable=import-outside-toplevel
  flat = flatten(params)
  with safe_open(path, "numpy") as f:
    stored = {key: tuple(f.get_slice(key).get_shape()) for key in f.keys()}
    raise_unfit(path, fit_problems(stored, {k: v.shape for k, v in flat.items()}))
    for key, shape in stored.items():
      name, rows = split_rows(key)
      target = flat[name]
      value = jax.make_array_from_callback(
          shape, target.sharding,
          lambda index, k=key, t=target: np.asarray(f.get_slice(k)[index], t.dtype))
      flat[name] = value if rows is None else _set_rows(target, value)
  loaded = sum(math.prod(s) for s in stored.values())
  total = sum(x.size for x in flat.values())
  logging.info("loaded %d tensors (%d of %d parameters) from %s", len(stored), loaded,
               total, path)
  return unflatten(flat)


def load_arrays(source: str, arrays: Mapping[str, np.ndarray], params: Params) -> Params:
  """`params` with the named host `arrays` (keys as in a parameter file) put in place."""
  flat = flatten(params)
  raise_unfit(source, fit_problems({k: np.shape(v) for k, v in arrays.items()},
                                   {k: v.shape for k, v in flat.items()}))
  for key, value in arrays.items():
    name, rows = split_rows(key)
    target = flat[name]
    placed = jax.make_array_from_callback(
        np.shape(value), target.sharding,
        lambda index, v=value, t=target: np.asarray(v[index], t.dtype))
    flat[name] = placed if rows is None else _set_rows(target, placed)
  logging.info("loaded %d tensors (%d of %d parameters) from %s", len(arrays),
               sum(np.size(v) for v in arrays.values()), sum(x.size for x in flat.values()),
               source)
  return unflatten(flat)


def _set_rows(target: jax.Array, rows: jax.Array) -> jax.Array:
  return jax.jit(lambda a, b: a.at[:b.shape[0]].set(b), out_shardings=target.sharding,
                 donate_argnums=0)(target, rows)


def checkpoint_item(model_dir: str, step: int | None = None) -> str:
  """The orbax item directory of a model directory's checkpoint (default: the latest)."""
  import orbax.checkpoint as ocp  # pylint: disable=import-outside-toplevel
  checkpoints = os.path.join(os.path.abspath(model_dir), "checkpoints")
  step = ocp.CheckpointManager(checkpoints).latest_step() if step is None else step
  if step is None:
    raise FileNotFoundError(f"{checkpoints} has no checkpoint: init_params must be a "
                            "parameter file or a directory written by python -m vmsst.train.")
  return os.path.join(checkpoints, str(step), "default")


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
