"""Train state, the pure train step, and its compilation for a mesh.

Step math is module-level and pure; `Trainer` only closes the model and the
optimizer over it and hands it to jax.jit with NamedShardings, so every
compiled signature is (state, batch, rng) and the state is donated.

An objective with state between steps (momentum encoders, queues) keeps it in
`TrainState.model_state` through the three `EmbeddingModel` hooks
`init_model_state`, `loss_fn_with_state` and `update_model_state`; for every
other objective it is an empty dict and the step is unchanged.

Gradient accumulation (`microbatches` = N, gin `train.microbatches`): one
optimizer update of the batch from N microbatches run one after the other
under jax.lax.scan, the float32 gradients summed and divided by N. Only for
an objective whose loss is a mean over pairs with every draw keyed by the pair
(`EmbeddingModel.loss_is_mean_over_pairs`): the mean of the microbatches'
gradients is then the batch's, and the update that of N = 1 up to the order
of float sums. Objectives with in-batch negatives are refused (their
negatives would shrink to a microbatch's; `Contrastive.gradient_cache_chunk`
keeps the whole batch's in a chunk's memory).
"""

import functools
from typing import Any, Mapping

import flax
import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax
from jax.sharding import Mesh

from vmsst.model import models
from vmsst.model import partitioning

Array = jax.Array


@flax.struct.dataclass
class TrainState:
  """Everything a checkpoint must hold to resume exactly.

  Attributes:
    step: int32 [], optimizer steps taken.
    params: trainable parameters (the optimizer's).
    opt_state: the optimizer's state.
    model_state: the objective's non-trainable state (no gradient, no
      optimizer), {} unless it defines `init_model_state`.
  """

  step: Array
  params: Any
  opt_state: Any
  model_state: Any = flax.struct.field(default_factory=dict)


def init_state(model: models.EmbeddingModel, optimizer: optax.GradientTransformation,
               rng: Array, input_shapes: Mapping[str, tuple[int, ...]]) -> TrainState:
  """Fresh state; params (and model state) stay boxed so shardings can be read off them."""
  params = model.get_initial_variables(rng, input_shapes)["params"]
  return TrainState(step=jnp.zeros((), jnp.int32), params=params,
                    opt_state=optimizer.init(nn.unbox(params)),
                    model_state=model.init_model_state(params, model_state_rng(rng)))


def model_state_rng(rng: Array) -> Array:
  """The key of `init_model_state`: apart from the parameters' `rng`."""
  return jax.random.fold_in(rng, 1)


def check_microbatches(model: models.EmbeddingModel, batch_size: int, microbatches: int) -> None:
  """Raises ValueError unless `microbatches` can split this model's batch of `batch_size`."""
  if microbatches < 1:
    raise ValueError(f"train.microbatches = {microbatches}: give 1 (no accumulation) or more.")
  if microbatches == 1:
    return
  if not model.loss_is_mean_over_pairs:
    raise ValueError(
        f"train.microbatches = {microbatches}: {type(model).__name__} contrasts each pair with "
        "the rest of its batch, so a microbatch would train on fewer negatives; use gradient "
        "caching instead (Contrastive.gradient_cache_chunk: the whole batch's negatives in a "
        "chunk's memory).")
  if batch_size % microbatches:
    raise ValueError(f"train.microbatches = {microbatches} does not divide the batch size "
                     f"{batch_size}; give a divisor of it.")


