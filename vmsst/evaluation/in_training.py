"""Evaluators the training loop runs every `train.eval_every` steps, and their one contract.

An `Evaluator` is given the model being trained as an `embed_fn` (tokens,
mask, side) -> float [B, d] and returns flat {metric: float}; `train` logs
them to TensorBoard under `retrieval/` and hands them to early stopping. The
benchmark suite (the rest of this package) scores finished models through a
`protocol.Encoder` instead; both reach embeddings through
`model.tokens.embed_sentences` and score retrieval with
`tatoeba.retrieval_accuracy`, so in-training and final numbers agree.

Sources are pair side a (English in tasks.heldout's sets), targets side b, so
a model with a tower per side (MomentumContrast with separate towers) embeds
each through the tower trained on its language.
"""

from typing import Callable, Mapping, Protocol, Sequence

import numpy as np
from absl import logging

from vmsst.encoding import checkpoint as checkpoint_lib
from vmsst.encoding import restore
from vmsst.model import tokens as tokens_lib
from vmsst.evaluation import pair_ranking
from vmsst.evaluation import tatoeba
from vmsst.base.gin_utils import gin
from vmsst.objectives import query_tower

EmbedFn = Callable[..., np.ndarray]


class Evaluator(Protocol):
  """What `train(evaluator=...)` accepts (one, or a list of them).

  An evaluator that reads teacher vectors (DistillationEvaluator) also holds
  `teacher_cache` and `teacher_sentences`: the run's teacher stage
  (vmsst.teachers.cache.fill_stage) encodes those the cache lacks before training.
  """

  def run(self, embed_fn: EmbedFn) -> dict[str, float]:
    """{metric: value} of the model behind `embed_fn(tokens, mask, side="a")`."""


def as_list(evaluators: Evaluator | Sequence[Evaluator] | None) -> list[Evaluator]:
  """`train(evaluator=...)`'s value as a list: None -> [], one -> [it]."""
  if evaluators is None:
    return []
  return list(evaluators) if isinstance(evaluators, (list, tuple)) else [evaluators]


def merge(evaluators: Evaluator | Sequence[Evaluator] | None,
          embed_fn: EmbedFn) -> dict[str, float]:
  """Results of every evaluator; the first keeps its metric names, later ones are prefixed.

  The first evaluator's names stay bare because early stopping and the
  learning curves read them ("mean", "loss"); the others' become
  "<ClassName>.<metric>" so two evaluators never overwrite each other.
  """
  results = {}
  for index, evaluator in enumerate(as_list(evaluators)):
    prefix = f"{type(evaluator).__name__}." if index else ""
    results.update({prefix + key: value for key, value in evaluator.run(embed_fn).items()})
  return results


class _AlignedSets:
  """Named aligned (source, target) sets embedded side by side; empty sets skipped."""

  def __init__(self, sets: Mapping[str, tuple[Sequence[str], Sequence[str]]],
               vocabulary: "seqio.Vocabulary", sequence_length: int, batch_size: int):
    empty = sorted(name for name, (src, _) in sets.items() if not len(src))
    if empty:  # e.g. a data subset without held-out documents: nothing to rank
      logging.warning("held-out retrieval: sets %s have no pairs and are skipped", empty)
    self.sets = {name: pair for name, pair in sets.items() if len(pair[0])}
    self.vocabulary = vocabulary
    self.sequence_length = sequence_length
    self.batch_size = batch_size
    self.truncated = self.count_truncated()
    cut, total = sum(self.truncated.values()), sum(2 * len(src) for src, _ in self.sets.values())
    if cut:  # the model sees only the first pieces of these, on both sides alike
      logging.info("held-out sets: %d of %d sentences have more than %d pieces and are cut "
                   "(EOS included; per set: %s)", cut, total, sequence_length - 1,
                   ", ".join(f"{name} {n}" for name, n in self.truncated.items() if n))

  def count_truncated(self) -> dict[str, int]:
    """name -> sentences of the set (both sides) longer than sequence_length - 1 pieces."""
    return {name: tokens_lib.count_truncated(self.vocabulary, (*src, *trg), self.sequence_length)
            for name, (src, trg) in self.sets.items()}

  def embed(self, embed_fn: EmbedFn, sentences: Sequence[str], side: str) -> np.ndarray:
    """float32 [n, d] of `sentences` through the tower of `side`."""
    return tokens_lib.embed_sentences(
        lambda tokens, mask: embed_fn(tokens, mask, side=side), self.vocabulary,
        list(sentences), self.sequence_length, self.batch_size)

  def chance(self) -> float:
    return float(np.mean([100.0 / len(s) for s, _ in self.sets.values()]))


