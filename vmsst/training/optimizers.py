"""Optimizers and learning-rate schedules (the paper: Adafactor, inverse sqrt).

Gin binds these at the entrypoint; the model never sees them.
"""

from vmsst.base.gin_utils import gin
import jax
import jax.numpy as jnp
import optax


@gin.configurable
def inverse_sqrt_schedule(*, peak_learning_rate: float = 1e-3,
                          warmup_steps: int = 4000) -> optax.Schedule:
  """Linear warm-up to the peak, then peak · sqrt(warmup / step).

  step 0 gets peak / warmup (not 0) so the first update is not wasted.
  """
  warmup = float(max(warmup_steps, 1))

  def schedule(step):
    step = jnp.maximum(jnp.asarray(step, jnp.float32), 1.0)
    return peak_learning_rate * jnp.minimum(step / warmup, jnp.sqrt(warmup / step))

  return schedule


@gin.configurable
def warmup_cosine_schedule(*, peak_learning_rate: float = gin.REQUIRED,
                           warmup_steps: int = gin.REQUIRED,
                           total_steps: int = gin.REQUIRED) -> optax.Schedule:
  """Linear warm-up from 0 to the peak, then cosine decay to 0 at `total_steps`.

  The shape of HuggingFace's get_cosine_schedule_with_warmup (the dual
  momentum contrast recipe: AdamW, warm-up, "cosine decay").
  """
  return optax.warmup_cosine_decay_schedule(0.0, peak_learning_rate, warmup_steps,
                                            max(total_steps, warmup_steps + 1))


@gin.configurable
def warmup_linear_schedule(*, peak_learning_rate: float = gin.REQUIRED,
                           warmup_steps: int = gin.REQUIRED,
                           total_steps: int = gin.REQUIRED) -> optax.Schedule:
  """Linear warm-up from 0 to the peak, then linear decay to 0 at `total_steps`.

  sentence-transformers' default "WarmupLinear" (HuggingFace's
  get_linear_schedule_with_warmup): the multilingual distillation recipe.
  """
  warmup = max(warmup_steps, 1)
  return optax.join_schedules(
      [optax.linear_schedule(0.0, peak_learning_rate, warmup),
       optax.linear_schedule(peak_learning_rate, 0.0, max(total_steps - warmup, 1))], [warmup])


@gin.configurable
def adafactor(*, learning_rate: optax.Schedule | float = gin.REQUIRED,
              clipping_threshold: float | None = 1.0,
              multiply_by_parameter_scale: bool = False,
              min_dim_size_to_factor: int = 128) -> optax.GradientTransformation:
  """Adafactor with an explicit learning rate (no relative step size).

  Args:
    learning_rate: schedule or constant.
    clipping_threshold: update-clipping threshold d of the Adafactor paper.
    multiply_by_parameter_scale: multiply each tensor's step by its RMS (at
      least 1e-3), Shazeer & Stern 2018's relative step (Alg. 4), on by default
      in optax and T5X. Off here unless bound, so the learning rate is the step
      size; the VMSST paper runs turn it on (gin/runs/base_paper.gin): at
      initialisation a 1024-wide matrix has RMS 0.02-0.03, so the same rate
      moves it 30-60x less (docs/results/adafactor_parameter_scale/).
    min_dim_size_to_factor: smaller matrices keep a full second moment.
  """
  return optax.adafactor(
      learning_rate=learning_rate,
      clipping_threshold=clipping_threshold,
      multiply_by_parameter_scale=multiply_by_parameter_scale,
      min_dim_size_to_factor=min_dim_size_to_factor,
  )


@gin.configurable
def adamw(*, learning_rate: optax.Schedule | float = gin.REQUIRED,
          weight_decay: float = 0.0, b1: float = 0.9, b2: float = 0.98, eps: float = 1e-8,
          clip_global_norm: float | None = None) -> optax.GradientTransformation:
  """AdamW, for objectives whose reference recipe uses it.

  Args:
    weight_decay: decoupled, multiplied by the learning rate (as PyTorch's AdamW).
    clip_global_norm: if set, gradients are first scaled to at most this
      global L2 norm (PyTorch's clip_grad_norm_).
  """
  optimizer = optax.adamw(learning_rate, b1=b1, b2=b2, eps=eps, weight_decay=weight_decay)
  if clip_global_norm is None:
    return optimizer
  return optax.chain(optax.clip_by_global_norm(clip_global_norm), optimizer)


def compensated_summation() -> optax.GradientTransformation:
  """Kahan-compensated parameter updates: tiny steps accumulate instead of vanishing.

  In float32, p + u == p whenever |u| < ulp(p) / 2 (|u| < 6e-8 for |p| = 1):
  an update at learning rate 1e-8 is lost entirely, step after step. This
  transformation goes last in a chain and keeps, per parameter, the part of
  the requested updates not yet applied (c, float32 like params). Each step
  it asks for y = u + c, emits the update the parameter dtype can actually
  represent, d = fl(p + y) − p (exact by Sterbenz's lemma when |y| ≪ |p|, so
  optax.apply_updates lands on fl(p + y) exactly), and carries
  c ← y − ((p + d) − p). The sum of the emitted updates thus tracks the sum
  of the requested ones to within one rounding of p, whatever the step size
  (tests/training/test_compensated_summation.py compares it with float64). Costs one
  float32 buffer per trainable parameter; needs `params` in `update`.
  """

  def init(params):
    return jax.tree.map(lambda p: jnp.zeros(jnp.shape(p), jnp.float32), params)

  def update(updates, state, params=None):
    if params is None:
      raise ValueError("compensated_summation needs the parameters: call "
                       "optimizer.update(grads, state, params) (vmsst.training.trainer does).")

    def one(u, c, p):
      y = u.astype(jnp.float32) + c
      wanted = (p.astype(jnp.float32) + y).astype(p.dtype)  # the nearest representable p
      emitted = wanted.astype(jnp.float32) - p.astype(jnp.float32)
      applied = (p + emitted).astype(p.dtype).astype(jnp.float32) - p.astype(jnp.float32)
      return emitted.astype(u.dtype), y - applied

    leaves, treedef = jax.tree.flatten(updates)  # (masked-out leaves have none)
    pairs = [one(u, c, p) for u, c, p in zip(leaves, treedef.flatten_up_to(state),
                                             treedef.flatten_up_to(params))]
    return (treedef.unflatten([e for e, _ in pairs]),
            treedef.unflatten([c for _, c in pairs]))

  return optax.GradientTransformation(init, update)


@gin.configurable
def compensated(*, optimizer: optax.GradientTransformation = gin.REQUIRED
                ) -> optax.GradientTransformation:
  """`optimizer` followed by `compensated_summation` (for learning rates ~1e-8).

  Query-tower tuning (vmsst/objectives/query_tower.py) moves a trained
  model by tiny steps; without compensation float32 parameters would not
  move at all (see `compensated_summation`).
  """
  return optax.chain(optimizer, compensated_summation())
