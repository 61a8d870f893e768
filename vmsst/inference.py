"""A trained model directory, restored for embedding sentences.

A model directory written by `python -m vmsst.train` holds everything needed:
`config.gin` (the operative config: network, objective, sequence length),
`spm.model` (the vocabulary) and `checkpoints/`. Only the parameters are
restored (orbax partial restore), never the optimizer state, so evaluating a
24-layer model needs no room for its Adafactor/Adam moments.

Sentences are tokenized exactly like training inputs (`text_inputs`) and
embedded in length buckets: each batch is cut to the smallest bucket that
holds its longest sentence, so short sentences do not pay for padding to the
training length (one compiled encoder per bucket).

Directories trained before language ids had their own table (their
checkpoints lack `language_embed`; languages were `<2xxx>` pieces of their
spm.model embedded by the token table) still restore: the table is rebuilt
from those token rows (`vocabulary.legacy_language_rows`), so every path
computes what it did. μ_sem never reads it.
"""

import dataclasses
import functools
import os
from typing import Any, Sequence

import flax.linen as nn
import gin
import jax
import jax.numpy as jnp
import numpy as np
import orbax.checkpoint as ocp
import seqio
from absl import logging

from vmsst import models
from vmsst import param_files
from vmsst import partitioning
from vmsst import text_inputs
from vmsst import vocabulary as vocabulary_lib

VOCABULARY_FILE = "spm.model"
CONFIG_FILE = "config.gin"


@dataclasses.dataclass(frozen=True)
class RestoredModel:
  """A model, its parameters (sharded over `mesh`) and its input pipeline."""
  model: models.EmbeddingModel
  params: Any
  vocabulary: seqio.SentencePieceVocabulary
  sequence_length: int
  step: int
  mesh: jax.sharding.Mesh


PRECISIONS = ("bfloat16", "float32")


def restore(model_dir: str, *, step: int | None = None,
            mesh: jax.sharding.Mesh | None = None, dtype: str | None = None) -> RestoredModel:
  """Rebuilds the model from MODEL_DIR/config.gin and restores its parameters.

  Args:
    model_dir: a directory written by `python -m vmsst.train`.
    step: checkpoint step (default: the latest).
    mesh: where to place the parameters (default: all devices on "data").
    dtype: activation/matmul precision to run at ("bfloat16" or "float32"),
      whatever the run trained with (default: the trained one). Parameters
      stay float32, so a float32 checkpoint encodes in bf16 (about 1.6x the
      throughput on CPUs with AVX512-BF16) and back.
  """
  if dtype is not None and dtype not in PRECISIONS:
    raise ValueError(f"dtype={dtype!r}: choose one of {PRECISIONS} (or None for the "
                     f"precision {model_dir}/config.gin trained with).")
  model, sequence_length, vocab_path = _read_config(model_dir, dtype)
  vocab = vocabulary_lib.get_vocabulary(vocab_path)
  mesh = mesh or partitioning.make_mesh()
  manager = ocp.CheckpointManager(os.path.join(os.path.abspath(model_dir), "checkpoints"))
  step = manager.latest_step() if step is None else step
  if step is None:
    raise FileNotFoundError(f"{model_dir}/checkpoints has no checkpoint; train first "
                            "(`python -m vmsst.train --gin.MODEL_DIR=...`).")
  boxed = jax.eval_shape(
      lambda rng: model.get_initial_variables(rng, models.batch_shapes(1, sequence_length)),
      jax.random.key(0))["params"]
  shardings = partitioning.logical_shardings(boxed, mesh)
  abstract = jax.tree.map(lambda x, s: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=s),
                          nn.unbox(boxed), shardings)
  legacy = _predates_language_table(model_dir, step, abstract)
  item = {"params": {k: v for k, v in abstract.items() if not (legacy and k == LANGUAGE_TABLE)}}
  restored = manager.restore(step, args=ocp.args.PyTreeRestore(
      item=item, restore_args=ocp.checkpoint_utils.construct_restore_args(item),
      partial_restore=True))
  params = restored["params"]
  if legacy:
    params = {**params, LANGUAGE_TABLE: {"embedding": _legacy_language_table(
        params, vocab, shardings[LANGUAGE_TABLE]["embedding"], model_dir)}}
  return RestoredModel(model=model, params=params, vocabulary=vocab,
                       sequence_length=sequence_length, step=step, mesh=mesh)


LANGUAGE_TABLE = "language_embed"


def _predates_language_table(model_dir: str, step: int, abstract: dict[str, Any]) -> bool:
  """The model has a language table and the checkpoint, older, has none."""
  if LANGUAGE_TABLE not in abstract:
    return False
  metadata = ocp.PyTreeCheckpointer().metadata(param_files.checkpoint_item(model_dir, step))
  return LANGUAGE_TABLE not in metadata.item_metadata.tree["params"]


def _legacy_language_table(params: dict[str, Any], vocab: seqio.SentencePieceVocabulary,
                           sharding: jax.sharding.Sharding, model_dir: str) -> jax.Array:
  """`language_embed` of an old checkpoint: its token rows of the `<2xxx>` pieces."""
  token_table = np.asarray(jax.device_get(params["token_embed"]["embedding"]))
  rows, missing = vocabulary_lib.legacy_language_rows(vocab, token_table)
  logging.warning(
      "%s predates the language table (language_embed): rebuilt from the token rows of "
      "its <2xxx> pieces; %d languages have none and get zero rows%s.", model_dir,
      len(missing), f" (e.g. {missing[:5]})" if missing else "")
  return jax.device_put(rows, sharding)


