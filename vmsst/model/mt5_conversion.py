"""An mT5 checkpoint's tensors in a VMSST network's layout: the paper's "pretrained" start.

The library of `python -m vmsst.mt5_import`, beside the name map it reads
forwards (`t5_names`): `network_config` (the NetworkConfig that *is* the
checkpoint's stack), `compatibility_problems`, and `convert` (our parameters
with every counterpart copied, and a `Report` of what was mapped, dropped
and left fresh).

Name map, ours <- Hugging Face. Torch Linear weights are [out, in], so
kernels are transposed (attention ones then reshaped to [d, heads, head_dim]
and [heads, head_dim, d]); "E" abbreviates encoder.block.i.layer, "D"
decoder.block.i.layer:

  token_embed/embedding                     <- shared.weight
  S/relative_position_bias/embedding        <- encoder.block.0.layer.0.SelfAttention
                                                 .relative_attention_bias.weight
  S/layer_i/pre_attention_norm/scale        <- E.0.layer_norm.weight
  S/layer_i/attention/{query,key,value,out}/kernel
                                            <- E.0.SelfAttention.{q,k,v,o}.weight
  S/layer_i/pre_mlp_norm/scale              <- E.1.layer_norm.weight
  S/layer_i/mlp/{wi_0,wi_1,wo}/kernel       <- E.1.DenseReluDense.{wi_0,wi_1,wo}.weight
  S/final_norm/scale                        <- encoder.final_layer_norm.weight
      for S = semantic_encoder and, copied, every language_encoder_k; a stack
      shallower than the checkpoint takes its first layers, a deeper one is
      an error.
  decoder_relative_position_bias/embedding  <- decoder.block.0.layer.0.SelfAttention
                                                 .relative_attention_bias.weight
  decoder_layer_i/pre_attention_norm/scale, attention/*/kernel   <- D.0.*
  decoder_layer_i/pre_mlp_norm/scale, mlp/*/kernel               <- D.2.*
  decoder_final_norm/scale                  <- decoder.final_layer_norm.weight
  output_projection/kernel[:d] (rows 0..d-1) <- lm_head.weight transposed (or
      shared.weight when the checkpoint is tied). Our output reads
      concat(h, z): only the h rows have a counterpart; the z rows and any
      bias stay fresh. Nothing is copied under factorized_output (its d × V
      matrix reads the fresh bottleneck, not h) or tie_output_embedding (h
      already meets the copied table).

Dropped: D.1.* (EncDecAttention and its norm: VMSST's decoder has no
cross-attention, the source enters through the latent), blocks deeper than
our stacks, the embed_tokens aliases of shared.weight, and the decoder when
the objective has none. Fresh: decoder_layer_i/latent/* (LatentInjection),
the Gaussian heads, the output z rows and any bias, and language_embed/embedding
(the language table: language ids are not mT5 pieces, so mT5's spiece.model
is the run's vocabulary unchanged and the table starts from the run's seeded
initialisation).
"""

import dataclasses
import math
import re
from typing import Any, Mapping

import flax.linen as nn
import jax
import numpy as np

from vmsst.model import models
from vmsst.model import param_files
from vmsst.model.config import NetworkConfig
from vmsst.model.t5_names import Checkpoint, hf_source, to_ours  # pylint: disable=unused-import

Params = dict[str, Any]

CROSS_ATTENTION = ("cross-attention: VMSST's decoder has none (the source enters through "
                   "the latent)")


def network_config(checkpoint: Checkpoint, **overrides) -> NetworkConfig:
  """The NetworkConfig that is the checkpoint's architecture (T5 switches on).

  `overrides` (e.g. num_language_encoder_layers=12) replace fields after.
  """
  c = checkpoint.config
  return dataclasses.replace(NetworkConfig(
      vocab_size=c["vocab_size"], emb_dim=c["d_model"], num_heads=c["num_heads"],
      head_dim=c["d_kv"], mlp_dim=c["d_ff"], num_encoder_layers=c["num_layers"],
      num_language_encoder_layers=c["num_layers"],
      num_decoder_layers=c.get("num_decoder_layers") or c["num_layers"],
      relative_attention=True,
      relative_attention_num_buckets=c["relative_attention_num_buckets"],
      relative_attention_max_distance=c["relative_attention_max_distance"],
      rms_norm=True, gated_mlp=True, projection_bias=False, scale_attention_logits=False,
      tie_output_embedding=_is_tied(checkpoint)), **overrides)


