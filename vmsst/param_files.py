"""Partial parameter files: named tensors fitted onto a model's parameter tree.

A file maps "/"-joined parameter names (flax paths, e.g.
`semantic_encoder/layers_0/attention/query/kernel`) to arrays; a name
`x[:k]` holds rows 0..k-1 of parameter x only (e.g. the h rows of the
output projection, whose z rows have no pretrained counterpart). Used to start
training from converted checkpoints (`train(init_params=...)`,
`vmsst.mt5_import`): names or shapes that do not fit are one error listing
them all, and each process reads only the shards its devices hold.
"""

import math
import re
from typing import Any, Mapping

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
    path: a file written by `save_params` (the converter's --output).
    params: the model's freshly initialised jax.Array tree.
  Raises:
    ValueError listing every unexpected or mis-shaped name.
  """
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


def _set_rows(target: jax.Array, rows: jax.Array) -> jax.Array:
  return jax.jit(lambda a, b: a.at[:b.shape[0]].set(b), out_shardings=target.sharding,
                 donate_argnums=0)(target, rows)
