"""Dual momentum contrast (Wang et al. 2021): momentum keys and a FIFO queue per side.

Each side (a, b) has a momentum encoder, an EMA of its base encoder started
as an exact copy, and a queue of K past keys. The query of x (base encoder of
side a) is scored against the momentum key of its translation y (positive)
and the queue of side b (negatives), plus the symmetric term:

  L = InfoNCE(q_a; k_b, queue_b) + InfoNCE(q_b; k_a, queue_a),
  logits = [q·k⁺, q·queue] / τ over L2-normalised vectors.

Vectors are μ_sem (the embedding used downstream): the mean pool of the last
layer, as the paper's representation, then our network's linear semantic
head (docs/papers/momentum_contrast.md lists this difference). Keys come from the momentum encoders
without dropout and carry no gradient; the momentum weights and queues live
in TrainState.model_state, never in the optimizer. After the optimizer step
the EMA moves towards the new weights and each side enqueues its keys over
the oldest ones (ring buffer, K a multiple of the batch). As in MoCo, the
queues start as random unit vectors, so every step has K negatives (an empty,
masked queue would give the first steps a zero loss whose round-off gradient
Adam would blow up into a full-size update).

Towers (§2, §3.1): the paper encodes each language with its own pretrained
BERT ("language-specific BERT models (base encoder)", bert-base-uncased for
English, RoBERTa-wwm-ext for Chinese), and each base encoder has its own
momentum encoder and queue. `separate_towers=True` is that setup (the paper
runs): base encoder, momentum encoder and queue per pair side. The rule that
picks a tower for a sentence outside a pair is the side its language trains
on: tower a embeds side a's language (English: the paper's x, and side a of
the en-xx OPUS files and the source of every held-out retrieval set), tower
b embeds the other languages (`encode(..., side="b")`, `side_of_language`). With one shared
tower (`separate_towers=False`, the CPU default) both sides are the same
encoder and the side is ignored.

NLI multitask (§3.3, App. B): with `nli_weight` α > 0 the loss adds
α · CE of a small MLP head (nli_head.NliHead) on the representations of an
English premise and hypothesis, both through tower a, `nli_batch_size` pairs
a step drawn from `nli_examples` (nli_head.py says how). The head's
parameters are params["nli_head"]; the momentum encoders copy the towers only.

Known gap: a queued key of the same sentence as the positive (multi-parallel
NTREX repeats its English pivot) is a false negative; in-batch duplicate
masking (Contrastive) does not reach the queue.
"""

import flax.linen as nn
from vmsst.base.gin_utils import gin
import jax
import jax.numpy as jnp

from vmsst.base import languages
from vmsst.model import losses
from vmsst.model import models
from vmsst.objectives import nested as nested_lib
from vmsst.objectives import nli_head

NLI_HEAD = "nli_head"
NLI_STREAM = 1  # fold_in constant of the NLI dropout / sampling keys
SIDES = ("a", "b")


def queue_info_nce(queries, keys, queue, temperature: float):
  """InfoNCE of each query against its key (positive) and a queue (negatives).

  Args:
    queries, keys: float [B, d] (normalised here).
    queue: float [K, d], L2-normalised rows.
    temperature: τ.
  Returns:
    (loss float32 [], mean over the batch of −log softmax of the positive;
     accuracy float32 [], fraction of positives above every negative).
  """
  q, k = losses.l2_normalize(queries), losses.l2_normalize(keys)
  positive = jnp.sum(q * k, axis=-1, keepdims=True) / temperature
  negatives = q @ queue.T / temperature
  logits = jnp.concatenate([positive, negatives], axis=-1).astype(jnp.float32)
  loss = jnp.mean(jax.nn.logsumexp(logits, axis=-1) - logits[:, 0])
  return loss, jnp.mean((logits[:, 0] > jnp.max(logits[:, 1:], axis=-1)).astype(jnp.float32))


