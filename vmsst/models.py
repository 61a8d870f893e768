"""T5X-style model base: pure functions of (params, batch) over one network.

An objective (vmsst/objectives/*.py) subclasses `EmbeddingModel` and defines
`loss_fn` plus which network paths its parameters need (`init_paths`). It owns
no optimizer, vocabulary or loop: the trainer wires it to jit and sharding.

Batch contract (produced by vmsst.feature_converters.PairFeatureConverter):
  tokens_a, tokens_b  int32 [B, L]  sentence ids ending in EOS, 0-padded
  mask_a, mask_b      int32 [B, L]  1 on real tokens
  lang_a, lang_b      int32 [B]     language id (index in vmsst.languages.LANGUAGES)
  sem_side            int32 [B]     0: side a feeds q(z_sem) in the ELBO, 1: b
Optional (only in batches of tasks that carry it; see `batch_shapes`):
  teacher             float32 [B, T]  a teacher's embedding of side a (distillation)
  entities            int32 [B, 1+H]  linked entity then H hard negatives, −1 padding
                                      (entity-contrastive; tasks/wiki_entities.py)
  tokens_negative     int32 [B, L]    a negative for anchor a / positive b, 0-padded
                                      (query-tower triplets, tasks/triplets.py); its
                                      mask is tokens_negative != 0
"""

from typing import Any, Callable, Mapping

import jax
import jax.numpy as jnp

from vmsst import losses
from vmsst.config import NetworkConfig
from vmsst.network import VMSSTNetwork

Array = jax.Array
Batch = Mapping[str, Array]
Metrics = dict[str, Array]

BATCH_DTYPES = {
    "tokens_a": jnp.int32, "tokens_b": jnp.int32, "mask_a": jnp.int32,
    "mask_b": jnp.int32, "lang_a": jnp.int32, "lang_b": jnp.int32, "sem_side": jnp.int32,
    "teacher": jnp.float32,
    "entities": jnp.int32,
    "tokens_negative": jnp.int32,
}
OPTIONAL_FEATURES = ("teacher", "entities", "tokens_negative")


def batch_shapes(batch_size: int, length: int, teacher_dim: int = 0,
                 entity_slots: int = 0) -> dict[str, tuple[int, ...]]:
  """Shapes of a model batch of `batch_size` pairs of `length` tokens.

  Args:
    batch_size: pairs per batch (B).
    length: tokens per sentence (L).
    teacher_dim: width T of the `teacher` feature [B, T]; 0 (the default)
      leaves it out (see `EmbeddingModel.input_shapes`).
    entity_slots: width 1 + H of the `entities` feature [B, 1 + H]
      (entity-contrastive); 0 (the default) leaves it out.
  """
  shapes = {k: (batch_size, length) if k.startswith(("tokens", "mask")) else (batch_size,)
            for k in BATCH_DTYPES if k not in OPTIONAL_FEATURES}
  if teacher_dim:
    shapes["teacher"] = (batch_size, teacher_dim)
  if entity_slots:
    shapes["entities"] = (batch_size, entity_slots)
  return shapes


def dummy_batch(shapes: Mapping[str, tuple[int, ...]]) -> dict[str, Array]:
  """A zero batch with the model's dtypes; ones for masks so no row is empty."""
  return {k: (jnp.ones if k.startswith("mask") else jnp.zeros)(shape, BATCH_DTYPES[k])
          for k, shape in shapes.items()}


def init_all_paths(module: VMSSTNetwork, batch: Batch) -> Array:
  """Creates semantic, language and decoder parameters (VMSST family)."""
  return module(batch)


def init_semantic_path(module: VMSSTNetwork, batch: Batch) -> Array:
  """Creates the embedding table and the semantic encoder only."""
  return module.encode_semantic(batch["tokens_a"], batch["mask_a"])[0]


def init_translation_paths(module: VMSSTNetwork, batch: Batch) -> Array:
  """Semantic encoder and a decoder fed μ_sem alone (no language encoder)."""
  mu, _ = module.encode_semantic(batch["tokens_a"], batch["mask_a"])
  return module.decode(batch["tokens_a"], batch["mask_a"], batch["lang_a"], mu)


