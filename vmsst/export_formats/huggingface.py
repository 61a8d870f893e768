r"""Exports a trained model for transformers and sentence-transformers, no custom code.

  python -m vmsst.export --format=sentence-transformers --model_dir=DIR --output=OUT
  python -m vmsst.export --format=huggingface --model_dir=DIR --output=OUT

  from sentence_transformers import SentenceTransformer
  model = SentenceTransformer("OUT")
  vectors = model.encode(["Ein Mann fährt Fahrrad.", "A man rides a bike."])

The semantic encoder becomes a stock transformers architecture whose layers
compute the same function, chosen by the network's switches (`architecture`):

  T5 switches (relative_attention, rms_norm, gated_mlp, no projection
  biases, unscaled logits; gin/models/sizes/mt5_*.gin)
      -> MT5EncoderModel (model_type "mt5"; sentence-transformers loads that
      class, AutoModel an MT5Model whose decoder has no layers: use its
      `.encoder`). The documented choice for models meant to be published:
      mT5's encoder is what that ecosystem knows.
  the original architecture (pre-LayerNorm, learned absolute positions,
  tanh-GELU MLP with biases, attention without biases, scaled logits, a
  final LayerNorm, no embedding LayerNorm or scaling)
      -> XLMRobertaXLModel (model_type "xlm-roberta-xl"): the one stock
      encoder with pre-LN layers, a final LayerNorm and no embedding
      LayerNorm. Its attention and token-type biases are written as zeros;
      its positions start at pad_token_id + 1 = 1, so the position table is
      ours behind one zero row (position 0 is the padding's); hidden_act
      "gelu_pytorch_tanh" is flax's tanh GELU; layer_norm_eps is flax's 1e-6.
  anything else (a T5 switch on alone, biases under T5 switches, heads
      narrower than the width) raises `Unsupported` naming the switch.

The tokenizer is the run's SentencePiece model, read by transformers'
`SpeechT5Tokenizer` (`spm_char.model`, the SentencePiece library itself:
pieces + EOS, ids unchanged, `split_special_tokens` so a literal "</s>" in
text is text, as in training). The tokenizers-library conversions are not
exact for our models: their Unigram import drops byte fallback, their
Precompiled normaliser drops some combining marks (Yoruba) and decomposes
U+1026 (Myanmar), and NFKC reorders Arabic marks that nmt_nfkc keeps.
Truncation keeps max_seq_length - 1 pieces and the EOS, as `model.tokens`.
sentence-transformers reads it through AutoProcessor; AutoTokenizer does too
for an mT5 export, but on an "xlm-roberta-xl" directory it insists on a
tokenizers-library tokenizer.json (not shipped: inexact), so plain
transformers users of that architecture load `AutoProcessor` or
`SpeechT5Tokenizer` (`write_tokenizer`).

sentence-transformers modules: the transformer at the root, mean pooling over
every real token (EOS included, `layers.masked_mean`), then the μ_sem
projection (`semantic_head/mu`) as a Dense with identity activation, and for
a distillation student its teacher head as a second Dense. Both formats write
this one directory, `modules.json` beside `config.json` as hub models
commonly ship, so every loader a user reaches for gives the embedding:
SentenceTransformer(OUT) (mteb loads through it), and AutoModel with the
pooling and the Dense modules as the card's transformers code applies them.
`--format` chooses which loader the model card leads with (its
`library_name`): sentence-transformers, or huggingface for plain
transformers. A model directory's int8 calibration (`quantization.json`,
`python -m vmsst.calibrate`) is copied beside them, and the card shows how
sentence-transformers' `quantize_embeddings` reads it. Weights are
safetensors only.

Objectives with two towers export both: momentum contrast with separate towers
writes tower a at the root and tower b under `tower_b/` (side-a languages,
English in the paper runs, go to the root); query-tower tuning writes the
tuned query tower at the root and the frozen document tower under
`document_tower/`. `vmsst_export.json` says which.
"""

import json
import math
from typing import Any, Mapping

import numpy as np
from flax import traverse_util

from vmsst.base import files
from vmsst.base import run_directory
from vmsst.encoding import restore
from vmsst.model import t5_names
from vmsst.model import xlmr_names
from vmsst.model.config import NetworkConfig

