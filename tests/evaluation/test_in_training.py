"""In-training evaluators: accuracy by line index; empty sets are skipped, not fatal; several merge."""

import numpy as np

from vmsst.base import sentencepiece_vocabulary
from vmsst.evaluation import in_training
from vmsst.evaluation.in_training import RetrievalEvaluator
from vmsst.evaluation.tatoeba import retrieval_accuracy


def test_accuracy_counts_the_aligned_nearest_neighbour_both_ways():
  src = np.array([[1.0, 0.0], [0.0, 1.0], [1.0, 0.1]])
  trg = np.array([[1.0, 0.0], [0.0, 1.0], [0.0, 1.0]])
  # src0 -> trg0 (right), src1 -> trg1 (tie with trg2: lower index, right), src2 -> trg0 (wrong);
  # trg0 -> src0 (right; src2 is less aligned), trg1 -> src1, trg2 -> src1 (wrong).
  forward, backward = retrieval_accuracy(src, trg), retrieval_accuracy(trg, src)
  assert np.isclose(forward, 2 / 3) and np.isclose(backward, 2 / 3)


def test_a_set_without_pairs_is_skipped_and_the_rest_evaluated(tiny_vocab_path):
  vocab = sentencepiece_vocabulary.get_vocabulary(str(tiny_vocab_path))
  sentences = ["ein Haus", "a dog runs", "zwei Katzen schlafen", "the river"]
  evaluator = RetrievalEvaluator({"empty": ([], []), "same": (sentences, sentences)}, vocab,
                                 sequence_length=8, batch_size=4)
  assert list(evaluator.sets) == ["same"]
  # Embeddings = the padded token ids: identical sentences are each other's nearest.
  sides = []
  results = evaluator.run(
      lambda tokens, mask, side: sides.append(side) or tokens.astype(np.float32))
  assert results["same"] == 100.0 and results["mean"] == 100.0
  assert results["chance"] == 25.0
  assert sides == ["a", "b"]  # one batch of sources (side a), one of targets (side b)


def test_sentences_cut_to_the_length_are_counted_per_set_and_logged(tiny_vocab_path, caplog):
  vocab = sentencepiece_vocabulary.get_vocabulary(str(tiny_vocab_path))
  short, long = ["ein Haus", "the river"], ["zwei Katzen schlafen unter dem alten Baum am Fluss",
                                            "a dog runs across the green field to the river"]
  assert all(len(vocab.encode(s)) <= 7 for s in short)
  assert all(len(vocab.encode(s)) > 7 for s in long)
  with caplog.at_level("INFO", logger="absl"):
    evaluator = RetrievalEvaluator({"short": (short, short), "mixed": (short, long)}, vocab,
                                   sequence_length=8, batch_size=4)
  assert evaluator.truncated == {"short": 0, "mixed": 2}
  assert "2 of 8 sentences have more than 7 pieces and are cut" in caplog.text
  assert "mixed 2" in caplog.text and "short 0" not in caplog.text


def test_targets_are_embedded_as_side_b(tiny_vocab_path):
  # A two-tower stand-in: side b's "tower" reverses the dimensions, so targets
  # embedded as side a would all be found (100%) and as side b are not.
  vocab = sentencepiece_vocabulary.get_vocabulary(str(tiny_vocab_path))
  sentences = ["ein Haus", "a dog runs", "zwei Katzen schlafen", "the river"]
  evaluator = RetrievalEvaluator({"same": (sentences, sentences)}, vocab, sequence_length=8,
                                 batch_size=4)
  towers = {"a": lambda x: x, "b": lambda x: x[:, ::-1]}
  results = evaluator.run(lambda tokens, mask, side: towers[side](tokens.astype(np.float32)))
  src = np.stack([vocab.encode(s)[:7] + [1] + [0] * (7 - len(vocab.encode(s)[:7]))
                  for s in sentences]).astype(np.float32)
  forward, backward = retrieval_accuracy(src, src[:, ::-1]), retrieval_accuracy(src[:, ::-1], src)
  assert results["same"] == 50.0 * (forward + backward) < 100.0


class _Constant:
  """An evaluator returning fixed metrics (the merge rule is what is tested)."""

  def __init__(self, **metrics):
    self.metrics = metrics

  def run(self, embed_fn):
    return dict(self.metrics)


def test_several_evaluators_merge_the_first_bare_and_the_rest_prefixed_by_class():
  merged = in_training.merge([_Constant(mean=1.0, loss=2.0), _Constant(mean=3.0)], None)
  assert merged == {"mean": 1.0, "loss": 2.0, "_Constant.mean": 3.0}
  assert in_training.merge(_Constant(mean=1.0), None) == {"mean": 1.0}
  assert in_training.merge(None, None) == {}
