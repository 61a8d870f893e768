"""Nested (Matryoshka) dimensions: the objective's loss at each prefix of the embedding.

Matryoshka representation learning (Kusupati et al. 2022, §3) trains one
embedding whose first k dimensions are themselves an embedding, for each k of
a ladder m_1 < … < m_n ≤ d, by summing the task loss at every prefix with
weights c_k:

  L_nested = Σ_k c_k · L(x[:, :k])

`NestedDims` is the one switch (`<Objective>.nested = @NestedDims()` and
`NestedDims.sizes`, `NestedDims.weights` in a run file); an objective with
`nested=None` (the default) computes exactly the code it computed before.
Every objective whose embedding is a vector takes it; what "the loss at a
prefix" means for each is in its module and in docs/papers/matryoshka.md:

- contrastive objectives (Contrastive, VMSST-Contrastive's contrastive term,
  momentum contrast, query-tower tuning, EASE): the same loss on the
  truncated vectors; a cosine loss renormalises each prefix itself, a dot
  product scores it as it is (as the full vector is scored), and a queue of
  unit keys is renormalised at each prefix (`unit_prefix`);
- distillation: the MSE between the prefix of f(x) and the prefix of the
  teacher's vector (the teacher's first k coordinates are the target of the
  student's first k);
- VMSST and BiTranslation: the translation terms decoded from the k-prefix
  of μ_sem with the other coordinates at their prior mean 0
  (`masked_prefix`); the ELBO once, on the full latents.

At k = d the prefix is the vector itself (not a copy), so `sizes=[d]` with
weight 1 gives the plain loss bit for bit.
"""

import dataclasses
from typing import Callable, Sequence

import jax
import jax.numpy as jnp

from vmsst.model import losses
from vmsst.base.gin_utils import gin

Array = jax.Array
Metrics = dict[str, Array]


@gin.configurable
@dataclasses.dataclass(frozen=True)
class NestedDims:
  """The nested sizes and their weights.

  Attributes:
    sizes: prefix widths, strictly increasing, each in 1..d (the
      embedding's width d; include d to keep training the full vector, as
      Kusupati et al. do).
    weights: c_k per size, > 0 (default: 1 each, the paper's choice).
  """
  sizes: Sequence[int] = ()
  weights: Sequence[float] | None = None

  def __post_init__(self):
    sizes = tuple(int(k) for k in self.sizes)
    weights = (1.0,) * len(sizes) if self.weights is None else tuple(map(float, self.weights))
    object.__setattr__(self, "sizes", sizes)
    object.__setattr__(self, "weights", weights)
    if not sizes:
      raise ValueError("NestedDims.sizes is empty: list the prefix widths, e.g. "
                       "NestedDims.sizes = [16, 32, 64, 128] (or unbind <Objective>.nested).")
    if any(b <= a for a, b in zip(sizes, sizes[1:])) or sizes[0] < 1:
      raise ValueError(f"NestedDims.sizes={list(sizes)} must be positive and strictly "
                       "increasing.")
    if len(weights) != len(sizes) or any(w <= 0 for w in weights):
      raise ValueError(f"NestedDims.weights={list(weights)} needs one weight > 0 per size "
                       f"({len(sizes)} sizes).")

  def check(self, dim: int, objective: str) -> "NestedDims":
    """Itself, after checking every size fits an embedding of width `dim`.

    Raises:
      ValueError: a size above `dim`, naming the objective's binding.
    """
    if self.sizes[-1] > dim:
      raise ValueError(f"NestedDims.sizes={list(self.sizes)} (via {objective}.nested): the "
                       f"embedding has {dim} dimensions; every size must be at most {dim}.")
    return self


def checked(nested: NestedDims | None, dim: int, objective: str) -> NestedDims | None:
  """`nested` checked against width `dim` (None stays None: no nesting)."""
  return None if nested is None else nested.check(dim, objective)


def prefix(x: Array, k: int) -> Array:
  """x[..., :k]; x itself when k is its width (so k = d changes nothing)."""
  return x if k == x.shape[-1] else x[..., :k]


def unit_prefix(x: Array, k: int) -> Array:
  """The k-prefix of unit rows renormalised to unit length (x itself at k = d)."""
  return x if k == x.shape[-1] else losses.l2_normalize(x[..., :k])


def masked_prefix(x: Array, k: int) -> Array:
  """x with coordinates k.. set to 0, the prior mean of μ_sem (x itself at k = d).

  The decoder reads a fixed-width latent, so a k-prefix enters it with the
  rest of the vector at what the prior N(0, I) expects when nothing is known.
  """
  if k == x.shape[-1]:
    return x
  return jnp.where(jnp.arange(x.shape[-1]) < k, x, jnp.zeros((), x.dtype))


def nested_loss(nested: NestedDims | None, dim: int,
                term: Callable[[int], tuple[Array, Metrics]]) -> tuple[Array, Metrics]:
  """Σ_k c_k · term(k) over the nested sizes, or term(dim) without nesting.

  Args:
    nested: the sizes and weights, or None (the plain loss: term(dim) alone).
    dim: the embedding's width d.
    term: k -> (loss [], metrics) of the objective at prefix width k.
  Returns:
    (loss [], metrics): the largest size's metrics under their plain names,
    and `nested_loss_<k>` for every size k.
  """
  if nested is None:
    return term(dim)
  total, metrics, per_size = None, {}, {}
  for k, weight in zip(nested.sizes, nested.weights):
    loss, metrics = term(k)
    total = weight * loss if total is None else total + weight * loss
    per_size[f"nested_loss_{k}"] = loss
  return total, metrics | per_size
