"""T5X-style model base: pure functions of (params, batch) over one network.

An objective (vmsst/objectives/*.py) subclasses `EmbeddingModel` and defines
`loss_fn` plus which network paths its parameters need (`init_paths`). It owns
no optimizer, vocabulary or loop: the trainer wires it to jit and sharding.

Batch contract (produced by vmsst_tasks.registry.feature_converters.PairFeatureConverter):
  tokens_a, tokens_b  int32 [B, L]  sentence ids ending in EOS, 0-padded
  mask_a, mask_b      int32 [B, L]  1 on real tokens
  lang_a, lang_b      int32 [B]     language id (index in vmsst.base.languages.LANGUAGES)
  sem_side            int32 [B]     0: side a feeds q(z_sem) in the ELBO, 1: b
Anything more (a teacher's vectors, linked entities, a triplet's negative)
is declared by the objective that needs it, in its `extra_features`.

Randomness keyed by the pair: an objective whose loss is a mean over pairs
(`loss_is_mean_over_pairs`) draws every dropout mask and noise sample of a
pair from that pair's own key (`pair_keys`), never from the batch's, so a
sentence's masks do not depend on which rows share its batch. The trainer can
then split a batch into microbatches (`train.microbatches`) and get the
update of the whole batch. Its `loss_fn` takes the step's one key (split here
into the batch's pair keys) or the pair keys themselves (a microbatch's).
"""

import abc
from typing import Any, Callable, Mapping

import flax.linen as nn
import jax
import jax.numpy as jnp

from vmsst.model import layers
from vmsst.model import losses
from vmsst.model.config import NetworkConfig
from vmsst.model.network import VMSSTNetwork

Array = jax.Array
Batch = Mapping[str, Array]
Metrics = dict[str, Array]

PAIR_DTYPES = {
    "tokens_a": jnp.int32, "tokens_b": jnp.int32, "mask_a": jnp.int32,
    "mask_b": jnp.int32, "lang_a": jnp.int32, "lang_b": jnp.int32, "sem_side": jnp.int32,
}


def batch_shapes(batch_size: int, length: int) -> dict[str, tuple[int, ...]]:
  """Shapes of the pair batch every objective trains on: `batch_size` pairs of `length` tokens.

  An objective that needs more declares it (`EmbeddingModel.extra_features`).
  """
  return {k: (batch_size, length) if k.startswith(("tokens", "mask")) else (batch_size,)
          for k in PAIR_DTYPES}


def dummy_batch(shapes: Mapping[str, tuple[int, ...]],
                dtypes: Mapping[str, Any] = PAIR_DTYPES) -> dict[str, Array]:
  """A zero batch with the model's dtypes; ones for masks so no row is empty."""
  return {k: (jnp.ones if k.startswith("mask") else jnp.zeros)(shape, dtypes[k])
          for k, shape in shapes.items()}


def is_one_key(rng: Array) -> bool:
  """A single PRNG key (typed, shape []; or raw uint32 [2]), not one per row."""
  if jnp.issubdtype(rng.dtype, jax.dtypes.prng_key):
    return rng.ndim == 0
  return rng.shape == (2,)


def pair_keys(rng: Array | None, batch_size: int) -> Array | None:
  """One key per pair, [batch_size] (raw keys: [batch_size, 2]); None stays None.

  Args:
    rng: the step's one key, split here into `batch_size` keys; or already
      one key per pair (a microbatch's, split by the trainer from the whole
      batch's), returned as it is.
  Raises:
    ValueError: per-pair keys for another number of pairs.
  """
  if rng is None:
    return None
  if is_one_key(rng):
    return jax.random.split(rng, batch_size)
  if rng.shape[0] != batch_size:
    raise ValueError(f"{rng.shape[0]} pair keys for a batch of {batch_size} pairs.")
  return rng


def stream_keys(keys: Array | None, *streams: int) -> Array | None:
  """Each row's key folded with `streams` in turn: an independent stream per use."""
  if keys is None:
    return None
  for stream in streams:
    keys = jax.vmap(jax.random.fold_in, in_axes=(0, None))(keys, stream)
  return keys


def side_keys(keys: Array | None) -> Array | None:
  """Row keys of a `both_sides` stack [2B] from pair keys [B]: side a's row of
  pair i fold_in(keys[i], 0), side b's fold_in(keys[i], 1)."""
  if keys is None:
    return None
  return jnp.concatenate([stream_keys(keys, 0), stream_keys(keys, 1)], axis=0)


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


