"""A trained model as a TensorFlow SavedModel: strings in, embeddings out.

What `python -m vmsst.export` writes by default (the other formats:
`vmsst.export_formats.huggingface`). Serving shapes follow the encoders' one
padding rule (`vmsst.encoding.checkpoint.row_buckets`, `padded_lengths`).

The SavedModel contract (what `encoding.saved_model.SavedModelEncoder` reads):

  serving_default(text: tf.string [batch]) -> {"embeddings": float32 [batch, d]}
  score(text_a: tf.string [batch], text_b: tf.string [batch])
      -> {"scores": float32 [batch]}   cosine of text_a[i] with text_b[i]
  serving_<precision>(text: tf.string [batch]) -> {"embeddings": codes}
      binary, ubinary: int8 / uint8 [batch, ceil(d / 8)] packed sign bits;
      int8, uint8: [batch, d], when the model has a calibration (its
      quantization.json, `python -m vmsst.calibrate`, or --calibration=FILE):
      sentence-transformers' layouts (vmsst/encoding/quantize.py), tower a;
      the calibration is copied to assets.extra/quantization.json

A model with a tower per pair side (`model.sides == ("a", "b")`:
MomentumContrast with separate towers, the dual momentum contrast paper's
language-specific encoders) gets a third signature, and `score` embeds each
column with its side's tower:

  serving_default  tower a: side a's languages (English in the paper runs)
  serving_b(text: tf.string [batch]) -> {"embeddings": float32 [batch, d]}
                   tower b: every other language (model.side_of_language)
  score            text_a by tower a, text_b by tower b

The tower is chosen by the sentence's language, as the model trained (one
tower per language side, the paper's setup): a caller sends side a's
languages, listed in the metadata's `side_a_languages`, to serving_default
and every other language to serving_b (`languages.pair_side` is the rule).
`encoding.saved_model.SavedModelEncoder` does so for `python -m
vmsst.evaluate`, `embed --language` and `mine --src_language/--trg_language`.

`embeddings` is μ_sem, L2-normalised only when exported with --normalize (the
choice is in the metadata file; cosine scores are the same either way). The
SentencePiece tokenizer is inside the graph (`tensorflow_text`), with the
training truncation: at most sequence_length - 1 pieces, then EOS, zero
padding, no language symbol (`model.tokens.tokenize_batch`). The batch size is
polymorphic; the length axis is too, up to the trained sequence length, so a
batch of short sentences is not padded to the full length. Inside the graph
a batch is padded to one of a few bucketed shapes (`bucketed`), so XLA
compiles the network a bounded number of times, not once per new shape.

Consumers must `import tensorflow_text` before `tf.saved_model.load`: that
import registers the SentencePiece ops the graph uses. Nothing else (no JAX,
no vmsst) is needed to load or run the model.

The network is lowered by jax2tf with native serialization (StableHLO inside
an `XlaCallModule` op) for --platforms, once per tower: one graph function
that every signature calls. Parameters are `tf.Variable`s, not
graph constants: both signatures share one copy stored under `variables/`,
where constants would be copied into each signature's graph and meet the 2 GB
GraphDef limit at the paper's sizes. Only the parameters μ_sem reads are
exported there (no decoder, no language encoder). A --dtype=bfloat16 export
stores the weight matrices in bfloat16 (cast once, `checkpoint.serving_params`;
vectors stay float32); params.npz keeps every parameter as trained.

Files written under --output:
  saved_model.pb, variables/, fingerprint.pb   the SavedModel
  assets.extra/vmsst_export.json  step, d, sequence_length, vocabulary size,
                                  normalized, platforms, tensorflow_text note;
                                  two towers: sides, side_a_languages
  assets.extra/spm.model, config.gin  the vocabulary and operative config
  params.npz          every parameter (all paths, not only μ_sem's), named by
                      its flax path joined with "/"
  params_index.json   name -> shape, dtype, logical axes, in_saved_model
  config.json         no model: its model_type makes SentenceTransformer(OUT),
                      AutoModel and mteb refuse the directory naming
                      --format=sentence-transformers (huggingface.write_refusal)
"""

import json
from typing import Any, Sequence

import flax.linen as nn
from flax import traverse_util
import jax
import numpy as np
import tensorflow as tf
import tensorflow_text as tf_text
from jax.experimental import jax2tf

from vmsst.base import files
from vmsst.base import run_directory
from vmsst.encoding import checkpoint
from vmsst.encoding import quantize
from vmsst.encoding import restore
from vmsst.export_formats import huggingface
from vmsst.model import losses
from vmsst.model import models