def _is_tied(checkpoint: Checkpoint) -> bool:
  """A decoder without its own lm_head reads logits off shared.weight.

  config.json cannot tell: transformers 5 writes tie_word_embeddings = true
  for every (m)T5, while google/mt5-* store a separate lm_head.weight.
  """
  return checkpoint.depth("decoder") > 0 and "lm_head.weight" not in checkpoint.names


def compatibility_problems(checkpoint: Checkpoint, cfg: NetworkConfig) -> list[str]:
  """Every way `cfg` cannot hold the checkpoint's function, one line each."""
  c, problems = checkpoint.config, []
  sizes = {"vocab_size": "vocab_size", "emb_dim": "d_model", "num_heads": "num_heads",
           "head_dim": "d_kv", "mlp_dim": "d_ff",
           "relative_attention_num_buckets": "relative_attention_num_buckets",
           "relative_attention_max_distance": "relative_attention_max_distance"}
  for ours, theirs in sizes.items():
    if getattr(cfg, ours) != c.get(theirs):
      problems.append(f"NetworkConfig.{ours} = {getattr(cfg, ours)} but config.json "
                      f"{theirs} = {c.get(theirs)}")
  for switch in ("relative_attention", "rms_norm", "gated_mlp"):
    if not getattr(cfg, switch):
      problems.append(f"NetworkConfig.{switch} must be True for a T5.1.1/mT5 checkpoint")
  if cfg.scale_attention_logits:
    problems.append("NetworkConfig.scale_attention_logits must be False (T5 folds the "
                    "1/sqrt(head_dim) into its query weights)")
  if c.get("feed_forward_proj", "relu") != "gated-gelu":
    problems.append(f"feed_forward_proj {c.get('feed_forward_proj')!r} is not supported: "
                    "only gated-gelu (T5.1.1, mT5)")
  if c.get("layer_norm_epsilon", 1e-6) != 1e-6:
    problems.append(f"layer_norm_epsilon {c['layer_norm_epsilon']} (our RMS norm uses 1e-6)")
  if cfg.tie_output_embedding and "lm_head.weight" in checkpoint.names:
    problems.append("the checkpoint has its own lm_head.weight (untied) but "
                    "NetworkConfig.tie_output_embedding is True")
  return problems


@dataclasses.dataclass
class Report:
  """What the conversion did, by name.

  Attributes:
    mapped: our name -> the Hugging Face tensor it was copied from.
    dropped: Hugging Face name -> why nothing of ours takes it.
    fresh: our names that keep their fresh initialisation.
    sizes: element count of every name above (ours and theirs).
  """

  mapped: dict[str, str] = dataclasses.field(default_factory=dict)
  dropped: dict[str, str] = dataclasses.field(default_factory=dict)
  fresh: list[str] = dataclasses.field(default_factory=list)
  sizes: dict[str, int] = dataclasses.field(default_factory=dict)

  def _count(self, names) -> str:
    return f"{len(names)} tensors, {sum(self.sizes[n] for n in names):,} parameters"

  def summary(self) -> str:
    lines = [f"mapped: {self._count(self.mapped)}"]
    lines += [f"  {ours} <- {theirs}" for ours, theirs in sorted(self.mapped.items())]
    lines.append(f"dropped from the checkpoint: {self._count(self.dropped)}")
    for reason in sorted(set(self.dropped.values())):
      names = sorted(n for n, r in self.dropped.items() if r == reason)
      lines.append(f"  {reason}: {self._count(names)}")
      lines += [f"    {n}" for n in names]
    lines.append(f"freshly initialised: {self._count(self.fresh)}")
    lines += [f"  {n}" for n in sorted(self.fresh)]
    return "\n".join(lines)