class EmbeddingModel(abc.ABC):
  """Abstract base: wraps the flax network; an objective must define `loss_fn`.

  Attributes:
    network_config: the NetworkConfig the module is built from.
    module: the VMSSTNetwork (flax) module.
  """

  init_paths: Callable[[VMSSTNetwork, Batch], Array] = staticmethod(init_all_paths)

  # True when the loss is a mean over pairs of per-pair terms and every random
  # draw is keyed by the pair (module doc): the mean of microbatches' gradients
  # is then the batch's, so `train.microbatches` may split the batch. False for
  # in-batch negatives (a pair's loss depends on the rest of its batch).
  loss_is_mean_over_pairs: bool = False

  def __init__(self, network_config: NetworkConfig):
    self.network_config = network_config
    self.module = VMSSTNetwork(network_config)

  def extra_features(self, batch_size: int, length: int) -> dict[str, jax.ShapeDtypeStruct]:
    """Features beyond the pair batch this objective trains on (none here).

    Each objective names its own (distillation's `teacher`, the entity
    objective's `entities`, query-tower triplets' `tokens_negative`), so the
    batch contract here never lists another objective's features.
    """
    del batch_size, length
    return {}

  def input_shapes(self, batch_size: int, length: int) -> dict[str, tuple[int, ...]]:
    """The batch this objective trains on: the pair batch plus `extra_features`."""
    extra = self.extra_features(batch_size, length)
    return {**batch_shapes(batch_size, length), **{k: v.shape for k, v in extra.items()}}

  def feature_dtypes(self) -> dict[str, Any]:
    """dtype of every feature of `input_shapes` (the trainer casts host batches to them)."""
    return {**PAIR_DTYPES, **{k: v.dtype for k, v in self.extra_features(1, 1).items()}}

  def extra_modules(self) -> dict[str, tuple[nn.Module, tuple[Any, ...]]]:
    """Parameters beyond the network, each a flax module: name -> (module, init inputs).

    `get_initial_variables` initialises each into params[name] (a key apart
    from the network's) and the objective applies it to params[name]: the
    distillation head, the entity table, the NLI head. None here.
    """
    return {}

  def init_network(self, rng: Array, input_shapes: Mapping[str, tuple[int, ...]]) -> Any:
    """The network's parameters (boxed) through `init_paths`; a two-tower
    objective returns one such tree per tower."""
    return self.module.init({"params": rng, "dropout": rng},
                            dummy_batch(input_shapes, self.feature_dtypes()),
                            method=type(self).init_paths)["params"]

  def get_initial_variables(self, rng: Array,
                            input_shapes: Mapping[str, tuple[int, ...]]) -> dict[str, Any]:
    """Initial variables (logically partitioned boxes) for a batch of `input_shapes`.

    The network's parameters (`init_network`), then each of `extra_modules`.
    With extras the key splits in two (network, extras), and several extras
    split the second again, in declaration order.

    Args:
      rng: PRNG key for parameter init.
      input_shapes: key -> shape, e.g. `batch_shapes(B, L)`.
    Returns:
      {"params": ...} whose leaves are nn.LogicallyPartitioned boxes.
    """
    extras = self.extra_modules()
    if not extras:
      return {"params": self.init_network(rng, input_shapes)}
    network_rng, extras_rng = jax.random.split(rng)
    params = dict(self.init_network(network_rng, input_shapes))
    keys = [extras_rng] if len(extras) == 1 else list(jax.random.split(extras_rng, len(extras)))
    for key, (name, (module, inputs)) in zip(keys, extras.items()):
      if name in params:
        raise ValueError(f"extra module {name!r} would replace the network's {name!r} "
                         "parameters; name it apart.")
      params[name] = module.init(key, *inputs)["params"]
    return {"params": params}

  def apply(self, params, *args, method: Callable, rng: Array | None = None) -> Any:
    """Runs a network method; dropout is active iff an rng is given."""
    rngs = {"dropout": rng} if rng is not None else {}
    return self.module.apply({"params": params}, *args, method=method, rngs=rngs)

  def semantic(self, params, tokens: Array, mask: Array,
               rng: Array | None = None) -> tuple[Array, dict[str, Array]]:
    """(μ_sem [B, d], aux) — the encoder path every objective shares."""
    return self.apply(params, tokens, mask, rng is None, method=VMSSTNetwork.encode_semantic,
                      rng=rng)

  def apply_rows(self, params, *args, method: Callable, row_keys: Array | None) -> Any:
    """`apply` with row i's dropout masks drawn from row_keys[i] (layers.row_dropout_keys).

    The apply key is fixed, so the masks depend on the row keys only; None
    runs without dropout. `args` carry the method's own `deterministic`.
    """
    if row_keys is None:
      return self.apply(params, *args, method=method)
    with layers.row_dropout_keys(row_keys):
      return self.apply(params, *args, method=method, rng=jax.random.key(0))

  def semantic_rows(self, params, tokens: Array, mask: Array,
                    row_keys: Array | None) -> tuple[Array, dict[str, Array]]:
    """`semantic` with a dropout key per row, row_keys [B] (None: no dropout)."""
    return self.apply_rows(params, tokens, mask, row_keys is None,
                           method=VMSSTNetwork.encode_semantic, row_keys=row_keys)

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

  @abc.abstractmethod
  def loss_fn(self, params, batch: Batch, dropout_rng: Array,
              step: Array | int = 0) -> tuple[Array, Metrics]:
    """Scalar loss and a dict of scalar metrics (batch means)."""

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