EXTRA_DIR = "assets.extra"  # SavedModel's place for files TensorFlow ignores.
METADATA_FILE = "vmsst_export.json"
PARAMS_FILE = "params.npz"
PARAMS_INDEX_FILE = "params_index.json"
SEPARATOR = "/"
FORMAT_VERSION = 1
SIDE_B_SIGNATURE = "serving_b"  # a two-tower model's tower b (saved_model.EXPORT_SIDE_B)


def export(model_dir: str, output_dir: str, *, step: int | None = None,
           normalize: bool = False, platforms: Sequence[str] = ("cpu",),
           dtype: str | None = None, calibration: str | None = None) -> dict[str, Any]:
  """Writes the SavedModel, its metadata and the raw parameters.

  Args:
    model_dir: a directory written by `python -m vmsst.train`.
    output_dir: a new (or empty) directory.
    step: checkpoint step (default: the latest).
    normalize: L2-normalise `embeddings` inside the graph.
    platforms: jax2tf native-serialization targets ("cpu", "cuda", "tpu").
    dtype: the graph's activation/matmul precision, "bfloat16" or "float32"
      (default: the one the run trained with); parameters and embeddings
      stay float32 either way (see `restore.restore`).
    calibration: a text file, one sentence a line, whose embeddings' ranges
      calibrate the int8/uint8 signatures (default: model_dir's saved one).
  Returns:
    The metadata written to assets.extra/vmsst_export.json.
  """
  if files.isdir(output_dir) and files.listdir(output_dir):
    raise FileExistsError(f"--output={output_dir} exists and is not empty; pick a new "
                          "directory or delete it first.")
  restored = restore.restore(model_dir, step=step, dtype=dtype)
  params = traverse_util.flatten_dict(jax.device_get(restored.params), sep=SEPARATOR)
  exported = semantic_params(restored.model, params, restored.sequence_length)
  graph_params = checkpoint.serving_params({k: params[k] for k in exported},
                                           restored.model.network_config.dtype)
  module = ServingModule(restored, graph_params, normalize=normalize, platforms=platforms)
  signatures = {"serving_default": module.serve, "score": module.score}
  if "b" in restored.model.sides:
    signatures[SIDE_B_SIGNATURE] = module.serve_b
  calibrated = _calibration(restored, model_dir, calibration)
  signatures.update(quantized_signatures(module, calibrated, normalize))
  tf.saved_model.save(module, output_dir, signatures=signatures)
  write_params(restored.model, params, restored.sequence_length, output_dir, exported)
  huggingface.write_refusal(output_dir)  # SentenceTransformer(OUT) names the right format
  metadata = {
      "format_version": FORMAT_VERSION,
      "model_dir": files.abspath(model_dir),
      "objective": type(restored.model).__name__,
      "step": int(restored.step),
      "dimension": module.dimension,
      "sequence_length": restored.sequence_length,
      "vocabulary_size": int(restored.vocabulary.tokenizer.get_piece_size()),
      "normalized": bool(normalize),
      "platforms": list(platforms),
      "dtype": np.dtype(restored.model.network_config.dtype).name,
      "saved_model_parameters": len(exported),  # params_index.json says which
      "signatures": {
          "serving_default": "text: tf.string [batch] -> embeddings: float32 [batch, d]",
          "score": "text_a, text_b: tf.string [batch] -> scores: float32 [batch] (cosine)",
          **({SIDE_B_SIGNATURE: "text: tf.string [batch] -> embeddings: float32 [batch, d], "
                                "through tower b (every language not in side_a_languages)"}
             if "b" in restored.model.sides else {})},
      "sides": list(restored.model.sides),
      **({"side_a_languages": sorted(restored.model.side_a_languages)}
         if "b" in restored.model.sides else {}),
      "requires": "import tensorflow_text before tf.saved_model.load (SentencePiece ops)",
  }
  metadata["signatures"].update({name: f"text: tf.string [batch] -> embeddings: {name[8:]} codes"
                                 for name in signatures if name.startswith("serving_")
                                 and name[8:] in quantize.PRECISIONS})
  _write_extras(files.join(output_dir, EXTRA_DIR), model_dir, restored.vocabulary.sp_model,
                metadata)
  if calibrated is not None:
    quantize.save(files.join(output_dir, EXTRA_DIR), calibrated)
  return metadata


