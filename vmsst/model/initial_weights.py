"""A run's initial weights (`train(init_params=PATH)`), from whatever PATH holds.

Three kinds of source, one entry point (`load`), all below the trainer:
- a parameter file written by `python -m vmsst.mt5_import` (an mT5 checkpoint
  converted) or any file `param_files` reads;
- a model directory written by `python -m vmsst.train` (its latest checkpoint;
  parameters the model lacks are left out, `param_files.load_model_dir`);
- a transformers or sentence-transformers export of `python -m vmsst.export`
  (MT5EncoderModel or XLMRobertaXLModel): its tensors go back through the name
  maps the export wrote them with (`t5_names`, `xlmr_names`), its Dense modules
  back to the projections. A SavedModel export also writes a config.json (so
  that transformers' loaders refuse it by name); its saved_model.pb tells it apart,
  and its parameters are read as `param_files` reads them.
A name or shape that does not fit the model is one error listing every misfit.
"""

import json
from typing import Any, Mapping

import numpy as np

from vmsst.base import files
from vmsst.model import param_files
from vmsst.model import t5_names
from vmsst.model import xlmr_names

TRANSFORMERS_TYPES = ("mt5", "xlm-roberta-xl")  # the model_types the export writes


def load(path: str, params: Any) -> Any:
  """`params` with the tensors `path` holds in place (sharded as `params` are)."""
  if not is_transformers_export(path):
    return param_files.load_params(path, params)
  flat = param_files.flatten(params)
  with files.local_copy(path) as local:  # safetensors reads only the local disk
    arrays = transformers_tensors(local, param_files.per_layer_shapes(  # stacked again if scanned
        {k: tuple(v.shape) for k, v in flat.items()}))
  return param_files.load_arrays(path, arrays, params)


def is_transformers_export(path: str) -> bool:
  """A directory with a transformers config.json that is not a SavedModel export's."""
  return (files.isdir(path) and files.isfile(files.join(path, "config.json"))
          and not files.exists(files.join(path, "saved_model.pb")))


def transformers_tensors(export_dir: str, shapes: Mapping[str, tuple[int, ...]]
                         ) -> dict[str, np.ndarray]:
  """Our parameters (by "/"-joined name, of `shapes`) that an export holds.

  The encoder's tensors go back through the same name maps (mT5's copied to
  every encoder stack, as `mt5_import` does; XLM-RoBERTa-XL's to the
  semantic encoder), the sentence-transformers Dense modules back to
  `semantic_head/mu` and a distillation student's `teacher_head`. Names the
  model lacks are skipped; the fit of the rest is checked by the caller.
  """
  model_type = json.loads(files.read_text(files.join(export_dir, "config.json"))).get("model_type")
  if model_type not in TRANSFORMERS_TYPES:
    raise ValueError(f"{export_dir}/config.json has model_type {model_type!r}; init_params "
                     "reads exports of python -m vmsst.export --format=sentence-transformers "
                     "(mt5 or xlm-roberta-xl).")
  checkpoint = t5_names.Checkpoint(export_dir)
  source_of = t5_names.hf_source if model_type == "mt5" else xlmr_names.hf_source
  out = {}
  for name, shape in shapes.items():
    source = source_of(name)
    if source is None or source.startswith("decoder") or source not in checkpoint.names:
      continue
    out[name] = t5_names.to_ours(name, checkpoint.tensor(source), shape)
  if model_type == "xlm-roberta-xl" and "semantic_positions/positions" in shapes:
    rows = shapes["semantic_positions/positions"][0]
    table = checkpoint.tensor("embeddings.position_embeddings.weight")[1:]
    out[f"semantic_positions/positions[:{min(rows, len(table))}]"] = table[:rows]
  targets = ("semantic_head/mu", "teacher_head")
  for target, (weight, bias) in zip(targets, _dense_modules(export_dir)):
    if f"{target}/kernel" in shapes:
      out[f"{target}/kernel"] = weight.T
      if bias is not None and f"{target}/bias" in shapes:
        out[f"{target}/bias"] = bias
  return out


def _dense_modules(export_dir: str) -> list[tuple[np.ndarray, np.ndarray | None]]:
  """(weight [out, in], bias) of each sentence-transformers Dense module, in order."""
  from safetensors.numpy import load as load_safetensors  # pylint: disable=import-outside-toplevel
  path = files.join(export_dir, "modules.json")
  if not files.exists(path):
    return []
  dense = [m["path"] for m in json.loads(files.read_text(path)) if m["type"].endswith(".Dense")]
  out = []
  for folder in dense:
    tensors = load_safetensors(files.read_bytes(files.join(export_dir, folder, "model.safetensors")))
    out.append((tensors["linear.weight"], tensors.get("linear.bias")))
  return out