def ema(momentum_params, params, momentum: float):
  """θ_k ← m θ_k + (1 − m) θ_q, leaf by leaf (m = 0 copies θ_q exactly)."""
  return jax.tree.map(lambda k, q: momentum * k + (1.0 - momentum) * q, momentum_params, params)


def enqueue(queue, keys, pointer):
  """Writes keys [B, d] into queue [K, d] at rows pointer … pointer + B − 1."""
  return jax.lax.dynamic_update_slice(queue, keys.astype(queue.dtype), (pointer, 0))


@gin.configurable
class MomentumContrast(models.EmbeddingModel):
  """Dual encoder with momentum keys and queued negatives (DMC).

  Parameters are one network (shared tower) or {"tower_a", "tower_b"}
  (separate towers, as in the paper's per-language encoders). Model state:
  "momentum" (like the parameters), "queue_a"/"queue_b" [K, d] (logical axes
  ("queue", "latent"), so K spreads over the data axis) and "queue_pointer"
  (the next row to write, i.e. the oldest key). With a shared tower the two
  sides' momentum encoders would be identical EMAs, so one copy is kept.
  """

  init_paths = staticmethod(models.init_semantic_path)

  def __init__(self, network_config, *, temperature: float = 0.04, momentum: float = 0.999,
               queue_size: int = 409_600, separate_towers: bool = False,
               side_a_languages: tuple[str, ...] = ("eng",), nli_weight: float = 0.0,
               nli_examples: nli_head.NliExamples | None = None, nli_batch_size: int = 128,
               nested: nested_lib.NestedDims | None = None):
    """Args:
      network_config: the shared network.
      temperature: τ of the softmax (paper 0.04).
      momentum: m of the key encoders' EMA (paper 0.999). m = 0 is the
        paper's degenerate case: the key encoder is a copy of the base
        encoder after every step (keys = the base encoder without gradient).
      queue_size: K keys per side (paper 409,600); a multiple of the batch.
      separate_towers: one base encoder (and momentum encoder) per pair side,
        as the paper's language-specific encoders; then `encode(side=...)`
        and `score_batch` use each side's tower.
      side_a_languages: languages embedded by tower a (`side_of_language`);
        every other language goes to tower b. The training data must put
        them on side a (OPUS en-xx files and the held-out sets do for "eng").
      nli_weight: α of the NLI cross-entropy (paper 0.1 with NLI, 0 without).
      nli_examples: English NLI training pairs (nli_head.nli_examples), needed
        when nli_weight > 0.
      nli_batch_size: NLI pairs per step (paper 128).
      nested: Matryoshka sizes (objectives/nested.py): both queue InfoNCE
        terms on each k-prefix of queries, keys and queued keys (each prefix
        renormalised), weighted; the queue keeps full keys. None: full only.
    """
    super().__init__(network_config)
    if not 0.0 <= momentum <= 1.0:
      raise ValueError(f"MomentumContrast.momentum must be in [0, 1], got {momentum}.")
    self.temperature, self.momentum = temperature, momentum
    self.queue_size, self.separate_towers = queue_size, separate_towers
    self.side_a_languages = frozenset(languages.canonical_language(c) for c in side_a_languages)
    if nli_weight > 0 and nli_examples is None:
      raise ValueError("MomentumContrast.nli_weight > 0 needs English NLI data: bind "
                       "MomentumContrast.nli_examples = @nli_examples() and nli_examples.path "
                       "to a directory of SNLI/MNLI train files (or set nli_weight = 0).")
    self.nli_weight, self.nli_examples = nli_weight, nli_examples
    self.nli_batch_size = nli_batch_size
    self.nli_head = nli_head.NliHead() if nli_weight > 0 else None
    self.nested = nested_lib.checked(nested, network_config.emb_dim, "MomentumContrast")

  @property
  def sides(self) -> tuple[str, ...]:
    """The pair sides with an encoder of their own: ("a", "b") or ("a",) if shared."""
    return SIDES if self.separate_towers else SIDES[:1]

  def side_of_language(self, language: str) -> str:
    """"a" for a language of `side_a_languages` ("en", "eng", …), else "b" (`languages.pair_side`)."""
    return languages.pair_side(language, self.side_a_languages)

  def init_network(self, rng, input_shapes):
    """One network, or with separate towers one per side under `tower_a` / `tower_b`."""
    if not self.separate_towers:
      return super().init_network(rng, input_shapes)
    return {f"tower_{side}": super(MomentumContrast, self).init_network(r, input_shapes)
            for side, r in zip(SIDES, jax.random.split(rng))}

  def extra_modules(self):
    """`nli_head` when the NLI term is on."""
    if self.nli_head is None:
      return {}
    d = jnp.zeros((1, self.network_config.emb_dim), jnp.float32)
    return {NLI_HEAD: (self.nli_head, (d, d))}

  def encoders(self, params):
    """The parameters the momentum encoders follow: everything but the NLI head."""
    return {k: v for k, v in params.items() if k != NLI_HEAD}

  def tower(self, params, side: str):
    """The network parameters that encode `side` ("a" or "b")."""
    if side not in SIDES:
      raise ValueError(f"side={side!r}: a pair side is 'a' or 'b' (side_of_language maps a "
                       "language to its side).")
    return params[f"tower_{side}"] if self.separate_towers else self.encoders(params)

  def semantic(self, params, tokens, mask, rng=None, side: str = "a"):
    """(μ_sem, aux) through the tower of pair side `side`."""
    return super().semantic(self.tower(params, side), tokens, mask, rng)

  def encode(self, params, tokens, mask, side: str = "a"):
    """μ_sem float32 [B, d] of sentences of pair side `side` ("a": English, "b": the rest).

    With separate towers each side's sentences go through the tower trained
    on them (`side_of_language` gives the side of a language); with a shared
    tower `side` changes nothing.
    """
    return self.semantic(params, tokens, mask, side=side)[0]

  def encode_side(self, params, tokens, mask, side: str = "a"):
    return self.encode(params, tokens, mask, side=side)

  def embed_side(self, params, batch: models.Batch, side: str, rng=None):
    """μ_sem [B, d] of one side of the batch through that side's tower."""
    return self.semantic(params, batch[f"tokens_{side}"], batch[f"mask_{side}"], rng,
                         side=side)[0]

  def score_batch(self, params, batch):
    a, b = (losses.l2_normalize(self.embed_side(params, batch, s)) for s in SIDES)
    return jnp.sum(a * b, axis=-1)

  def init_model_state(self, params, rng):
    shape = (self.queue_size, self.network_config.emb_dim)
    queue = lambda r: nn.LogicallyPartitioned(
        losses.l2_normalize(jax.random.normal(r, shape, jnp.float32)), names=("queue", "latent"))
    rng_a, rng_b = jax.random.split(rng)
    return {"momentum": jax.tree.map(jnp.copy, self.encoders(params)),  # exact, own buffers
            "queue_a": queue(rng_a), "queue_b": queue(rng_b),
            "queue_pointer": jnp.zeros((), jnp.int32)}

  def loss_fn(self, params, batch, dropout_rng, step=0):
    raise TypeError("MomentumContrast needs its momentum encoders and queues: call "
                    "loss_fn_with_state(params, model_state, ...) (vmsst.training.trainer.train_step does).")

  def loss_fn_with_state(self, params, model_state, batch, dropout_rng, step=0):
    model_state = jax.lax.stop_gradient(model_state)
    rngs = dict(zip(SIDES, jax.random.split(dropout_rng)))
    queries = {s: self.embed_side(params, batch, s, rngs[s]) for s in SIDES}
    keys = {s: losses.l2_normalize(self.embed_side(model_state["momentum"], batch, s))
            for s in SIDES}
    dim = queries["a"].shape[-1]
    terms = self.queue_terms(queries, keys, model_state, dim)
    loss, nested_metrics = terms["loss"], {}
    if self.nested is not None:
      loss, nested_metrics = nested_lib.nested_loss(self.nested, dim, lambda k: (
          self.queue_terms(queries, keys, model_state, k)["loss"], {}))
    nli_metrics = {}
    if self.nli_head is not None:
      nli_loss, nli_accuracy = self.nli_loss(params, jax.random.fold_in(dropout_rng, NLI_STREAM))
      loss = loss + self.nli_weight * nli_loss
      nli_metrics = {"nli_loss": nli_loss, "nli_accuracy": nli_accuracy}
    in_batch = losses.l2_normalize(queries["a"]) @ keys["b"].T  # diagnostic: batch keys only
    hits = jnp.concatenate([jnp.argmax(in_batch, -1), jnp.argmax(in_batch, 0)])
    metrics = {
        "loss": loss, "momentum_contrast_loss_ab": terms["ab"][0],
        "momentum_contrast_loss_ba": terms["ba"][0],
        "queue_accuracy": 0.5 * (terms["ab"][1] + terms["ba"][1]),
        "in_batch_accuracy": jnp.mean(hits == jnp.tile(jnp.arange(in_batch.shape[0]), 2)),
        "embedding_norm": jnp.mean(jnp.linalg.norm(queries["a"], axis=-1)),
        **nli_metrics, **nested_metrics,
    }
    return loss, (metrics, {f"keys_{s}": jax.lax.stop_gradient(keys[s]) for s in SIDES})

  def queue_terms(self, queries, keys, model_state, k: int):
    """Both queue InfoNCE terms ("ab", "ba": (loss, accuracy)) and their sum ("loss") at
    prefix width k: queries and keys are normalised by queue_info_nce, the queue's unit
    rows renormalised at their prefix (nested_lib.unit_prefix)."""
    terms = {f"{s}{o}": queue_info_nce(nested_lib.prefix(queries[s], k),
                                       nested_lib.prefix(keys[o], k),
                                       nested_lib.unit_prefix(model_state[f"queue_{o}"], k),
                                       self.temperature) for s, o in (("a", "b"), ("b", "a"))}
    return terms | {"loss": terms["ab"][0] + terms["ba"][0]}

  def nli_loss(self, params, rng):
    """(CE, accuracy) of the NLI head on a batch drawn from `nli_examples` by `rng`.

    Premise and hypothesis are English: both go through tower a, with dropout.
    """
    sample_rng, dropout_rng = jax.random.split(rng)
    batch = nli_head.sample(self.nli_examples, sample_rng, self.nli_batch_size)
    side = self.side_of_language("eng")
    rngs = jax.random.split(dropout_rng, 3)
    u, v = (self.semantic(params, t, (t != 0).astype(jnp.int32), r, side=side)[0]
            for t, r in ((batch.premise, rngs[0]), (batch.hypothesis, rngs[1])))
    logits = self.nli_head.apply({"params": params[NLI_HEAD]}, u, v, deterministic=False,
                                 rngs={"dropout": rngs[2]})
    return nli_head.cross_entropy(logits, batch.label)

  def update_model_state(self, model_state, params, aux):
    batch_size = aux["keys_a"].shape[0]
    if self.queue_size % batch_size:
      raise ValueError(f"MomentumContrast.queue_size={self.queue_size} must be a multiple of "
                       f"the global batch size {batch_size} (the ring buffer never splits a "
                       "batch); change queue_size in the gin file.")
    pointer = model_state["queue_pointer"]
    return {
        "momentum": ema(model_state["momentum"], self.encoders(params), self.momentum),
        **{f"queue_{s}": enqueue(model_state[f"queue_{s}"], aux[f"keys_{s}"], pointer)
           for s in SIDES},
        "queue_pointer": (pointer + batch_size) % self.queue_size,
    }