def microbatch_split(x: Array, microbatches: int) -> Array:
  """[B, ...] -> [N, B/N, ...]: microbatch j holds rows j, j + N, j + 2N, ...

  Strided, not contiguous: the batch is sharded over "data" in contiguous
  blocks, so each microbatch takes B/N/data rows from every device's block and
  stays sharded (as Contrastive.chunked_embeddings' chunks).
  """
  return jnp.swapaxes(x.reshape((x.shape[0] // microbatches, microbatches) + x.shape[1:]), 0, 1)


def accumulated_gradients(model: models.EmbeddingModel, state: TrainState, batch: models.Batch,
                          step_rng: Array, microbatches: int):
  """(loss, metrics, aux, gradients) of `batch` from `microbatches` microbatches.

  Microbatch j gets the rows `microbatch_split` gives it and their pair keys
  (models.pair_keys of the step's key for the whole batch, split alike), so
  every pair draws what it draws in one pass. Gradients are summed in float32
  and divided by N (each microbatch's loss is a mean over its pairs); the loss
  and every metric are means over the microbatches (a batch-wide ratio or count
  is then the mean of the microbatches'); aux is stacked [N, ...].
  """
  batch_size = next(iter(batch.values())).shape[0]
  check_microbatches(model, batch_size, microbatches)
  split = functools.partial(microbatch_split, microbatches=microbatches)
  inputs = jax.tree.map(split, dict(batch)), split(models.pair_keys(step_rng, batch_size))
  grad_fn = jax.value_and_grad(model.loss_fn_with_state, has_aux=True)  # in params only

  def accumulate(total, microbatch):
    rows, keys = microbatch
    (loss, (metrics, aux)), grads = grad_fn(state.params, state.model_state, rows, keys,
                                            state.step)
    total = jax.tree.map(lambda t, g: t + g.astype(jnp.float32), total, grads)
    return total, (loss, metrics, aux)

  zeros = jax.tree.map(lambda p: jnp.zeros(p.shape, jnp.float32), state.params)
  total, (loss, metrics, aux) = jax.lax.scan(accumulate, zeros, inputs)
  grads = jax.tree.map(lambda t, p: (t / microbatches).astype(p.dtype), total, state.params)
  mean = lambda x: jnp.mean(x, axis=0)
  return mean(loss), jax.tree.map(mean, metrics), aux, grads


def train_step(model: models.EmbeddingModel, optimizer: optax.GradientTransformation,
               state: TrainState, batch: models.Batch, rng: Array, *,
               skip_nonfinite: bool = False, microbatches: int = 1) -> tuple[TrainState, dict]:
  """One optimizer update, then the objective's model-state update.

  Args:
    state: the current TrainState.
    batch: the model batch (see vmsst.model.models), global arrays.
    rng: the run's base key; folded with the step, so a resumed run draws the
      same dropout/noise as an uninterrupted one.
    skip_nonfinite: if the loss, gradient or update is NaN/Inf, keep params,
      optimizer and model state as they were (the batch is skipped) but still
      advance `step`, so the data position and the step's rng stay those of
      an uninterrupted run.
    microbatches: N > 1 accumulates the gradient of N strided microbatches
      (`accumulated_gradients`, module doc) for one update; the objective's
      metrics are then means over the microbatches. 1: the whole batch at once.
  Returns:
    (new state, scalar metrics: the objective's, grad_norm, update_norm and
    `nonfinite`, float32 1.0 if this step's loss/gradient/update had a NaN or
    Inf, else 0.0; the loop reads it every step).
  Raises:
    ValueError: N > 1 for an objective with in-batch negatives, or N not
      dividing the batch (check_microbatches).
  """
  step_rng = jax.random.fold_in(rng, state.step)
  if microbatches == 1:
    grad_fn = jax.value_and_grad(model.loss_fn_with_state, has_aux=True)  # in params only
    (loss, (metrics, aux)), grads = grad_fn(state.params, state.model_state, batch, step_rng,
                                            state.step)
  else:
    loss, metrics, aux, grads = accumulated_gradients(model, state, batch, step_rng,
                                                      microbatches)
  updates, opt_state = optimizer.update(grads, state.opt_state, state.params)
  params = optax.apply_updates(state.params, updates)
  model_state = model.update_model_state(state.model_state, params, aux)
  grad_norm, update_norm = optax.tree.norm(grads), optax.tree.norm(updates)
  finite = jnp.isfinite(loss) & jnp.isfinite(grad_norm) & jnp.isfinite(update_norm)
  new = TrainState(step=state.step + 1, params=params, opt_state=opt_state,
                   model_state=model_state)
  if skip_nonfinite:  # static: the default step carries no selects
    kept = state.replace(step=state.step + 1)
    new = jax.tree.map(lambda a, b: jnp.where(finite, a, b), new, kept)
  metrics = dict(metrics, grad_norm=grad_norm, update_norm=update_norm,
                 nonfinite=1.0 - finite.astype(jnp.float32))
  return new, metrics


def model_state_shardings(boxed_model_state: Any, mesh: Mesh) -> Any:
  """Boxed leaves follow their logical axis names; bare leaves are replicated."""
  is_box = lambda x: isinstance(x, nn.LogicallyPartitioned)
  return jax.tree.map(
      lambda x: partitioning.logical_shardings(x, mesh) if is_box(x)
      else partitioning.replicated(mesh), boxed_model_state, is_leaf=is_box)


def eval_encode(model: models.EmbeddingModel, params, tokens: Array, mask: Array,
                side: str = "a") -> Array:
  """μ_sem of a batch of sentences of pair side `side`, float32 [B, d]."""
  return model.encode_side(params, tokens, mask, side)


class Trainer:
  """Compiles init, train step and encoder for one model, optimizer and mesh.

  Attributes:
    state_shardings: TrainState of NamedShardings (params by logical axes).
    abstract_state: TrainState of sharded ShapeDtypeStructs (for restore).
  """

  def __init__(self, model: models.EmbeddingModel, optimizer: optax.GradientTransformation,
               mesh: Mesh, input_shapes: Mapping[str, tuple[int, ...]], *,
               skip_nonfinite: bool = False, microbatches: int = 1):
    """`skip_nonfinite`: see `train_step` (a NaN/Inf step leaves the state as it was);
    `microbatches`: see `train_step` (ValueError here when it cannot split the batch)."""
    self.model, self.optimizer, self.mesh = model, optimizer, mesh
    self.input_shapes = dict(input_shapes)
    batch_size = next(iter(self.input_shapes.values()))[0]
    check_microbatches(model, batch_size, microbatches)
    if microbatches > 1 and (batch_size // microbatches) % mesh.shape["data"]:
      raise ValueError(f"train.microbatches = {microbatches} leaves {batch_size // microbatches} "
                       f"pairs per microbatch (batch size {batch_size}), which do not divide "
                       f"over the {mesh.shape['data']} devices of the data axis.")
    self.feature_dtypes = model.feature_dtypes()
    boxed = jax.eval_shape(
        functools.partial(init_state, model, optimizer, input_shapes=self.input_shapes),
        jax.random.key(0))
    param_shardings = partitioning.logical_shardings(boxed.params, mesh)
    abstract_params = nn.unbox(boxed.params)
    self.state_shardings = TrainState(
        step=partitioning.replicated(mesh),
        params=param_shardings,
        opt_state=partitioning.like_params_shardings(
            boxed.opt_state, abstract_params, param_shardings, mesh),
        model_state=model_state_shardings(boxed.model_state, mesh))
    unboxed = TrainState(step=boxed.step, params=abstract_params, opt_state=boxed.opt_state,
                         model_state=nn.unbox(boxed.model_state))
    self.abstract_state = jax.tree.map(
        lambda x, s: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=s),
        unboxed, self.state_shardings)
    self.batch_shardings = {k: partitioning.batch_sharding(mesh) for k in self.input_shapes}
    self._init = jax.jit(self._unboxed_init, out_shardings=self.state_shardings)
    self._step = jax.jit(functools.partial(train_step, model, optimizer,
                                           skip_nonfinite=skip_nonfinite,
                                           microbatches=microbatches),
                         in_shardings=(self.state_shardings, self.batch_shardings,
                                       partitioning.replicated(mesh)),
                         out_shardings=(self.state_shardings, partitioning.replicated(mesh)),
                         donate_argnums=(0,))
    self._init_model_state = jax.jit(
        lambda params, rng: nn.unbox(model.init_model_state(params, model_state_rng(rng))),
        out_shardings=self.state_shardings.model_state)
    self._encode = {side: jax.jit(functools.partial(eval_encode, model, side=side),
                                  in_shardings=(self.state_shardings.params,
                                                partitioning.batch_sharding(mesh),
                                                partitioning.batch_sharding(mesh)),
                                  out_shardings=partitioning.replicated(mesh))
                    for side in ("a", "b")}  # compiled on first use

  def _unboxed_init(self, rng: Array) -> TrainState:
    state = init_state(self.model, self.optimizer, rng, self.input_shapes)
    return state.replace(params=nn.unbox(state.params), model_state=nn.unbox(state.model_state))

  def initialize(self, rng: Array) -> TrainState:
    """Parameters created directly in their shards (never whole on one host).

    Runs outside the mesh context: out_shardings place the result, and flax's
    init-time constraints would see DenseGeneral's flattened kernels.
    """
    return self._init(rng)

  def with_params(self, state: TrainState, params, rng: Array) -> TrainState:
    """`state` with new `params` and the model state initialised from them.

    For parameters loaded from elsewhere (`train(init_params=...)`): a
    momentum encoder must start as a copy of the parameters actually trained.
    `rng` is the one `initialize` was given.
    """
    return state.replace(params=params, model_state=self._init_model_state(params, rng))

  def step(self, state: TrainState, batch: Mapping[str, Any], rng: Array):
    """Runs the compiled step; `batch` is host-local numpy or global arrays."""
    with jax.set_mesh(self.mesh), nn.logical_axis_rules(partitioning.LOGICAL_AXIS_RULES):
      return self._step(state, self.global_batch(batch), rng)

  def lower_step(self, rng: Array):
    """The step lowered for the mesh, not yet compiled: its program text is what
    the compiler receives (vmsst.compile fingerprints it)."""
    batch = {k: jax.ShapeDtypeStruct(s, self.feature_dtypes[k], sharding=self.batch_shardings[k])
             for k, s in self.input_shapes.items()}
    with jax.set_mesh(self.mesh), nn.logical_axis_rules(partitioning.LOGICAL_AXIS_RULES):
      return self._step.lower(self.abstract_state, batch, rng)

  def compile_step(self, rng: Array):
    """Ahead-of-time compilation for the mesh: shows sharding errors early."""
    lowered = self.lower_step(rng)
    with jax.set_mesh(self.mesh), nn.logical_axis_rules(partitioning.LOGICAL_AXIS_RULES):
      return lowered.compile()

  def global_batch(self, batch: Mapping[str, Any]) -> dict[str, Array]:
    """Assembles each process's local rows into arrays sharded over "data"."""
    if all(isinstance(v, jax.Array) for v in batch.values()):
      return dict(batch)
    return {k: jax.make_array_from_process_local_data(self.batch_shardings[k],
                                                     np.asarray(v, self.feature_dtypes[k]))
            for k, v in batch.items() if k in self.batch_shardings}

  def encode(self, params, tokens: np.ndarray, mask: np.ndarray, side: str = "a") -> np.ndarray:
    """Embeddings of a host batch (of pair side `side`) whose size divides over the data axis."""
    sharding = partitioning.batch_sharding(self.mesh)
    tokens = jax.make_array_from_process_local_data(sharding, np.asarray(tokens, np.int32))
    mask = jax.make_array_from_process_local_data(sharding, np.asarray(mask, np.int32))
    with jax.set_mesh(self.mesh), nn.logical_axis_rules(partitioning.LOGICAL_AXIS_RULES):
      return np.asarray(self._encode[side](params, tokens, mask))
