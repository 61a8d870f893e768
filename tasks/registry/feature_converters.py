"""The seqio FeatureConverter that turns pair-task examples into model batches.

Task features (tasks/registry/):
  tokens_a, tokens_b  int32 [<=L]  sentence ids ending in EOS (1)
  lang_a, lang_b      int32 []     language id (index in vmsst.base.languages.LANGUAGES)
Model features (one example; `.batch(B)` adds the leading B):
  tokens_a, tokens_b  int32 [L]    0-padded
  mask_a, mask_b      int32 [L]    1 on real tokens (EOS included), 0 on padding
  lang_a, lang_b      int32 []
  sem_side            int32 []     position parity in the stream: 0, 1, 0, 1, ...
Optional, passed through unchanged when the task has it (OPTIONAL_FEATURES):
  teacher             float32 [T]  a teacher's embedding of side a (distillation
                                   tasks); absent otherwise, so other tasks'
                                   batches are exactly as before
  entities            int32 [1+H]  linked entity then H hard negatives, -1 padding
                                   (entity-contrastive tasks, tasks/wiki_entities.py)
  tokens_negative     int32 [L]    a triplet's negative sentence, already 0-padded
                                   to L by its task (tasks/registry/triplets.py), so its
                                   static width is the training length

sem_side says which side of the pair feeds the semantic encoder; alternating it
by position means any even-sized batch (batched from the start of the stream)
uses side a for half its pairs and side b for the other half.
"""

from typing import Mapping

import seqio
import tensorflow as tf

FeatureSpec = seqio.FeatureConverter.FeatureSpec
# Features a task may add; each is passed through with its own static length.
OPTIONAL_FEATURES = {"teacher": FeatureSpec(dtype=tf.float32, rank=1),
                     "entities": FeatureSpec(dtype=tf.int32, rank=1),
                     "tokens_negative": FeatureSpec(dtype=tf.int32, rank=1)}


class PairFeatureConverter(seqio.FeatureConverter):
  """Pads each side of a pair to its fixed length; no packing (a pair is one example).

  Call it with `task_feature_lengths={"tokens_a": L, "tokens_b": L}`; the
  rank-0 lang_a/lang_b need no length (if given, it is ignored).
  """

  TASK_FEATURES = {
      "tokens_a": FeatureSpec(dtype=tf.int32),
      "tokens_b": FeatureSpec(dtype=tf.int32),
      "lang_a": FeatureSpec(dtype=tf.int32, rank=0),
      "lang_b": FeatureSpec(dtype=tf.int32, rank=0),
  }
  MODEL_FEATURES = {
      "tokens_a": FeatureSpec(dtype=tf.int32),
      "tokens_b": FeatureSpec(dtype=tf.int32),
      "mask_a": FeatureSpec(dtype=tf.int32),
      "mask_b": FeatureSpec(dtype=tf.int32),
      "lang_a": FeatureSpec(dtype=tf.int32, rank=0),
      "lang_b": FeatureSpec(dtype=tf.int32, rank=0),
      "sem_side": FeatureSpec(dtype=tf.int32, rank=0),
  }
  PACKING_FEATURE_DTYPES = {}

  def __init__(self, pack: bool = False, **kwargs) -> None:
    if pack:
      raise ValueError("PairFeatureConverter does not pack: pass pack=False.")
    super().__init__(pack=False, **kwargs)

  def __call__(self, ds: tf.data.Dataset,
               task_feature_lengths: Mapping[str, int]) -> tf.data.Dataset:
    """seqio's conversion and checks, after adding the scalar features' lengths.

    seqio requires task_feature_lengths to name every task feature, rank-0
    ones included; filling them in here keeps the caller's lengths to the two
    sequences. Their value (0) is never used: seqio skips length checks of
    rank-0 features. An OPTIONAL_FEATURES entry present in `ds` (e.g. the
    distillation tasks' `teacher`) is passed through, its length being its
    static width; a dataset without one converts exactly as before.
    """
    lengths = {k: 0 for k, spec in self.TASK_FEATURES.items() if spec.rank == 0}
    lengths.update({k: v for k, v in task_feature_lengths.items() if k not in lengths})
    optional = {k: spec for k, spec in OPTIONAL_FEATURES.items()
                if k in ds.element_spec and k not in self._passthrough_features}
    if optional:  # A converter that also passes them through, with their static widths.
      converter = type(self)(pack=False, apply_length_check=self._apply_length_check,
                             passthrough_features={**self._passthrough_features, **optional})
      return converter(ds, lengths)
    for k in self._passthrough_features:
      width = ds.element_spec[k].shape[0] if k in ds.element_spec else None
      if width is None:
        raise ValueError(f"feature {k!r} needs a static width (shape {ds.element_spec.get(k)}); "
                         "its preprocessor should gather from a fixed [N, T] matrix.")
      lengths.setdefault(k, width)
    return super().__call__(ds, lengths)

  def _convert_features(self, ds: tf.data.Dataset,
                        task_feature_lengths: Mapping[str, int]) -> tf.data.Dataset:
    """{"tokens_a": [5, 1], ...} at stream position i -> padded tokens, masks, sem_side=i%2."""
    lengths = {"tokens_a": task_feature_lengths["tokens_a"],
               "tokens_b": task_feature_lengths["tokens_b"]}

    @tf.autograph.experimental.do_not_convert  # no tensor-dependent Python control flow
    def convert(index: tf.Tensor, ex: Mapping[str, tf.Tensor]) -> dict[str, tf.Tensor]:
      out = {"lang_a": ex["lang_a"], "lang_b": ex["lang_b"],
             "sem_side": tf.cast(index % 2, tf.int32)}
      out.update({k: ex[k] for k in self._passthrough_features})
      for side in ("a", "b"):
        tokens = ex[f"tokens_{side}"][:lengths[f"tokens_{side}"]]
        tokens = tf.pad(tokens, [[0, lengths[f"tokens_{side}"] - tf.shape(tokens)[0]]])
        tokens = tf.ensure_shape(tokens, [lengths[f"tokens_{side}"]])
        out[f"tokens_{side}"] = tokens
        out[f"mask_{side}"] = seqio.non_padding_position(tokens)
      return out

    return ds.enumerate().map(convert, num_parallel_calls=tf.data.AUTOTUNE)

  def get_model_feature_lengths(self, task_feature_lengths: Mapping[str, int]) -> dict[str, int]:
    """Sequence features keep their task length; scalars get 0 (seqio needs a key)."""
    length_a, length_b = task_feature_lengths["tokens_a"], task_feature_lengths["tokens_b"]
    return {"tokens_a": length_a, "tokens_b": length_b, "mask_a": length_a, "mask_b": length_b,
            "lang_a": 0, "lang_b": 0, "sem_side": 0,
            **{k: task_feature_lengths[k] for k in self._passthrough_features}}