def _accuracy(src: np.ndarray, trg: np.ndarray) -> float:
  """Mean of both directions' retrieval accuracy ×100."""
  return 50.0 * (tatoeba.retrieval_accuracy(src, trg) + tatoeba.retrieval_accuracy(trg, src))


@gin.configurable
class RetrievalEvaluator(_AlignedSets):
  """Retrieval accuracy (×100, mean of both directions) on named aligned sets."""

  def __init__(self, sets: Mapping[str, tuple[Sequence[str], Sequence[str]]],
               vocabulary: "seqio.Vocabulary", *, sequence_length: int, batch_size: int = 64):
    """Args:
      sets: name -> (source sentences, aligned target sentences).
      vocabulary: the training vocabulary.
      sequence_length: the training length (inputs are truncated alike).
      batch_size: encoding batch; must divide over the mesh's data axis.
    """
    super().__init__(sets, vocabulary, sequence_length, batch_size)

  def run(self, embed_fn: EmbedFn) -> dict[str, float]:
    """name -> accuracy ×100, plus `mean` over the sets and `chance`.

    Args:
      embed_fn: (tokens, mask, side) -> float [B, d]; called with side="a"
        for the sets' sources and side="b" for their targets (a one-encoder
        model ignores it; see EmbeddingModel.encode_side).
    """
    results = {name: _accuracy(self.embed(embed_fn, src, "a"), self.embed(embed_fn, trg, "b"))
               for name, (src, trg) in self.sets.items()}
    results["mean"] = float(np.mean(list(results.values()))) if results else 0.0
    results["chance"] = self.chance()
    return results


@gin.configurable
class DistillationEvaluator(_AlignedSets):
  """Held-out MSE to the teacher, and retrieval accuracy, on aligned (source, target) sets.

  For each set: `<name>` retrieval accuracy ×100 (as RetrievalEvaluator),
  `<name>.mse_source` = MSE(f(s), T(s)) and `<name>.mse_target` =
  MSE(f(t), T(s)); then `mse` (the training loss's two terms summed, mean
  over sets), `mse_zero` (the same for a student that outputs zeros:
  2·mean T(s)², the scale `mse` is read against), `mse_percent_of_zero`
  (100·mse/mse_zero: 100 at the start, as the head starts at zero; readable
  where the loop prints two decimals), `mean` accuracy and `chance`. The teacher's vectors of the
  sources (`teacher_sentences`) are read from `teacher_cache`, never encoded
  here: the run's teacher stage (vmsst.teachers.cache.fill_stage, in `train`
  before its data; or `python -m vmsst.teacher_cache` ahead of time) fills them.
  """

  def __init__(self, sets: Mapping[str, tuple[Sequence[str], Sequence[str]]],
               vocabulary: "seqio.Vocabulary", *, teacher_cache, sequence_length: int,
               batch_size: int = 64):
    """Args:
      sets: name -> (source sentences, aligned targets), e.g. tasks.heldout.retrieval_sets.
      vocabulary: the training vocabulary.
      teacher_cache: the `teacher_cache.TeacherCache` of the training teacher.
      sequence_length: the training length (inputs are truncated alike).
      batch_size: encoding batch; must divide over the mesh's data axis.
    """
    super().__init__(sets, vocabulary, sequence_length, batch_size)
    self.teacher_cache = teacher_cache
    self.teacher_sentences = sorted({s for src, _ in self.sets.values() for s in src})

  def run(self, embed_fn: EmbedFn) -> dict[str, float]:
    """Metrics of the student `embed_fn` (tokens, mask, side) -> float32 [B, T]."""
    results, accuracies, mses, zeros = {}, [], [], []
    for name, (src, trg) in self.sets.items():
      # One student encoder for both languages: targets go through side a too
      # (no second compiled encoder).
      student_src, student_trg = self.embed(embed_fn, src, "a"), self.embed(embed_fn, trg, "a")
      teacher = self.teacher_cache.lookup(src)
      if student_src.shape != teacher.shape:
        raise ValueError(f"{name}: student embeddings {student_src.shape} vs teacher "
                         f"{teacher.shape}; evaluate a Distillation model with this teacher.")
      results[name] = _accuracy(student_src, student_trg)
      results[f"{name}.mse_source"] = float(np.mean(np.square(student_src - teacher)))
      results[f"{name}.mse_target"] = float(np.mean(np.square(student_trg - teacher)))
      accuracies.append(results[name])
      mses.append(results[f"{name}.mse_source"] + results[f"{name}.mse_target"])
      zeros.append(2.0 * float(np.mean(np.square(teacher))))
    results["mean"] = float(np.mean(accuracies)) if accuracies else 0.0
    results["chance"] = self.chance()
    results["mse"] = float(np.mean(mses)) if mses else 0.0
    results["mse_zero"] = float(np.mean(zeros)) if zeros else 0.0
    results["mse_percent_of_zero"] = 100.0 * results["mse"] / max(results["mse_zero"], 1e-12)
    return results