def _calibration(restored: restore.RestoredModel, model_dir: str,
                 sentences_file: str | None) -> quantize.Calibration | None:
  """The int8 calibration: measured on `sentences_file`, else the model directory's."""
  if sentences_file is None:
    return quantize.load(model_dir)
  from vmsst.encoding import calibration  # pylint: disable=import-outside-toplevel
  encoder = checkpoint.CheckpointEncoder(restored, name=files.name(model_dir))
  sentences = calibration.calibration_sentences(sentences_file)
  return quantize.calibrate(encoder.encode(sentences), files.name(sentences_file))


def quantized_signatures(module: "ServingModule", calibration: quantize.Calibration | None,
                         normalized: bool) -> dict[str, Any]:
  """serving_<precision> for the binary forms, and the int8 ones given a calibration."""
  signatures = {}
  for precision in quantize.PRECISIONS[1:]:
    if precision in quantize.CALIBRATED and calibration is None:
      continue
    ranges = calibration.ranges_for(normalized) if precision in quantize.CALIBRATED else None
    signatures[f"serving_{precision}"] = _quantized_serving(module, precision, ranges)
  return signatures


def _quantized_serving(module: "ServingModule", precision: str, ranges: np.ndarray | None):
  """One serving_<precision> function: text -> {"embeddings": codes}."""
  def serve(text):
    return {"embeddings": tf_quantize(module.embed(text), precision, ranges)}
  return tf.function(serve, autograph=False,
                     input_signature=[tf.TensorSpec([None], tf.string, name="text")])


