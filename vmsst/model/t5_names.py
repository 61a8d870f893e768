"""The Hugging Face T5/mT5 tensor names of our parameters, and a reader of their files.

One home for the name map (documented in mt5_conversion.py's docstring),
read forwards by `mt5_import` (mT5 -> a run's initial parameters) and
backwards by `hf_export` (a T5-switched model -> MT5EncoderModel). Imports
nothing of the trainer, so both directions stay below `train`.
"""

import json
import math
import os
import re

import numpy as np

from vmsst.base import files

_LAYER_LEAVES = {  # our name inside a layer -> (HF sublayer: attention or mlp, HF suffix)
    "pre_attention_norm/scale": ("attention", "layer_norm.weight"),
    "attention/query/kernel": ("attention", "SelfAttention.q.weight"),
    "attention/key/kernel": ("attention", "SelfAttention.k.weight"),
    "attention/value/kernel": ("attention", "SelfAttention.v.weight"),
    "attention/out/kernel": ("attention", "SelfAttention.o.weight"),
    "pre_mlp_norm/scale": ("mlp", "layer_norm.weight"),
    "mlp/wi_0/kernel": ("mlp", "DenseReluDense.wi_0.weight"),
    "mlp/wi_1/kernel": ("mlp", "DenseReluDense.wi_1.weight"),
    "mlp/wo/kernel": ("mlp", "DenseReluDense.wo.weight"),
}
_MLP_SUBLAYER = {"encoder": 1, "decoder": 2}  # decoder sublayer 1 is cross-attention
_RELATIVE_BIAS = "{}.block.0.layer.0.SelfAttention.relative_attention_bias.weight"


class Checkpoint:
  """A Hugging Face model directory: config.json plus safetensors file(s).

  The directory is local (safetensors maps files from the local disk): a bucket
  one goes through `files.local_copy` first.
  """

  def __init__(self, hf_dir: str):
    self.hf_dir = hf_dir
    self.config = json.loads(files.read_text(files.join(hf_dir, "config.json")))
    self.config.setdefault("relative_attention_max_distance", 128)  # older configs omit it
    index = files.join(hf_dir, "model.safetensors.index.json")
    if files.exists(index):
      self._files = {name: files.join(hf_dir, file)
                     for name, file in json.loads(files.read_text(index))["weight_map"].items()}
    elif files.exists(files.join(hf_dir, "model.safetensors")):
      from safetensors import safe_open  # pylint: disable=import-outside-toplevel
      path = os.path.join(hf_dir, "model.safetensors")
      with safe_open(path, "numpy") as f:
        self._files = {name: path for name in f.keys()}
    else:
      raise FileNotFoundError(
          f"{hf_dir} has no model.safetensors(.index.json); save the model with "
          "save_pretrained(..., safe_serialization=True) or convert its .bin first.")

  @property
  def names(self) -> list[str]:
    return sorted(self._files)

  def shape(self, name: str) -> tuple[int, ...]:
    from safetensors import safe_open  # pylint: disable=import-outside-toplevel
    with safe_open(self._files[name], "numpy") as f:
      return tuple(f.get_slice(name).get_shape())

  def tensor(self, name: str) -> np.ndarray:
    """float32 copy of a tensor (bfloat16 ones are read through jax)."""
    from safetensors import safe_open  # pylint: disable=import-outside-toplevel
    with safe_open(self._files[name], "numpy") as f:
      if f.get_slice(name).get_dtype() != "BF16":
        return f.get_tensor(name).astype(np.float32)
    with safe_open(self._files[name], "flax") as f:
      return np.asarray(f.get_tensor(name), np.float32)

  def depth(self, stack: str) -> int:
    """Number of blocks of "encoder" or "decoder" (0 when absent)."""
    pattern = re.compile(rf"{stack}\.block\.(\d+)\.")
    blocks = {int(m.group(1)) for n in self._files if (m := pattern.match(n))}
    return max(blocks) + 1 if blocks else 0


def hf_source(name: str) -> str | None:
  """The Hugging Face tensor our parameter `name` takes, or None (fresh init)."""
  if name == "token_embed/embedding":
    return "shared.weight"
  if name == "decoder_relative_position_bias/embedding":
    return _RELATIVE_BIAS.format("decoder")
  if name == "decoder_final_norm/scale":
    return "decoder.final_layer_norm.weight"
  if m := re.fullmatch(r"(?:semantic_encoder|language_encoder_\d+)/(.+)", name):
    inner = m.group(1)
    if inner == "relative_position_bias/embedding":
      return _RELATIVE_BIAS.format("encoder")
    if inner == "final_norm/scale":
      return "encoder.final_layer_norm.weight"
    return _layer_source("encoder", inner)
  if m := re.fullmatch(r"decoder_(layer_\d+/.+)", name):
    return _layer_source("decoder", m.group(1))
  return None


def _layer_source(stack: str, inner: str) -> str | None:
  m = re.fullmatch(r"layer_(\d+)/(.+)", inner)
  if not m or m.group(2) not in _LAYER_LEAVES:
    return None
  sublayer, suffix = _LAYER_LEAVES[m.group(2)]
  index = 0 if sublayer == "attention" else _MLP_SUBLAYER[stack]
  return f"{stack}.block.{m.group(1)}.layer.{index}.{suffix}"


def to_ours(name: str, weight: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
  """A Hugging Face tensor in the layout of our parameter `name` of `shape`.

  Kernels: torch [out, in] -> ours [in dims..., out dims...]; the attention
  output kernel has two input dims (heads, head_dim), every other one.
  """
  if name.endswith("/kernel"):
    inputs = 2 if name.endswith("attention/out/kernel") else 1
    flat = (math.prod(shape[:inputs]), math.prod(shape[inputs:]))
    if weight.T.shape != flat:
      raise ValueError(f"{name}: Hugging Face shape {weight.shape} does not transpose to "
                       f"{shape}")
    return weight.T.reshape(shape)
  if weight.shape != shape:
    raise ValueError(f"{name}: Hugging Face shape {weight.shape}, ours {shape}")
  return weight