@gin.configurable
class QueryTowerValidation:
  """Held-out triplet loss and errors of the query tower against the frozen document tower.

  The documents (positives, negatives) are embedded once, when the evaluator
  is built, by the starting checkpoint: the frozen document tower is a
  bit-identical copy of it. Each `run` embeds the anchors with the query
  tower being tuned.
  """

  def __init__(self, *, triplets: str, data_dir: str, vocabulary, documents_model_dir: str,
               sequence_length: int, margin: float = 0.1, similarity: str = "cosine",
               batch_size: int = 64, max_triplets: int | None = None):
    """Args:
      triplets: the validation split of `triplet_tasks.triplets` ("stsb" or a
        directory with validation.tsv; tasks/sources/triplet_sets.py).
      data_dir: root of the shared data (for "stsb").
      vocabulary: the training vocabulary.
      documents_model_dir: the starting checkpoint (`train.init_params`).
      sequence_length: the training length (inputs are truncated alike).
      margin, similarity: the training loss's (QueryTower's).
      batch_size: encoding batch; must divide over the mesh's data axis.
      max_triplets: keep the first this many (quick runs).
    """
    from vmsst_tasks.sources import triplet_sets  # pylint: disable=import-outside-toplevel
    rows = triplet_sets.read_triplet_splits(triplets, data_dir)["validation"][0][:max_triplets]
    if not rows:
      raise ValueError(f"QueryTowerValidation: no validation triplets in {triplets!r}.")
    self.anchors = [a for a, _, _ in rows]
    self.vocabulary, self.sequence_length, self.batch_size = vocabulary, sequence_length, batch_size
    self.margin, self.similarity = margin, similarity
    documents = checkpoint_lib.CheckpointEncoder(
        restore.restore(documents_model_dir), batch_size=batch_size,
        max_seq_length=sequence_length)
    self.positives = documents.encode([p for _, p, _ in rows])
    self.negatives = documents.encode([n for _, _, n in rows])

  def run(self, embed_fn: EmbedFn) -> dict[str, float]:
    """{"loss", "errors" (by the training similarity), "error_rate" ×100, "cosine_errors",
    "euclidean_errors", "n"} of the query tower `embed_fn` (tokens, mask, side) -> [B, d]."""
    anchors = tokens_lib.embed_sentences(lambda tokens, mask: embed_fn(tokens, mask, side="a"),
                                         self.vocabulary, self.anchors,
                                         self.sequence_length, self.batch_size)
    loss, _ = query_tower.triplet_margin_loss(anchors, self.positives, self.negatives,
                                              margin=self.margin, similarity=self.similarity)
    counts = pair_ranking.triplet_errors(anchors, self.positives, self.negatives)
    errors = counts["cosine_errors" if self.similarity == "cosine" else "euclidean_errors"]
    return {"loss": float(loss), "errors": float(errors),
            "error_rate": 100.0 * errors / counts["n"], "cosine_errors": counts["cosine_errors"],
            "euclidean_errors": counts["euclidean_errors"], "n": counts["n"]}
