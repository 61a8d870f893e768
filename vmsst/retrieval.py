"""Held-out bitext retrieval accuracy, run periodically during training.

Tatoeba-style: for aligned lists (src_i, trg_i), the nearest target of src_i
by cosine must be trg_i (and vice versa); accuracy is by line index.

Sources are pair side a (English in tasks.heldout's sets), targets side b, so
a model with a tower per side (MomentumContrast with separate towers) embeds
each through the tower trained on its language.
"""

import functools
from typing import Callable, Mapping, Sequence

import gin
import numpy as np
import seqio
from absl import logging

from vmsst import text_inputs


def retrieval_accuracy(src: np.ndarray, trg: np.ndarray) -> tuple[float, float]:
  """(src→trg, trg→src) accuracy of aligned float [n, d] embeddings."""
  src = src / np.linalg.norm(src, axis=-1, keepdims=True).clip(1e-12)
  trg = trg / np.linalg.norm(trg, axis=-1, keepdims=True).clip(1e-12)
  sim = src @ trg.T
  gold = np.arange(len(src))
  return float(np.mean(sim.argmax(1) == gold)), float(np.mean(sim.argmax(0) == gold))


@gin.configurable
class RetrievalEvaluator:
  """Retrieval accuracy (×100, mean of both directions) on named aligned sets."""

  def __init__(self, sets: Mapping[str, tuple[Sequence[str], Sequence[str]]],
               vocabulary: seqio.Vocabulary, *, sequence_length: int, batch_size: int = 64):
    """Args:
      sets: name -> (source sentences, aligned target sentences).
      vocabulary: the training vocabulary.
      sequence_length: the training length (inputs are truncated alike).
      batch_size: encoding batch; must divide over the mesh's data axis.
    """
    empty = sorted(name for name, (src, _) in sets.items() if not len(src))
    if empty:  # e.g. a data subset without held-out documents: nothing to rank
      logging.warning("held-out retrieval: sets %s have no pairs and are skipped", empty)
    self.sets = {name: pair for name, pair in sets.items() if len(pair[0])}
    self.vocabulary = vocabulary
    self.sequence_length = sequence_length
    self.batch_size = batch_size

  def run(self, embed_fn: Callable[..., np.ndarray]) -> dict[str, float]:
    """name -> accuracy ×100, plus `mean` over the sets and `chance`.

    Args:
      embed_fn: (tokens, mask, side) -> float [B, d]; called with side="a"
        for the sets' sources and side="b" for their targets (a one-encoder
        model ignores it; see EmbeddingModel.encode_side).
    """
    results = {}
    for name, (src, trg) in self.sets.items():
      embed = lambda s, side: text_inputs.embed_sentences(
          functools.partial(embed_fn, side=side), self.vocabulary, list(s),
          self.sequence_length, self.batch_size)
      forward, backward = retrieval_accuracy(embed(src, "a"), embed(trg, "b"))
      results[name] = 50.0 * (forward + backward)
    results["mean"] = float(np.mean(list(results.values()))) if results else 0.0
    results["chance"] = float(np.mean([100.0 / len(s) for s, _ in self.sets.values()]))
    return results
