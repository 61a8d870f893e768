"""The NLI multitask term of dual momentum contrast (Wang et al. 2021, §3.3, App. B).

A two-layer MLP (256 hidden units, ReLU, dropout 0.1) and a 3-way classifier
on the sentence representations of a premise and a hypothesis, trained by
cross-entropy with weight α (0.1) next to the translation ranking loss, on
batches of 128 pairs of SNLI + MNLI train.

The paper does not say how the two representations enter the MLP; following
Reimers and Gurevych (2019), whom it follows for pooling and STS, the input
is (u, v, |u − v|) of the L2-normalised representations u, v. "A two-layer
MLP with 256 hidden units and a 3-way classification head" is read as two
hidden layers of 256 then the 3-way output layer.

Data: a directory of training files, read once on the host and tokenized
like every training input (`model.tokens`):
  *.tsv    premise<TAB>hypothesis<TAB>label (the XNLI / SuperGLEBer layout)
  *.jsonl  SNLI / MNLI: {"sentence1", "sentence2", "gold_label", ...}
label in {entailment, neutral, contradiction}; lines without a gold label
("-" in SNLI) or with a wrong number of fields are skipped and counted.

Sampling: the one training loop has one data stream (translation pairs), so
the NLI batch of each step is drawn inside the train step by a host callback
(`jax.pure_callback`) that is a pure function of the step's random key:
`nli_batch_size` rows uniformly with replacement (the paper cycles through
the data in epochs). Nothing is added to the checkpoint, and a resumed run
draws the same batches.
"""

import json
import pathlib
from typing import NamedTuple

import flax.linen as nn
from vmsst.base import files
from vmsst.base.gin_utils import gin
import jax
import jax.numpy as jnp
import numpy as np
from absl import logging

from vmsst.model import losses
from vmsst.model import tokens

LABELS = ("entailment", "neutral", "contradiction")


class NliExamples(NamedTuple):
  """Tokenized NLI pairs: premise/hypothesis int32 [N, L] (EOS-ended, 0-padded), label int32 [N]."""
  premise: np.ndarray
  hypothesis: np.ndarray
  label: np.ndarray


def _rows(path: pathlib.Path):
  """(premise, hypothesis, label or None) per line of one .tsv or .jsonl file."""
  with files.open(path) as f:
    for line in f:
      if not line.strip():
        continue
      if path.suffix == ".jsonl":
        record = json.loads(line)
        yield record.get("sentence1"), record.get("sentence2"), record.get("gold_label")
      else:
        fields = line.rstrip("\n").split("\t")
        yield tuple(fields) if len(fields) == 3 else (None, None, None)


def read_nli(path: str) -> tuple[list[str], list[str], np.ndarray, int]:
  """(premises, hypotheses, labels int32 [N], skipped lines) of every .tsv/.jsonl in `path`."""
  root = files.as_path(path)
  found = sorted([*root.glob("*.tsv"), *root.glob("*.jsonl")]) if root.is_dir() else []
  if not found:
    raise FileNotFoundError(
        f"NLI data: {path} {'has no .tsv or .jsonl file' if root.is_dir() else 'does not exist'}. "
        "The NLI term (MomentumContrast.nli_weight > 0) needs English NLI training pairs "
        "there: SNLI + MNLI train as .jsonl (sentence1, sentence2, gold_label) or .tsv "
        "(premise<TAB>hypothesis<TAB>label); or set MomentumContrast.nli_weight = 0.")
  premises, hypotheses, labels, skipped = [], [], [], 0
  for file in found:
    for premise, hypothesis, label in _rows(file):
      if not premise or not hypothesis or label not in LABELS:
        skipped += 1
        continue
      premises.append(premise)
      hypotheses.append(hypothesis)
      labels.append(LABELS.index(label))
  if not labels:
    raise ValueError(f"NLI data: no usable line in {[str(f) for f in found]} ({skipped} "
                     f"skipped; labels must be one of {LABELS}).")
  return premises, hypotheses, np.asarray(labels, np.int32), skipped


@gin.configurable
def nli_examples(*, path: str = gin.REQUIRED, vocabulary: "seqio.Vocabulary" = gin.REQUIRED,
                 sequence_length: int = gin.REQUIRED) -> NliExamples:
  """Reads and tokenizes an NLI directory (`read_nli`) with the training truncation."""
  premises, hypotheses, labels, skipped = read_nli(path)
  premise, _ = tokens.tokenize_batch(vocabulary, premises, sequence_length)
  hypothesis, _ = tokens.tokenize_batch(vocabulary, hypotheses, sequence_length)
  logging.info("NLI data %s: %d pairs (per label %s), %d lines skipped", path, len(labels),
               np.bincount(labels, minlength=3).tolist(), skipped)
  return NliExamples(np.asarray(premise, np.int32), np.asarray(hypothesis, np.int32), labels)


def sample(examples: NliExamples, rng: jax.Array, batch_size: int) -> NliExamples:
  """`batch_size` rows drawn uniformly with replacement; a pure function of `rng`.

  Runs on the host (`jax.pure_callback`), so the data never enters the
  compiled step as a constant or the checkpoint as state.
  """
  def draw(key_data):
    seed = np.asarray(key_data, np.uint32).ravel().tolist()
    rows = np.random.default_rng(seed).integers(0, len(examples.label), batch_size)
    return tuple(np.asarray(x[rows]) for x in examples)
  shapes = tuple(jax.ShapeDtypeStruct((batch_size, *x.shape[1:]), x.dtype) for x in examples)
  return NliExamples(*jax.pure_callback(draw, shapes, jax.random.key_data(rng)))


class NliHead(nn.Module):
  """(u, v, |u − v|) → [Dense(256) → ReLU → dropout] × 2 → Dense(3) logits."""
  hidden: int = 256
  num_layers: int = 2
  dropout_rate: float = 0.1

  @nn.compact
  def __call__(self, premise: jax.Array, hypothesis: jax.Array, deterministic: bool = True):
    """premise, hypothesis: float [B, d] representations → float32 logits [B, 3]."""
    u, v = losses.l2_normalize(premise), losses.l2_normalize(hypothesis)
    x = jnp.concatenate([u, v, jnp.abs(u - v)], axis=-1).astype(jnp.float32)
    # Small and replicated: no logical axis of the head is sharded.
    dense = lambda width, axes, name: nn.Dense(
        width, name=name,
        kernel_init=nn.with_logical_partitioning(nn.initializers.lecun_normal(), axes),
        bias_init=nn.with_logical_partitioning(nn.initializers.zeros_init(), (None,)))
    for i in range(self.num_layers):
      x = dense(self.hidden, ("embed" if i == 0 else None, None), f"hidden_{i}")(x)
      x = nn.Dropout(self.dropout_rate)(nn.relu(x), deterministic=deterministic)
    return dense(len(LABELS), (None, None), "logits")(x)


def cross_entropy(logits: jax.Array, labels: jax.Array) -> tuple[jax.Array, jax.Array]:
  """(mean −log p(gold), accuracy) of logits [B, 3] against int labels [B]."""
  log_p = jax.nn.log_softmax(logits.astype(jnp.float32))
  loss = -jnp.mean(jnp.take_along_axis(log_p, labels[:, None], axis=-1))
  return loss, jnp.mean((jnp.argmax(logits, -1) == labels).astype(jnp.float32))