def convert(checkpoint: Checkpoint,
            model: models.EmbeddingModel) -> tuple[dict[str, np.ndarray], Report]:
  """The mT5 tensors of every parameter of `model` that has a counterpart.

  Returns:
    ({our "/"-joined name: float32 array in our layout}, the Report). A key
    "name[:k]" holds rows [0, k) of that parameter only (the output
    projection's h rows). Everything else keeps the model's fresh
    initialisation (see `merge` and `load_params`). Raises ValueError
    listing every incompatibility.
  """
  cfg = model.network_config
  _raise_incompatible(checkpoint, compatibility_problems(checkpoint, cfg))
  problems = []
  abstract = jax.eval_shape(
      lambda rng: model.get_initial_variables(rng, models.batch_shapes(2, 8)),
      jax.random.key(0))
  # Per-layer names under scan_layers too: the file fits either layout (load_params stacks).
  shapes = param_files.per_layer_shapes(
      {n: tuple(s.shape) for n, s in param_files.flatten(nn.unbox(abstract["params"])).items()})
  report, converted = Report(), {}
  for name, shape in shapes.items():
    report.sizes[name] = math.prod(shape)
    source = hf_source(name)
    stack = source.split(".")[0] if source else ""
    if source in checkpoint.names:
      try:
        converted[name] = to_ours(name, checkpoint.tensor(source), shape)
        report.mapped[name] = source
      except ValueError as e:
        problems.append(str(e))
    elif source and checkpoint.depth(stack):
      problems.append(f"{name} needs {source}, but the checkpoint's {stack} has only "
                      f"{checkpoint.depth(stack)} layers; make our stack at most that deep")
    else:
      report.fresh.append(name)
  _raise_incompatible(checkpoint, problems)
  _copy_output_rows(checkpoint, cfg, shapes, converted, report)
  used = set(report.mapped.values())
  for name in checkpoint.names:
    report.sizes[name] = math.prod(checkpoint.shape(name))
    if name not in used:
      report.dropped[name] = _drop_reason(name, shapes)
  return converted, report


def _raise_incompatible(checkpoint: Checkpoint, problems: list[str]) -> None:
  if problems:
    raise ValueError(f"{checkpoint.hf_dir} does not fit this NetworkConfig:\n  "
                     + "\n  ".join(problems))


def _copy_output_rows(checkpoint: Checkpoint, cfg: NetworkConfig,
                      shapes: Mapping[str, tuple[int, ...]],
                      converted: dict[str, np.ndarray], report: Report) -> None:
  """lm_head (or a tied checkpoint's shared) → rows [0, d) of our concat(h, z) kernel."""
  name = "output_projection/kernel"
  if name not in shapes or cfg.factorized_output or cfg.tie_output_embedding:
    return
  source = "lm_head.weight" if "lm_head.weight" in checkpoint.names else "shared.weight"
  d, rows = cfg.emb_dim, f"{name}[:{cfg.emb_dim}]"
  converted[rows] = to_ours(name, checkpoint.tensor(source), (d, cfg.vocab_size))
  report.fresh.remove(name)
  report.fresh.append(f"{name}[{d}:]")
  report.mapped[rows] = source
  report.sizes[rows] = d * cfg.vocab_size
  report.sizes[f"{name}[{d}:]"] = report.sizes[name] - d * cfg.vocab_size


def _drop_reason(name: str, ours: Mapping[str, Any]) -> str:
  if name in ("encoder.embed_tokens.weight", "decoder.embed_tokens.weight"):
    return "alias of shared.weight"
  if name.startswith("decoder.") and not any(n.startswith("decoder_") for n in ours):
    return "this objective has no decoder"
  if re.match(r"decoder\.block\.\d+\.layer\.1\.", name):
    return CROSS_ATTENTION
  if m := re.match(r"(encoder|decoder)\.block\.\d+\.", name):
    return f"{m.group(1)} block deeper than all our {m.group(1)} stacks"
  if name == "lm_head.weight":
    return "no h rows to copy into (no decoder, factorized or tied output)"
  return "no counterpart in VMSST"