FORMATS = ("sentence-transformers", "huggingface")
METADATA_FILE = "vmsst_export.json"
TOKENIZER_FILE = "spm_char.model"  # SpeechT5Tokenizer's vocab_files_names
TOWER_B_DIR = "tower_b"
DOCUMENT_TOWER_DIR = "document_tower"
PUBLISHABLE = "gin/models/sizes/mt5_base.gin (the T5 switches: an MT5EncoderModel export)"
# The refusal names the format that gives this network's embedding (export.py: model.encode).
SAVEDMODEL_WORKS = "--format=savedmodel exports any network with its embedding."


# The model_type of the config.json a SavedModel export writes so that transformers'
# loaders (SentenceTransformer, AutoModel, mteb's) refuse it naming the format they read:
# transformers puts an unknown model_type in its error.
SAVEDMODEL_MODEL_TYPE = (
    "vmsst-savedmodel: this directory is a TensorFlow SavedModel (tf.saved_model.load); for "
    "SentenceTransformer, AutoModel or mteb export with python -m vmsst.export "
    "--format=sentence-transformers")


class Unsupported(ValueError):
  """The network has no stock transformers architecture computing the same function."""


def architecture(cfg: NetworkConfig) -> str:
  """"mt5" or "xlm-roberta-xl" for `cfg`'s semantic encoder; Unsupported otherwise."""
  t5 = {"relative_attention": True, "rms_norm": True, "gated_mlp": True,
        "scale_attention_logits": False, "projection_bias": False}
  original = {"relative_attention": False, "rms_norm": False, "gated_mlp": False,
              "scale_attention_logits": True}
  if cfg.num_heads * cfg.head_dim != cfg.emb_dim and not _matches(cfg, t5):
    raise Unsupported(f"num_heads * head_dim = {cfg.num_heads * cfg.head_dim} but emb_dim = "
                      f"{cfg.emb_dim}: XLM-RoBERTa-XL's heads split the width exactly; "
                      f"train a T5-switched size to publish ({PUBLISHABLE}). {SAVEDMODEL_WORKS}")
  if _matches(cfg, t5):
    return "mt5"
  if _matches(cfg, original):
    return "xlm-roberta-xl"
  on = [k for k, v in t5.items() if getattr(cfg, k) == v]
  off = [k for k in t5 if k not in on]
  raise Unsupported(
      f"NetworkConfig has the T5 settings of {', '.join(on)} but not of {', '.join(off)} "
      "(T5: relative_attention, rms_norm, gated_mlp on; projection_bias, "
      "scale_attention_logits off): neither MT5EncoderModel nor XLM-RoBERTa-XL computes "
      f"that function. Train with all T5 switches to publish ({PUBLISHABLE}). {SAVEDMODEL_WORKS}")


def _matches(cfg: NetworkConfig, switches: Mapping[str, bool]) -> bool:
  return all(getattr(cfg, k) == v for k, v in switches.items())


# ------------------------------------------------------------- tensors

def unstacked(flat: Mapping[str, np.ndarray], num_layers: int) -> dict[str, np.ndarray]:
  """`semantic_encoder/layers/...` (scan_layers) as `semantic_encoder/layer_<i>/...`."""
  out = {}
  for name, value in flat.items():
    head, sep, tail = name.partition("semantic_encoder/layers/")
    if sep and not head:
      for i in range(num_layers):
        out[f"semantic_encoder/layer_{i}/{tail}"] = value[i]
    else:
      out[name] = value
  return out


def _torch_linear(name: str, kernel: np.ndarray) -> np.ndarray:
  """Our kernel [in dims..., out dims...] as torch's Linear weight [out, in]."""
  inputs = 2 if name.endswith("attention/out/kernel") else 1
  return kernel.reshape(math.prod(kernel.shape[:inputs]), -1).T


def _renamed(flat: Mapping[str, np.ndarray], hf_source, architecture: str
             ) -> dict[str, np.ndarray]:
  """The semantic path's tensors under `architecture`'s names (`hf_source` maps each), kernels
  in torch's Linear layout; a parameter without a counterpart is Unsupported."""
  out = {}
  for name, value in flat.items():
    if not name.startswith(("semantic_encoder/", "token_embed/")):
      continue
    source = hf_source(name)
    if source is None:
      raise Unsupported(f"{name} has no {architecture} counterpart")
    out[source] = _torch_linear(name, value) if name.endswith("/kernel") else value
  return out


