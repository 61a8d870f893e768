"""XLA:CPU tuning behind one switch, so the network code reads like the paper.

Three rewrites measured faster on XLA:CPU (docs/results/benchmarks/README.md) and of no use
elsewhere live here and nowhere else:
* `bernoulli`: dropout masks from `fast_random` (Threefry unrolled, the same
  bits as jax.random.bernoulli, 8-15x faster on CPU);
* `separate`: an optimization barrier after dropout, so XLA:CPU does not fuse
  the mask's bit generation into the consuming matmul and redo it per tile;
* `matmul`: a low-precision product whose backward pass materialises both
  transposes (`_physically_transposed`), because XLA:CPU's bf16 kernels take
  only row-major [M, K] x [K, N] and otherwise convert both sides to f32.

Every rewrite computes the same numbers as the plain form (the tests check
both settings against each other); only the speed differs. The switch is on
for the cpu backend and off otherwise; `set_enabled(True/False)` or the
environment variable VMSST_XLA_CPU_TUNING=1/0 overrides it (None restores
the default). It is read when a function is traced: a jitted function
already compiled keeps the setting it was traced with, so change it before
building the step (bench/accelerator.py does, to measure both ways).
"""

import contextlib
import os

import jax
import jax.numpy as jnp

from vmsst.model import fast_random

Array = jax.Array

_ENV = "VMSST_XLA_CPU_TUNING"
_override: bool | None = None


def enabled() -> bool:
  """Whether the CPU rewrites apply: the override, else the env var, else cpu backend."""
  if _override is not None:
    return _override
  env = os.environ.get(_ENV, "").strip()
  if env:
    if env not in ("0", "1"):
      raise ValueError(f"{_ENV}={env!r}: set it to 1 (tuning on) or 0 (off), or unset it.")
    return env == "1"
  return jax.default_backend() == "cpu"


def set_enabled(value: bool | None) -> None:
  """Forces the switch on (True) or off (False); None returns to the default."""
  global _override  # pylint: disable=global-statement
  _override = value


@contextlib.contextmanager
def tuning(value: bool | None):
  """`set_enabled(value)` inside the block, the previous setting after it."""
  previous = _override
  set_enabled(value)
  try:
    yield
  finally:
    set_enabled(previous)


def bernoulli(key: Array, p: float, shape: tuple[int, ...]) -> Array:
  """`jax.random.bernoulli(key, p, shape)`, from the unrolled cipher when tuned."""
  if enabled():
    return fast_random.bernoulli(key, p, shape)
  return jax.random.bernoulli(key, p, shape)


def separate(x: Array) -> Array:
  """x, kept a separate pass from its consumers when tuned (an optimization barrier)."""
  return jax.lax.optimization_barrier(x) if enabled() else x


def matmul(x: Array, kernel: Array) -> Array:
  """float32 [M, N] = x [M, K] · kernel (f32) [K, N], the kernel cast to a low-precision x's dtype."""
  if x.dtype == jnp.float32:
    return jnp.dot(x, kernel)
  if enabled():
    return _row_major_dot(x, kernel)
  return jnp.dot(x, kernel.astype(x.dtype), preferred_element_type=jnp.float32)


def _physically_transposed(a: Array) -> Array:
  """a.T as a row-major copy.

  XLA folds a transpose feeding a dot into the dot's dimension numbers or
  into a column-major layout; on CPU its bf16 kernels (YNNPACK) take only
  row-major [M, K] x [K, N] and otherwise convert both sides to f32 first
  (measured: 130-150 instead of 230-320 GFLOP/s at [4096, 512] x [512, 2048]).
  The barrier around a reshape of the transpose makes XLA materialise it.
  """
  t = a.T
  if t.shape[1] % 2:
    return t
  return jax.lax.optimization_barrier(t.reshape(t.shape[0], -1, 2)).reshape(t.shape)


@jax.custom_vjp
def _row_major_dot(x: Array, kernel: Array) -> Array:
  """`matmul` whose gradient products are row-major too.

  Plain autodiff would differentiate into x-gradient g·Wᵀ and kernel-gradient
  xᵀ·g; here both transposes are materialised, and the kernel gradient comes
  back float32 straight from the f32 accumulator.
  """
  return jnp.dot(x, kernel.astype(x.dtype), preferred_element_type=jnp.float32)


def _row_major_dot_fwd(x, kernel):
  return _row_major_dot(x, kernel), (x, kernel)


def _row_major_dot_bwd(residuals, g):
  x, kernel = residuals
  g = g.astype(x.dtype)
  dx = jnp.dot(g, _physically_transposed(kernel.astype(x.dtype)),
               preferred_element_type=jnp.float32)
  dkernel = jnp.dot(_physically_transposed(x), g, preferred_element_type=jnp.float32)
  return dx.astype(x.dtype), dkernel


_row_major_dot.defvjp(_row_major_dot_fwd, _row_major_dot_bwd)