def _read_config(model_dir: str, dtype: str | None = None
                 ) -> tuple[models.EmbeddingModel, int, str]:
  """(model, sequence length, vocabulary path) from the operative config."""
  config_path = os.path.join(model_dir, CONFIG_FILE)
  if not os.path.exists(config_path):
    raise FileNotFoundError(f"{config_path} not found: --model_dir must be a directory "
                            "written by `python -m vmsst.train`.")
  from vmsst import train  # pylint: disable=import-outside-toplevel,unused-import  # gin names
  with gin.unlock_config():
    gin.clear_config()
    gin.parse_config_file(config_path)
    if dtype is not None:
      gin.bind_parameter("NetworkConfig.dtype", str(jnp.dtype(dtype)))
  model = gin.query_parameter("train.model").scoped_configurable_fn()
  sequence_length = _value(gin.query_parameter("train.sequence_length"))
  vocab_path = os.path.join(model_dir, VOCABULARY_FILE)
  if not os.path.exists(vocab_path):  # directories trained before spm.model was copied
    vocab_path = _value(gin.query_parameter("get_vocabulary.path"))
  return model, int(sequence_length), vocab_path


def _value(binding: Any) -> Any:
  """A gin binding's value, resolving `%MACRO` references."""
  return binding.scoped_configurable_fn() if isinstance(
      binding, gin.config.ConfigurableReference) else binding


class CheckpointEncoder:
  """μ_sem of a restored model: the `encoders.Encoder` contract for our checkpoints.

  `side` picks the tower of a two-tower model (`model.sides == ("a", "b")`,
  MomentumContrast with separate towers): "a" (default) for side a's language
  (English in the paper runs), "b" for the other languages; e.g.
  `CheckpointEncoder(restored, side=restored.model.side_of_language("zho"))`.
  One-encoder models ignore it.
  """

  def __init__(self, restored: RestoredModel, *, batch_size: int = 64, name: str = "vmsst",
               length_buckets: Sequence[int] = (8, 16, 32, 64, 128, 256, 512),
               side: str = "a", max_seq_length: int | None = None):
    """`max_seq_length`: pieces per sentence, EOS included (default: the training length).

    Longer sentences are cut to it (`count_truncated` says how many); a
    longer length than trained on reaches positions the model never saw.
    """
    data_shards = restored.mesh.shape["data"]
    self.restored = restored
    self.name = name
    self.batch_size = -(-batch_size // data_shards) * data_shards
    self.max_seq_length = max_seq_length or restored.sequence_length
    config = restored.model.network_config
    positions = 1 << 30 if config.relative_attention else config.max_length
    if not 2 <= self.max_seq_length <= positions:
      raise ValueError(f"--max_seq_length={self.max_seq_length}: this model takes 2 to "
                       f"{positions} pieces (NetworkConfig.max_length); it trained on "
                       f"{restored.sequence_length}.")
    self.buckets = sorted({b for b in length_buckets if b < self.max_seq_length}
                          | {self.max_seq_length})
    params_sharding = jax.tree.map(lambda x: x.sharding, restored.params)
    rows = partitioning.batch_sharding(restored.mesh)
    self._encode = jax.jit(functools.partial(restored.model.encode_side, side=side),
                           in_shardings=(params_sharding, rows, rows),
                           out_shardings=partitioning.replicated(restored.mesh))

  @classmethod
  def from_model_dir(cls, model_dir: str, **kwargs) -> "CheckpointEncoder":
    return cls(restore(model_dir), name=os.path.basename(os.path.normpath(model_dir)), **kwargs)

  def encode(self, sentences: Sequence[str]) -> np.ndarray:
    """float32 [len(sentences), d] embeddings μ_sem (not normalised)."""
    outputs = []
    for start, stop in text_inputs.fixed_size_batches(len(sentences), self.batch_size):
      tokens, mask = text_inputs.tokenize_batch(
          self.restored.vocabulary, sentences[start:stop], self.max_seq_length)
      length = next(b for b in self.buckets if b >= max(1, int(mask.sum(1).max())))
      tokens, mask = (_pad_rows(x[:, :length], self.batch_size) for x in (tokens, mask))
      with jax.set_mesh(self.restored.mesh), nn.logical_axis_rules(
          partitioning.LOGICAL_AXIS_RULES):
        embedded = self._encode(self.restored.params, tokens, mask)
      outputs.append(np.asarray(embedded)[: stop - start])
    if not outputs:
      return np.zeros((0, 0), np.float32)
    return np.concatenate(outputs).astype(np.float32)


  def count_truncated(self, sentences: Sequence[str]) -> int:
    """How many of `sentences` lose pieces: more than max_seq_length - 1 plus the EOS."""
    vocabulary = self.restored.vocabulary
    return sum(len(vocabulary.encode(s)) > self.max_seq_length - 1 for s in sentences)


def _pad_rows(x: np.ndarray, rows: int) -> np.ndarray:
  """Repeats the first row so every batch has the compiled size."""
  return np.concatenate([x, np.repeat(x[:1], rows - len(x), axis=0)]) if len(x) < rows else x
