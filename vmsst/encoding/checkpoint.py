"""A restored checkpoint as an encoder: sentences in length buckets through μ_sem.

Sentences are tokenized exactly like training inputs (`model.tokens`) and
embedded in length buckets: each batch is cut to the smallest bucket that
holds its longest sentence, so short sentences do not pay for padding to the
training length (one compiled encoder per bucket), and padded in rows only to
the next power of two (`padded_rows`). These two rules are the serving shapes
of every encoder: the SavedModel's graph pads to the same
(`export_formats.saved_model.bucketed`).
"""

import functools
import os
from typing import Sequence

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from vmsst.model import partitioning
from vmsst.encoding import restore as restore_lib
from vmsst.model import tokens as tokens_lib


# Sentences are padded to the smallest of these that holds the batch's longest
# (capped at the trained length): one compiled encoder per bucket. The
# SavedModel's graph pads to the same (saved_model.bucketed). Steps of 8 up to 64
# (the CPU runs' length) rather than powers of two: one sentence at a time ran
# 8.1 instead of 10.0 ms per sentence in the SavedModel (real NTREX sentences,
# 6 layers, d = 512; docs/results/benchmarks/README.md) for 8 compiled lengths instead of 4.
LENGTH_BUCKETS = (8, 16, 24, 32, 40, 48, 56, 64, 96, 128, 192, 256, 384, 512)


def padded_lengths(max_length: int, buckets: Sequence[int] = LENGTH_BUCKETS) -> list[int]:
  """The padded lengths a model of `max_length` pieces runs at: `buckets` below it, then it."""
  return sorted({b for b in buckets if b < max_length} | {max_length})


def padded_rows(rows: int) -> int:
  """The rows a call of `rows` sentences is padded to: the next power of two (1 for none).

  Padding every call to the full batch made one sentence cost the whole
  batch's compute (64x the latency at batch 1, 2x at 32); powers of two cost
  at most twice the rows and keep the compiled shapes to log2(batch) + 1 per
  length bucket, and are the batch sizes users pick (which then pad nothing).
  """
  return 1 << max(0, rows - 1).bit_length()


def row_buckets(limit: int = 1 << 20) -> tuple[int, ...]:
  """Every row count `padded_rows` gives up to `limit`, for a graph that pads by lookup."""
  return tuple(1 << i for i in range(limit.bit_length()))


def serving_params(params, dtype):
  """`params` with every matrix (ndim >= 2) cast once to a low-precision `dtype`.

  The network casts each kernel to the activation dtype inside every matmul
  (`xla_cpu.matmul`), which in a training step is noise but at inference
  repeats per call: one sentence at a time in bfloat16 spent half its 21 ms
  casting the 6-layer encoder's weights. Casting them once gives the same
  products (a cast of a bfloat16 array to bfloat16 is the identity); vectors
  (norm scales, biases) stay float32, as the layers use them. float32 `dtype`
  returns `params` unchanged.
  """
  if jnp.dtype(dtype) == jnp.float32:
    return params
  return jax.tree.map(lambda x: x.astype(dtype) if x.ndim >= 2 and jnp.issubdtype(
      x.dtype, jnp.floating) else x, params)


class CheckpointEncoder:
  """μ_sem of a restored model: the `protocol.Encoder` contract for our checkpoints.

  A two-tower model (`model.sides == ("a", "b")`: MomentumContrast with
  separate towers) embeds a sentence with the tower of its language, as it
  trained: `tower_of(language)` is `model.side_of_language` ("a" for side a's
  languages, English in the paper runs; "b" for the rest), and
  `encode(sentences, side=...)` runs that tower (`protocol.UniqueSentences`
  routes by language this way). `side` is the tower of sentences whose
  language is not given. One-encoder models ignore both.
  """

  def __init__(self, restored: restore_lib.RestoredModel, *, batch_size: int = 64,
               name: str = "vmsst", length_buckets: Sequence[int] = LENGTH_BUCKETS,
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
    self.buckets = padded_lengths(self.max_seq_length, length_buckets)
    self._params = serving_params(restored.params, config.dtype)
    params_sharding = jax.tree.map(lambda x: x.sharding, self._params)
    rows = partitioning.batch_sharding(restored.mesh)
    self.side = side
    self._encode = {s: jax.jit(functools.partial(restored.model.encode_side, side=s),
                               in_shardings=(params_sharding, rows, rows),
                               out_shardings=partitioning.replicated(restored.mesh))
                    for s in restored.model.sides}

  @classmethod
  def from_model_dir(cls, model_dir: str, **kwargs) -> "CheckpointEncoder":
    return cls(restore_lib.restore(model_dir),
               name=os.path.basename(os.path.normpath(model_dir)), **kwargs)

  def tower_of(self, language: str | None) -> str | None:
    """The tower embedding `language` ("a"/"b"; `self.side` if None); None: one encoder."""
    if len(self.restored.model.sides) == 1:
      return None
    return self.side if language is None else self.restored.model.side_of_language(language)

  def encode(self, sentences: Sequence[str], side: str | None = None) -> np.ndarray:
    """float32 [len(sentences), d] embeddings μ_sem (not normalised), through the
    tower of pair side `side` (default `self.side`; one-encoder models have one)."""
    side = side or self.side
    if side not in ("a", "b"):
      raise ValueError(f"side={side!r}: a pair side is 'a' or 'b' (tower_of gives a language's).")
    encode = self._encode.get(side, self._encode["a"])
    outputs = []
    for start, stop in tokens_lib.fixed_size_batches(len(sentences), self.batch_size):
      tokens, mask = tokens_lib.tokenize_batch(
          self.restored.vocabulary, sentences[start:stop], self.max_seq_length)
      length = next(b for b in self.buckets if b >= max(1, int(mask.sum(1).max())))
      rows = _row_bucket(stop - start, self.batch_size, self.restored.mesh.shape["data"])
      tokens, mask = (_pad_rows(x[:, :length], rows) for x in (tokens, mask))
      with jax.set_mesh(self.restored.mesh), nn.logical_axis_rules(
          partitioning.LOGICAL_AXIS_RULES):
        embedded = encode(self._params, tokens, mask)
      outputs.append(np.asarray(embedded)[: stop - start])
    if not outputs:
      return np.zeros((0, 0), np.float32)
    return np.concatenate(outputs).astype(np.float32)

  def count_truncated(self, sentences: Sequence[str]) -> int:
    """How many of `sentences` lose pieces: more than max_seq_length - 1 plus the EOS."""
    return tokens_lib.count_truncated(self.restored.vocabulary, sentences, self.max_seq_length)


def _row_bucket(rows: int, batch_size: int, data_shards: int) -> int:
  """`padded_rows(rows)` as a multiple of the data shards, at most `batch_size`."""
  bucket = padded_rows(rows)
  return min(-(-bucket // data_shards) * data_shards, batch_size)


def _pad_rows(x: np.ndarray, rows: int) -> np.ndarray:
  """Repeats the first row so every batch has the compiled size."""
  return np.concatenate([x, np.repeat(x[:1], rows - len(x), axis=0)]) if len(x) < rows else x