def mt5_tensors(cfg: NetworkConfig, flat: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
  """MT5EncoderModel's tensors: mt5_import's name map (`hf_source`), read backwards."""
  out = _renamed(flat, t5_names.hf_source, "MT5EncoderModel")
  out["encoder.embed_tokens.weight"] = out["shared.weight"]
  # AutoModel builds "mt5" as MT5Model: with num_decoder_layers 0 its decoder is the
  # tied embedding and a final norm, written here so nothing loads freshly initialised.
  out["decoder.embed_tokens.weight"] = out["shared.weight"]
  out["decoder.final_layer_norm.weight"] = np.ones(cfg.emb_dim, np.float32)
  return out


# Biases XLM-RoBERTa-XL has and our layers do not: written as zeros.
_XLMR_ZERO_BIASES = ("attention.self.query.bias", "attention.self.key.bias",
                     "attention.self.value.bias", "attention.output.dense.bias",
                     "intermediate.dense.bias", "output.dense.bias")


def xlmr_tensors(cfg: NetworkConfig, flat: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
  """XLMRobertaXLModel's tensors: ours, zero biases, positions behind a padding row."""
  d, out = cfg.emb_dim, {}
  for i in range(cfg.num_encoder_layers):
    for bias in _XLMR_ZERO_BIASES:
      width = cfg.mlp_dim if bias.startswith("intermediate") else d
      out[f"encoder.layer.{i}.{bias}"] = np.zeros(width, np.float32)
  out.update(_renamed(flat, xlmr_names.hf_source, "XLM-RoBERTa-XL"))
  positions = flat["semantic_positions/positions"]
  out["embeddings.position_embeddings.weight"] = np.concatenate(
      [np.zeros((1, d), np.float32), positions])
  out["embeddings.token_type_embeddings.weight"] = np.zeros((1, d), np.float32)
  out["pooler.dense.weight"] = np.zeros((d, d), np.float32)  # unused by embeddings
  out["pooler.dense.bias"] = np.zeros(d, np.float32)
  return out


def hf_config(cfg: NetworkConfig, arch: str, max_seq_length: int) -> dict[str, Any]:
  """config.json of the exported transformer."""
  if arch == "mt5":
    return {"architectures": ["MT5EncoderModel"], "model_type": "mt5",
            "vocab_size": cfg.vocab_size, "d_model": cfg.emb_dim, "d_kv": cfg.head_dim,
            "d_ff": cfg.mlp_dim, "num_layers": cfg.num_encoder_layers,
            "num_decoder_layers": 0, "num_heads": cfg.num_heads,
            "relative_attention_num_buckets": cfg.relative_attention_num_buckets,
            "relative_attention_max_distance": cfg.relative_attention_max_distance,
            "dropout_rate": 0.0, "layer_norm_epsilon": 1e-6,
            "feed_forward_proj": "gated-gelu", "is_encoder_decoder": False, "use_cache": False,
            "tie_word_embeddings": False, "pad_token_id": 0, "eos_token_id": 1,
            "decoder_start_token_id": 0, "torch_dtype": "float32", "dtype": "float32"}
  return {"architectures": ["XLMRobertaXLModel"], "model_type": "xlm-roberta-xl",
          "vocab_size": cfg.vocab_size, "hidden_size": cfg.emb_dim,
          "num_hidden_layers": cfg.num_encoder_layers,
          "num_attention_heads": cfg.num_heads, "intermediate_size": cfg.mlp_dim,
          "hidden_act": "gelu_pytorch_tanh", "hidden_dropout_prob": 0.0,
          "attention_probs_dropout_prob": 0.0, "max_position_embeddings": cfg.max_length + 1,
          "type_vocab_size": 1, "layer_norm_eps": 1e-6, "pad_token_id": 0,
          "bos_token_id": None, "eos_token_id": 1, "position_embedding_type": "absolute",
          "use_cache": False, "tie_word_embeddings": False, "torch_dtype": "float32",
          "dtype": "float32"}


def write_transformer(output: str, cfg: NetworkConfig, flat: Mapping[str, np.ndarray],
                      sp_model: bytes, max_seq_length: int) -> str:
  """config.json, model.safetensors and the tokenizer under `output`; returns the arch."""
  from safetensors.numpy import save_file  # pylint: disable=import-outside-toplevel
  arch = architecture(cfg)
  flat = unstacked(flat, cfg.num_encoder_layers)
  tensors = (mt5_tensors if arch == "mt5" else xlmr_tensors)(cfg, flat)
  files.makedirs(output)
  with files.local_output(files.join(output, "model.safetensors")) as local:  # local disk only
    save_file({k: np.ascontiguousarray(v, np.float32) for k, v in tensors.items()}, local,
              metadata={"format": "pt"})
  _write_json(files.join(output, "config.json"), hf_config(cfg, arch, max_seq_length))
  write_tokenizer(output, sp_model, max_seq_length)
  return arch


def write_tokenizer(output: str, sp_model: bytes, max_seq_length: int) -> None:
  """The SentencePiece model and the config that names its stock reader.

  `processor_class` as well as `tokenizer_class`: AutoTokenizer reads an
  "xlm-roberta-xl" directory with the tokenizers library whatever
  tokenizer_config says, and needs a tokenizer.json we do not ship (inexact,
  see the module docstring); AutoProcessor, which sentence-transformers
  calls, honours processor_class.
  """
  files.write_bytes(files.join(output, TOKENIZER_FILE), sp_model)
  _write_json(files.join(output, "tokenizer_config.json"), {
      "tokenizer_class": "SpeechT5Tokenizer", "processor_class": "SpeechT5Tokenizer",
      "bos_token": None, "eos_token": "</s>", "unk_token": "<unk>", "pad_token": "<pad>",
      "model_max_length": max_seq_length, "split_special_tokens": True, "normalize": False,
      "padding_side": "right", "truncation_side": "right"})


def write_refusal(saved_model_dir: str) -> None:
  """A SavedModel export's config.json, whose model_type makes transformers' loaders
  refuse the directory with a message naming the format they read (not a bare "no
  config.json", nor a model loaded from the wrong files)."""
  _write_json(files.join(saved_model_dir, "config.json"), {"model_type": SAVEDMODEL_MODEL_TYPE})


def _write_json(path: str, value: Any) -> None:
  files.write_text(path, json.dumps(value, indent=2))


# ---------------------------------------------------------------- heads

Projection = tuple[np.ndarray, np.ndarray | None]  # torch weight [out, in], bias


def heads(model, params: Mapping[str, Any], side: str) -> list[Projection]:
  """(torch weight [out, in], bias or None) of each projection after mean pooling.

  μ_sem's `semantic_head/mu`, then a distillation student's teacher head.
  """
  network = model.tower(params, side) if hasattr(model, "tower") else params
  mu = network["semantic_head"]["mu"]
  out = [(np.asarray(mu["kernel"]).T, None if "bias" not in mu else np.asarray(mu["bias"]))]
  head = getattr(model, "head", None)
  if head is not None and "teacher_head" in params:
    out.append((np.asarray(params["teacher_head"]["kernel"]).T, None))
  return out


def write_sentence_transformer(output: str, dimension: int,
                               projections: list[Projection],
                               max_seq_length: int) -> None:
  """The sentence-transformers modules around the transformer written at `output`."""
  # pylint: disable=import-outside-toplevel  # torch only when exporting
  import logging
  import torch
  logging.getLogger("sentence_transformers").setLevel(logging.WARNING)  # "Saving model to"
  from sentence_transformers import SentenceTransformer
  from sentence_transformers.sentence_transformer import modules
  layers = [modules.Transformer(output, max_seq_length=max_seq_length),
            modules.Pooling(dimension, pooling_mode="mean")]
  for weight, bias in projections:
    layers.append(modules.Dense(
        weight.shape[1], weight.shape[0], bias=bias is not None,
        activation_function=torch.nn.Identity(), init_weight=torch.from_numpy(weight.copy()),
        init_bias=None if bias is None else torch.from_numpy(bias.copy())))
  # similarity_fn_name: config_sentence_transformers.json's, what mteb reads (cosine: μ_sem's).
  SentenceTransformer(modules=layers, device="cpu", similarity_fn_name="cosine").save(
      output, safe_serialization=True, create_model_card=False)


def record_nested_dims(output: str, model, metadata: dict[str, Any]) -> None:
  """The nested (Matryoshka) sizes a model trained with, where readers look for them.

  `config_sentence_transformers.json` gets `nested_dims` (the sizes, ascending)
  and `truncate_dim` (the default width, null: all d), and the export's
  metadata `nested_dims`; `SentenceTransformer(path, truncate_dim=k)` with k
  one of them keeps the first k dimensions, as `Encoder.encode(...,
  truncate_dim=k)`. A model trained without nesting writes neither.
  """
  nested = getattr(model, "nested", None)
  if nested is None:
    return
  path = files.join(output, "config_sentence_transformers.json")
  config = json.loads(files.read_text(path))
  config.update(nested_dims=list(nested.sizes), truncate_dim=None)
  _write_json(path, config)
  metadata["nested_dims"] = list(nested.sizes)


# ---------------------------------------------------------------- export

def towers(restored: restore.RestoredModel, model_dir: str
           ) -> list[tuple[str, str, restore.RestoredModel]]:
  """(subdirectory, side, restored) of every tower the export writes."""
  model = restored.model
  out = [("", "a", restored)]
  if "b" in model.sides:
    out.append((TOWER_B_DIR, "b", restored))
  if type(model).__name__ == "QueryTower":
    out.append((DOCUMENT_TOWER_DIR, "a", restore.restore_document_tower(model_dir)))
  return out


def export(model_dir: str, output: str, *, fmt: str = "sentence-transformers",
           step: int | None = None) -> dict[str, Any]:
  """Writes the transformers / sentence-transformers directory; returns its metadata."""
  if fmt not in FORMATS:
    raise ValueError(f"--format={fmt}: choose one of {FORMATS} (or savedmodel).")
  if files.isdir(output) and files.listdir(output):
    raise FileExistsError(f"--output={output} exists and is not empty; pick a new "
                          "directory or delete it first.")
  restored = restore.restore(model_dir, step=step, dtype="float32")
  architecture(restored.model.network_config)  # before anything is written
  metadata = {"format": fmt, "model_dir": files.abspath(model_dir),
              "objective": type(restored.model).__name__, "step": int(restored.step),
              "max_seq_length": restored.sequence_length, "towers": {}}
  # sentence-transformers saves only to the local disk: a bucket output is written here first.
  with files.local_output(output, directory=True) as local:
    _write_export(local, model_dir, restored, fmt, metadata)
  return metadata


def _write_export(output: str, model_dir: str, restored: restore.RestoredModel, fmt: str,
                  metadata: dict[str, Any]) -> None:
  """Every tower, the model card, the metadata and the run's model.json / config.gin."""
  import jax  # pylint: disable=import-outside-toplevel
  cfg, length = restored.model.network_config, restored.sequence_length
  for subdir, side, tower in towers(restored, model_dir):
    params = jax.device_get(tower.params)
    network = tower.model.tower(params, side) if hasattr(tower.model, "tower") else params
    flat = traverse_util.flatten_dict(network, sep="/")
    target = files.join(output, subdir)
    arch = write_transformer(target, cfg, flat, restored.vocabulary.sp_model, length)
    projections = heads(tower.model, params, side)
    write_sentence_transformer(target, cfg.emb_dim, projections, length)
    # Its save re-wrote the transformer through the class it loaded: back to ours
    # (MT5Model's decoder norm, the tokenizer config AutoProcessor reads).
    write_transformer(target, cfg, flat, restored.vocabulary.sp_model, length)
    record_nested_dims(target, restored.model, metadata)
    metadata["architecture"] = arch
    metadata["projections"] = len(projections)
    metadata["dimension"] = int(projections[-1][0].shape[0])
    metadata["towers"][subdir or "."] = _tower_role(restored.model, subdir)
  metadata["calibrated"] = copy_calibration(model_dir, output)
  from vmsst.export_formats import model_card  # pylint: disable=import-outside-toplevel
  metadata["mteb"] = model_card.mteb_fields(model_dir, metadata)  # mteb's ModelMeta fields
  files.write_text(files.join(output, "README.md"), model_card.render(model_dir, metadata))
  _write_json(files.join(output, METADATA_FILE), metadata)
  for name in (run_directory.MODEL_SPEC, run_directory.CONFIG):
    if files.exists(files.join(model_dir, name)):
      files.copy(files.join(model_dir, name), files.join(output, name))


def copy_calibration(model_dir: str, output: str) -> bool:
  """The model directory's int8 calibration beside the export's root tower, if it has one.

  Its ranges are the ones `Encoder.encode(precision="int8")` uses, so
  sentence-transformers' `quantize_embeddings(vectors, "int8", ranges=...)` gives the same
  codes (the card shows it); without them that function would measure each batch anew.
  """
  source = run_directory.of(model_dir).calibration
  if not files.exists(source):
    return False
  files.copy(source, run_directory.of(output).calibration)
  return True


def _tower_role(model, subdir: str) -> str:
  if subdir == TOWER_B_DIR:
    return "tower b: every language not in side_a_languages"
  if subdir == DOCUMENT_TOWER_DIR:
    return "the frozen document tower (embed documents with it, queries with the root)"
  if "b" in model.sides:
    return f"tower a: side_a_languages {sorted(model.side_a_languages)}"
  if type(model).__name__ == "QueryTower":
    return "the tuned query tower"
  return "every language"
