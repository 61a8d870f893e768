"""Optimizers and learning-rate schedules (the paper: Adafactor, inverse sqrt).

Gin binds these at the entrypoint; the model never sees them.
"""

import gin
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
def adafactor(*, learning_rate: optax.Schedule | float = gin.REQUIRED,
              clipping_threshold: float | None = 1.0,
              multiply_by_parameter_scale: bool = False,
              min_dim_size_to_factor: int = 128) -> optax.GradientTransformation:
  """Adafactor with an explicit learning rate (no relative step size).

  Args:
    learning_rate: schedule or constant.
    clipping_threshold: update-clipping threshold d of the Adafactor paper.
    multiply_by_parameter_scale: scale steps by parameter RMS (off: the paper
      drives the step size by the inverse-sqrt schedule alone).
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
          weight_decay: float = 0.0, b2: float = 0.98) -> optax.GradientTransformation:
  """AdamW, for objectives whose reference recipe uses it."""
  return optax.adamw(learning_rate, b2=b2, weight_decay=weight_decay)