class EmbeddingModel:
  """Base class: wraps the flax network; subclasses define `loss_fn`.

  Attributes:
    network_config: the NetworkConfig the module is built from.
    module: the VMSSTNetwork (flax) module.
  """

  init_paths: Callable[[VMSSTNetwork, Batch], Array] = staticmethod(init_all_paths)

  def __init__(self, network_config: NetworkConfig):
    self.network_config = network_config
    self.module = VMSSTNetwork(network_config)

  def input_shapes(self, batch_size: int, length: int) -> dict[str, tuple[int, ...]]:
    """The batch this objective trains on (`batch_shapes`; overridden to add features)."""
    return batch_shapes(batch_size, length)

  def get_initial_variables(self, rng: Array,
                            input_shapes: Mapping[str, tuple[int, ...]]) -> dict[str, Any]:
    """Initial variables (logically partitioned boxes) for a batch of `input_shapes`.

    Args:
      rng: PRNG key for parameter init.
      input_shapes: key -> shape, e.g. `batch_shapes(B, L)`.
    Returns:
      {"params": ...} whose leaves are nn.LogicallyPartitioned boxes.
    """
    return self.module.init({"params": rng, "dropout": rng}, dummy_batch(input_shapes),
                            method=type(self).init_paths)

  def apply(self, params, *args, method: Callable, rng: Array | None = None) -> Any:
    """Runs a network method; dropout is active iff an rng is given."""
    rngs = {"dropout": rng} if rng is not None else {}
    return self.module.apply({"params": params}, *args, method=method, rngs=rngs)

  def semantic(self, params, tokens: Array, mask: Array,
               rng: Array | None = None) -> tuple[Array, dict[str, Array]]:
    """(μ_sem [B, d], aux) — the encoder path every objective shares."""
    return self.apply(params, tokens, mask, rng is None, method=VMSSTNetwork.encode_semantic,
                      rng=rng)

  def encode(self, params, tokens: Array, mask: Array) -> Array:
    """Sentence embeddings μ_sem, float32 [B, d] (not normalised)."""
    return self.semantic(params, tokens, mask)[0]

  # The pair sides with an encoder of their own: ("a",) is one encoder for
  # every sentence; ("a", "b") a tower per side (MomentumContrast with
  # separate towers), whose side-b languages must be embedded by tower b.
  sides: tuple[str, ...] = ("a",)

  def encode_side(self, params, tokens: Array, mask: Array, side: str = "a") -> Array:
    """`encode` for sentences of pair side `side` (retrieval, inference, export).

    One encoder here, so `side` changes nothing; a two-tower objective
    overrides this to pick the side's tower.
    """
    del side
    return self.encode(params, tokens, mask)

  def score_batch(self, params, batch: Batch) -> Array:
    """Cosine similarity of each (a, b) pair, float32 [B]."""
    a = self.encode(params, batch["tokens_a"], batch["mask_a"])
    b = self.encode(params, batch["tokens_b"], batch["mask_b"])
    return jnp.sum(losses.l2_normalize(a) * losses.l2_normalize(b), axis=-1)

  def loss_fn(self, params, batch: Batch, dropout_rng: Array,
              step: Array | int = 0) -> tuple[Array, Metrics]:
    """Scalar loss and a dict of scalar metrics (batch means)."""
    raise NotImplementedError

  # Model state: non-trainable arrays an objective carries from step to step
  # (momentum encoders, queues). It lives in TrainState.model_state, is
  # checkpointed with it, and is sharded by the logical names of its boxed
  # leaves (bare leaves are replicated). The trainer calls the three methods
  # below; the defaults make an objective stateless, so `loss_fn` is all a
  # stateless objective writes.

  def init_model_state(self, params, rng: Array) -> Any:
    """Initial model state for `params` (boxed at init); {} when stateless."""
    del params, rng
    return {}

  def loss_fn_with_state(self, params, model_state, batch: Batch, dropout_rng: Array,
                         step: Array | int = 0) -> tuple[Array, tuple[Metrics, Any]]:
    """(loss, (metrics, aux)); aux is handed to `update_model_state`.

    Differentiated in `params` only: the trainer never takes a gradient in
    `model_state`. The default ignores the state and calls `loss_fn`.
    """
    del model_state
    loss, metrics = self.loss_fn(params, batch, dropout_rng, step)
    return loss, (metrics, {})

  def update_model_state(self, model_state, params, aux) -> Any:
    """The state after an optimizer step, from the updated `params` and `aux`."""
    del params, aux
    return model_state


def both_sides(batch: Batch) -> tuple[Array, Array, Array]:
  """Stacks sides a and b along the batch: tokens, mask, languages [2B, ...]."""
  cat = lambda k: jnp.concatenate([batch[f"{k}_a"], batch[f"{k}_b"]], axis=0)
  return cat("tokens"), cat("mask"), cat("lang")


def split_halves(x: Array) -> tuple[Array, Array]:
  half = x.shape[0] // 2
  return x[:half], x[half:]