def tf_quantize(embeddings: tf.Tensor, precision: str, ranges: np.ndarray | None) -> tf.Tensor:
  """The graph twin of `quantize.quantize` (same float32 arithmetic, same codes)."""
  if precision.endswith("binary"):
    dim = embeddings.shape[-1]
    bits = tf.cast(embeddings > 0, tf.int32)
    bits = tf.pad(bits, [[0, 0], [0, -dim % 8]])
    weights = tf.constant([128, 64, 32, 16, 8, 4, 2, 1], tf.int32)  # np.packbits: big-endian
    packed = tf.reduce_sum(tf.reshape(bits, [-1, (dim + 7) // 8, 8]) * weights, axis=-1)
    return tf.cast(packed, tf.uint8) if precision == "ubinary" else tf.cast(packed - 128, tf.int8)
  starts, steps = (tf.constant(v) for v in quantize.bucket_steps(ranges))
  # Not `/`: grappler rewrites a division by a constant into a product by its reciprocal,
  # which rounds differently (measured: 4% of quotients); divide_no_nan is left alone
  # (steps are never 0), so the codes equal numpy's.
  buckets = tf.clip_by_value(tf.floor(tf.math.divide_no_nan(embeddings - starts, steps)), 0, 255)
  return tf.cast(buckets, tf.uint8) if precision == "uint8" else tf.cast(buckets - 128, tf.int8)


def _write_extras(extra_dir: str, model_dir: str, sp_model: bytes, metadata: dict) -> None:
  """assets.extra/: the metadata, the vocabulary and the operative config.

  With these, params.npz is usable without the SavedModel (e.g. to port the
  weights): model.json names the architecture (config.gin the whole run),
  spm.model the tokenizer.
  """
  files.makedirs(extra_dir)
  for name in (run_directory.MODEL_SPEC, run_directory.CONFIG):  # no config.gin: an old directory
    if name == run_directory.MODEL_SPEC or files.exists(files.join(model_dir, name)):
      files.copy(files.join(model_dir, name), files.join(extra_dir, name))
  files.write_bytes(files.join(extra_dir, run_directory.VOCABULARY), sp_model)
  files.write_text(files.join(extra_dir, METADATA_FILE), json.dumps(metadata, indent=1))


def semantic_params(model: models.EmbeddingModel, params: dict[str, np.ndarray],
                    sequence_length: int) -> list[str]:
  """Names of the parameters `model.encode` reads (inputs some traced op consumes).

  Asking the traced computation, rather than listing network prefixes here,
  keeps the export right when an objective or ablation changes the encoder.
  It keeps what flax reads even when the output ignores it (log σ²), since
  `encode` cannot run without it; ServingModule traces `encode` on exactly
  this subset, so a missing name would fail the export, not the server.

  Args:
    model: the restored model.
    params: flat name -> array, every parameter of the checkpoint.
    sequence_length: any valid length; the set does not depend on it.
  """
  names = sorted(params)
  spec = jax.ShapeDtypeStruct((1, sequence_length), np.int32)
  unflatten = lambda leaves: traverse_util.unflatten_dict(dict(zip(names, leaves)),
                                                          sep=SEPARATOR)
  closed = jax.make_jaxpr(lambda leaves, t, m: [model.encode_side(unflatten(leaves), t, m, side)
                                                for side in model.sides])(
      [jax.ShapeDtypeStruct(params[n].shape, params[n].dtype) for n in names], spec, spec)
  jaxpr = closed.jaxpr
  live = {id(v) for eqn in jaxpr.eqns for v in eqn.invars} | {id(v) for v in jaxpr.outvars}
  return [n for n, v in zip(names, jaxpr.invars[:len(names)]) if id(v) in live]


def tokenize(tokenizer: tf_text.SentencepieceTokenizer, text: tf.Tensor,
             sequence_length: int, eos_id: int) -> tf.Tensor:
  """The graph twin of `tokens.tokenize_batch`: int32 [n, l], l <= sequence_length.

  Pieces are cut to sequence_length - 1 so EOS always fits; rows are 0-padded
  to the longest row of the batch (the model masks padding, so the embedding
  does not depend on l). An empty string gives just [EOS].
  """
  pieces = tokenizer.tokenize(text)[:, : sequence_length - 1]
  eos = tf.RaggedTensor.from_tensor(tf.fill([tf.shape(text)[0], 1], tf.constant(eos_id)))
  return tf.concat([tf.cast(pieces, tf.int32), eos], axis=1).to_tensor(default_value=0)


def bucketed(tokens: tf.Tensor, sequence_length: int, eos_id: int) -> tf.Tensor:
  """int32 [n, l] tokens padded to [rows, length] of a bounded set of shapes, n >= 0.

  The network is exported shape-polymorphic, but XLA compiles it anew for
  every concrete (batch, length) it meets: about 0.45 s per shape at the CPU
  benchmark's size, so a server fed batches of every size and length would
  keep compiling (measured: 0.31-0.49 s for each first call, 7-15 ms after).
  Lengths are padded to the next of checkpoint.LENGTH_BUCKETS (the trained
  length at most) and rows to the next of `checkpoint.row_buckets()`, the
  encoders' one row rule (n beyond its last stays n). Padded columns are masked, and padded rows hold one EOS
  each (dimensions stay >= 1 for an empty batch); the caller drops them.
  """
  rows, length = tf.shape(tokens)[0], tf.shape(tokens)[1]
  lengths = tf.constant(checkpoint.padded_lengths(sequence_length), tf.int32)
  padded_length = tf.gather(lengths, tf.reduce_sum(tf.cast(lengths < length, tf.int32)))
  sizes = tf.constant(checkpoint.row_buckets(), tf.int32)
  smaller = tf.reduce_sum(tf.cast(sizes < rows, tf.int32))
  padded_rows = tf.where(smaller < tf.size(sizes),
                         tf.gather(sizes, tf.minimum(smaller, tf.size(sizes) - 1)), rows)
  tokens = tf.pad(tokens, [[0, 0], [0, padded_length - length]])
  filler = tf.pad(tf.fill([padded_rows - rows, 1], tf.constant(eos_id, tf.int32)),
                  [[0, 0], [0, padded_length - 1]])
  return tf.concat([tokens, filler], axis=0)


class ServingModule(tf.Module):
  """The tokenizer, μ_sem's parameters and the two signatures, as one trackable.

  Attributes:
    dimension: d, the embedding width.
    params: flat name -> tf.Variable (non-trainable), μ_sem's parameters.
  """

  def __init__(self, restored: restore.RestoredModel, params: dict[str, np.ndarray], *,
               normalize: bool, platforms: Sequence[str]):
    super().__init__(name="vmsst")
    self._length = restored.sequence_length
    self._eos_id = int(restored.vocabulary.eos_id)
    # seqio's own serialized model: the bytes `vocabulary.encode` tokenizes with.
    self._tokenizer = tf_text.SentencepieceTokenizer(model=restored.vocabulary.sp_model,
                                                     out_type=tf.int32)
    self.params = {k: tf.Variable(v, trainable=False, name=k) for k, v in params.items()}
    self._network = {side: self._network_function(jax2tf.convert(
        _embedding_fn(restored.model, normalize, side),
        polymorphic_shapes=(None, "(b, l)", "(b, l)"),
        polymorphic_constraints=(f"l <= {self._length}",),
        with_gradient=False, native_serialization_platforms=tuple(platforms)))
        for side in restored.model.sides}
    spec = jax.ShapeDtypeStruct((1, 1), np.int32)
    self.dimension = int(jax.eval_shape(_embedding_fn(restored.model, normalize),
                                        params, spec, spec).shape[-1])

  def _network_function(self, converted):
    """One side's network as one graph function, which every signature calls.

    Each signature traced through jax2tf's function itself would lower the network to
    StableHLO again (six to eight times an export, the same module each time) and store a
    copy per signature; a `tf.function` with a fixed signature is traced once.
    """
    def network(tokens, mask):
      return converted(self.params, tokens, mask)
    spec = tf.TensorSpec([None, None], tf.int32)
    return tf.function(network, autograph=False, input_signature=[spec, spec])

  def embed(self, text: tf.Tensor, side: str = "a") -> tf.Tensor:
    """tf.string [n] -> float32 [n, d], through pair side `side`'s tower if it has one."""
    tokens = bucketed(tokenize(self._tokenizer, text, self._length, self._eos_id),
                      self._length, self._eos_id)
    mask = tf.cast(tokens != 0, tf.int32)
    network = self._network.get(side, self._network["a"])
    return network(tokens, mask)[:tf.shape(text)[0]]

  @tf.function(autograph=False,  # autograph would try to rewrite jax2tf's Python
               input_signature=[tf.TensorSpec([None], tf.string, name="text")])
  def serve(self, text):
    return {"embeddings": self.embed(text)}

  @tf.function(autograph=False, input_signature=[tf.TensorSpec([None], tf.string, name="text")])
  def __call__(self, text):
    """`tf.saved_model.load(path)(texts)`: float32 [n, d], serving_default's embeddings."""
    return self.embed(text)

  @tf.function(autograph=False, input_signature=[tf.TensorSpec([None], tf.string, name="text")])
  def serve_b(self, text):
    return {"embeddings": self.embed(text, "b")}

  @tf.function(autograph=False, input_signature=[tf.TensorSpec([None], tf.string, name="text_a"),
                                                 tf.TensorSpec([None], tf.string, name="text_b")])
  def score(self, text_a, text_b):
    # Each side is tokenized and padded on its own; the cosine is TensorFlow's
    # (the same formula as evaluation.similarity.paired_cosine).
    tf.debugging.assert_equal(tf.shape(text_a), tf.shape(text_b),
                              message="score: text_a and text_b must have the same length")
    a = tf.math.l2_normalize(self.embed(text_a), axis=-1)
    b = tf.math.l2_normalize(self.embed(text_b, "b"), axis=-1)
    return {"scores": tf.reduce_sum(a * b, axis=-1)}


def _embedding_fn(model: models.EmbeddingModel, normalize: bool, side: str = "a"):
  """(flat params, tokens int32 [B, L], mask int32 [B, L]) -> float32 [B, d], side's tower."""
  def embed(flat_params, tokens, mask):
    mu = model.encode_side(traverse_util.unflatten_dict(flat_params, sep=SEPARATOR), tokens,
                           mask, side)
    return losses.l2_normalize(mu) if normalize else mu
  return embed


def write_params(model: models.EmbeddingModel, params: dict[str, np.ndarray],
                 sequence_length: int, output_dir: str, exported: Sequence[str]) -> dict:
  """Writes params.npz and params_index.json; returns the index.

  The logical axes come from the model's initial variables (their
  nn.LogicallyPartitioned boxes), the same names `partitioning` shards by.
  """
  boxed = jax.eval_shape(
      lambda rng: model.get_initial_variables(rng, models.batch_shapes(1, sequence_length)),
      jax.random.key(0))["params"]
  axes = {k: list(box.names) if isinstance(box, nn.LogicallyPartitioned) else None
          for k, box in traverse_util.flatten_dict(boxed, sep=SEPARATOR).items()}
  if set(axes) != set(params):
    raise ValueError(f"checkpoint parameters {sorted(set(params) ^ set(axes))} disagree with "
                     "the model config.gin builds; export with the config it was trained by.")
  files.save_npz(files.join(output_dir, PARAMS_FILE), **params)
  index = {k: {"shape": list(v.shape), "dtype": str(v.dtype), "axes": axes[k],
               "in_saved_model": k in exported} for k, v in sorted(params.items())}
  rows = ",\n".join(f"  {json.dumps(k)}: {json.dumps(v)}" for k, v in index.items())
  files.write_text(files.join(output_dir, PARAMS_INDEX_FILE),  # one line per parameter, plain JSON
                   f'{{"file": "{PARAMS_FILE}", "separator": "{SEPARATOR}", "params": {{\n'
                   f"{rows}\n}}}}\n")
  return index
