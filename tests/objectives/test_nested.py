"""Nested (Matryoshka) dimensions: each objective's loss summed over embedding prefixes.

For every objective family: the nested loss equals the weighted sum of the
loss computed here on vectors truncated by hand; sizes = [d] with weight 1 is
the plain loss bit for bit; and without the switch the compiled step is the
same program as the one the objective compiles with no `nested` argument.
"""

import dataclasses

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from vmsst_testing import TINY, init_params, random_batch
from vmsst.model import losses
from vmsst.model.network import VMSSTNetwork
from vmsst.objectives import (BiTranslation, Contrastive, Distillation, EntityContrastive,
                              MomentumContrast, QueryTower, VMSST, VMSSTContrastive)
from vmsst.objectives import entity_contrastive
from vmsst.objectives import nested as nested_lib
from vmsst.objectives.nested import NestedDims

SIZES, WEIGHTS = (8, 16, 32), (1.0, 0.5, 2.0)  # TINY.emb_dim = 32
NESTED = NestedDims(SIZES, WEIGHTS)
RNG = jax.random.key(0)


def _lse(x, axis=-1):
  m = x.max(axis, keepdims=True)
  return (m + np.log(np.exp(x - m).sum(axis, keepdims=True))).squeeze(axis)


def _info_nce_dot(a, b):
  """Symmetric InfoNCE of dot-product scores by hand (no duplicate rows in the batch)."""
  s = np.asarray(a, np.float64) @ np.asarray(b, np.float64).T
  diag = np.diagonal(s)
  return 0.5 * (np.mean(_lse(s, 1) - diag) + np.mean(_lse(s, 0) - diag))


def _unit(x):
  x = np.asarray(x, np.float64)
  return x / np.linalg.norm(x, axis=-1, keepdims=True)


def test_nested_dims_checks_its_sizes_and_weights():
  assert NestedDims([4, 8]).weights == (1.0, 1.0)
  for sizes, weights in (([], None), ([8, 4], None), ([0, 4], None), ([4, 8], [1.0]),
                         ([4, 8], [1.0, 0.0])):
    with pytest.raises(ValueError, match="NestedDims"):
      NestedDims(sizes, weights)
  with pytest.raises(ValueError, match="Contrastive.nested"):
    Contrastive(TINY, nested=NestedDims([16, 64]))


def test_prefix_helpers_leave_the_full_width_untouched():
  x = jnp.arange(12.0).reshape(3, 4) + 1
  assert nested_lib.prefix(x, 4) is x and nested_lib.unit_prefix(x, 4) is x
  assert nested_lib.masked_prefix(x, 4) is x
  np.testing.assert_array_equal(nested_lib.masked_prefix(x, 2)[:, 2:], 0)
  np.testing.assert_array_equal(nested_lib.masked_prefix(x, 2)[:, :2], x[:, :2])
  np.testing.assert_allclose(np.linalg.norm(nested_lib.unit_prefix(x, 3), axis=-1), 1, rtol=1e-6)


def test_contrastive_nested_loss_is_the_weighted_info_nce_of_truncated_vectors():
  model = Contrastive(TINY, nested=NESTED)  # the paper's dot product: prefixes as they are
  params = init_params(model)
  batch = random_batch()
  loss, metrics = model.loss_fn(params, batch, RNG)
  a = np.asarray(model.encode(params, batch["tokens_a"], batch["mask_a"]))
  b = np.asarray(model.encode(params, batch["tokens_b"], batch["mask_b"]))
  per_size = {k: _info_nce_dot(a[:, :k], b[:, :k]) for k in SIZES}
  np.testing.assert_allclose(float(loss), sum(w * per_size[k] for k, w in zip(SIZES, WEIGHTS)),
                             rtol=1e-5)
  for k in SIZES:
    np.testing.assert_allclose(float(metrics[f"nested_loss_{k}"]), per_size[k], rtol=1e-5)


def _translation_nll(params, batch, mu, k, slot):
  """−log p(x_a | μ_b[:k], 0…) − log p(x_b | μ_a[:k], 0…) per pair, decoded by hand."""
  total = 0.0
  for side, other in (("a", "b"), ("b", "a")):
    latent = np.array(mu[other])
    latent[:, k:] = 0.0
    latent = np.concatenate([np.zeros((latent.shape[0], slot), np.float32), latent], -1)
    tokens, mask = batch[f"tokens_{side}"], batch[f"mask_{side}"]
    logits = np.asarray(VMSSTNetwork(TINY).apply(
        {"params": params}, tokens, mask, batch[f"lang_{side}"], latent,
        method=VMSSTNetwork.decode), np.float64)
    log_p = logits - _lse(logits)[..., None]
    picked = np.take_along_axis(log_p, tokens[..., None].astype(np.int64), -1)[..., 0]
    total = total - (picked * mask).sum(-1)
  return total


# VMSST over ~7 s (docs/results/tests/)
@pytest.mark.parametrize("objective", [BiTranslation,
                                       pytest.param(VMSST, marks=pytest.mark.slow)])
def test_translation_terms_decode_from_each_prefix_with_the_rest_at_zero(objective):
  """BiTranslation: Σ_k c_k T_k exactly; VMSST: the ELBO is unchanged, so nested − plain
  = λ-free translation difference Σ_k c_k T_k − T_d."""
  model, plain = objective(TINY, nested=NESTED), objective(TINY)
  params = init_params(model)
  batch = random_batch()
  mu = {s: np.asarray(model.encode(params, batch[f"tokens_{s}"], batch[f"mask_{s}"]))
        for s in "ab"}
  slot = TINY.emb_dim if objective is VMSST else 0
  per_size = {k: _translation_nll(params, batch, mu, k, slot) for k in SIZES}
  nested_translation = np.mean(sum(w * per_size[k] for k, w in zip(SIZES, WEIGHTS)))
  loss, metrics = model.loss_fn(params, batch, RNG, step=5)
  plain_loss, _ = plain.loss_fn(params, batch, RNG, step=5)
  full = np.mean(per_size[TINY.emb_dim])
  np.testing.assert_allclose(float(loss) - float(plain_loss), nested_translation - full,
                             rtol=1e-4, atol=1e-3)
  if objective is BiTranslation:
    np.testing.assert_allclose(float(loss), nested_translation, rtol=1e-5)
  for k in SIZES:
    np.testing.assert_allclose(float(metrics[f"nested_translation_nll_{k}"]),
                               np.mean(per_size[k]), rtol=1e-5)


def test_vmsst_contrastive_nests_both_its_terms():
  model = VMSSTContrastive(TINY, nested=NESTED, multitask_weight=0.5)
  vmsst = VMSST(TINY, nested=NESTED)
  params = init_params(model)
  batch = random_batch()
  loss, metrics = model.loss_fn(params, batch, RNG, step=5)
  a, b = (np.asarray(model.encode(params, batch[f"tokens_{s}"], batch[f"mask_{s}"]))
          for s in "ab")
  contrastive = sum(w * _info_nce_dot(a[:, :k], b[:, :k]) for k, w in zip(SIZES, WEIGHTS))
  vmsst_loss, _ = vmsst.loss_fn(params, batch, RNG, step=5)
  np.testing.assert_allclose(float(loss), contrastive + 0.5 * float(vmsst_loss), rtol=1e-5)
  assert "nested_loss_8" in metrics and "nested_translation_nll_8" in metrics


def test_distillation_nests_the_mse_against_the_teachers_prefix():
  model = Distillation(TINY, teacher_dim=24, nested=NestedDims([6, 12, 24], WEIGHTS))
  params = init_params(model)
  params["teacher_head"]["kernel"] = jax.random.normal(jax.random.key(1), (32, 24)) * 0.1
  batch = random_batch()
  batch["teacher"] = np.asarray(jax.random.normal(jax.random.key(2), (4, 24)), np.float32)
  loss, _ = model.loss_fn(params, batch, RNG)
  f = {s: np.asarray(model.encode(params, batch[f"tokens_{s}"], batch[f"mask_{s}"]), np.float64)
       for s in "ab"}
  t = batch["teacher"].astype(np.float64)
  mse = lambda x, k: np.mean((x[:, :k] - t[:, :k]) ** 2)
  expected = sum(w * (mse(f["a"], k) + mse(f["b"], k)) for k, w in zip((6, 12, 24), WEIGHTS))
  np.testing.assert_allclose(float(loss), expected, rtol=1e-5)
  with pytest.raises(ValueError, match="Distillation.nested"):
    Distillation(TINY, teacher_dim=24, nested=NestedDims([32]))


def test_momentum_contrast_nests_queries_keys_and_the_renormalised_queue():
  model = MomentumContrast(TINY, temperature=0.1, queue_size=8, nested=NESTED)
  params = init_params(model)
  state = jax.device_get(nn.unbox(model.init_model_state(params, jax.random.key(3))))
  batch = random_batch()
  loss, (metrics, _) = jax.jit(model.loss_fn_with_state)(params, state, batch, RNG)
  q = {s: np.asarray(model.encode(params, batch[f"tokens_{s}"], batch[f"mask_{s}"]))
       for s in "ab"}  # TINY has no dropout; the momentum encoder is a copy at step 0
  def term(query, key, queue, k):
    qn, kn, queue = _unit(query[:, :k]), _unit(key[:, :k]), _unit(queue[:, :k])
    logits = np.concatenate([(qn * kn).sum(-1, keepdims=True), qn @ queue.T], -1) / 0.1
    return np.mean(_lse(logits) - logits[:, 0])
  per_size = {k: term(q["a"], q["b"], state["queue_b"], k) + term(q["b"], q["a"], state["queue_a"], k)
              for k in SIZES}
  np.testing.assert_allclose(float(loss), sum(w * per_size[k] for k, w in zip(SIZES, WEIGHTS)),
                             rtol=1e-5)
  np.testing.assert_allclose(float(metrics["nested_loss_8"]), per_size[8], rtol=1e-5)


def test_query_tower_nests_the_triplet_loss():
  model = QueryTower(TINY, margin=0.5, nested=NESTED)
  params = init_params(model)
  state = model.init_model_state(params, None)
  batch = random_batch()
  batch["tokens_negative"] = random_batch(seed=7)["tokens_a"]
  loss, _ = model.loss_fn_with_state(params, state, batch, RNG)
  vectors = [np.asarray(model.encode(params, batch[t], (batch[t] != 0).astype(np.int32)))
             for t in ("tokens_a", "tokens_b", "tokens_negative")]
  def hinge(k):
    a, p, n = (_unit(x[:, :k]) for x in vectors)
    return np.mean(np.maximum(0.0, 0.5 - (a * p).sum(-1) + (a * n).sum(-1)))
  np.testing.assert_allclose(float(loss), sum(w * hinge(k) for k, w in zip(SIZES, WEIGHTS)),
                             rtol=1e-5)


def test_entity_contrastive_nests_both_terms_on_truncated_vectors():
  config = dataclasses.replace(TINY, dropout_rate=0.1)
  model = EntityContrastive(config, num_entities=6, num_hard_negatives=1, entity_weight=0.3,
                            nested=NESTED)
  params = init_params(model)
  batch = random_batch()
  batch["entities"] = np.asarray([[0, 3], [1, 4], [2, -1], [5, 3]], np.int32)
  loss, _ = model.loss_fn(params, batch, RNG)
  tokens = np.concatenate([batch["tokens_a"]] * 2)
  views = np.asarray(model.semantic(params, tokens, np.concatenate([batch["mask_a"]] * 2),
                                    RNG)[0])
  entities = np.asarray(model.entity_vectors_of(params, batch["entities"]))
  same = losses.same_sequence_matrix(batch["tokens_a"])
  expected = 0.0
  for k, w in zip(SIZES, WEIGHTS):
    v1, v2, e = views[:4, :k], views[4:, :k], entities[..., :k]  # truncated here, by hand
    self_loss, _ = losses.symmetric_info_nce(v1, v2, 0.05, same, same)
    entity_loss, _ = entity_contrastive.entity_contrast(v1, e, batch["entities"], same, 0.05)
    expected += w * (float(self_loss) + 0.3 * float(entity_loss))
  np.testing.assert_allclose(float(loss), expected, rtol=1e-5)


def _models(nested):
  """One model per objective family, each with `nested` (None: the switch off)."""
  kwargs = {} if nested is None else {"nested": nested}
  config = dataclasses.replace(TINY, dropout_rate=0.1)
  return {"contrastive": Contrastive(TINY, **kwargs), "bitranslation": BiTranslation(TINY, **kwargs),
          "vmsst": VMSST(TINY, **kwargs), "vmsst_contrastive": VMSSTContrastive(TINY, **kwargs),
          "distillation": Distillation(TINY, teacher_dim=32, **kwargs),
          "momentum_contrast": MomentumContrast(TINY, queue_size=8, **kwargs),
          "query_tower": QueryTower(TINY, **kwargs),
          "entity_contrastive": EntityContrastive(config, num_entities=6, num_hard_negatives=1,
                                                  **kwargs)}


def _loss(model, params, batch):
  """The objective's loss as the trainer calls it (with model state where it has one)."""
  state = jax.device_get(nn.unbox(model.init_model_state(params, jax.random.key(3))))
  return model.loss_fn_with_state(params, state, batch, RNG, 5)[0]


def _batch_for(name):
  batch = random_batch()
  batch["teacher"] = np.asarray(jax.random.normal(jax.random.key(2), (4, 32)), np.float32)
  batch["tokens_negative"] = random_batch(seed=7)["tokens_a"]
  batch["entities"] = np.asarray([[0, 3], [1, 4], [2, -1], [5, 3]], np.int32)
  return batch


@pytest.mark.slow  # eight objectives compiled twice
def test_full_size_alone_with_weight_one_is_the_plain_loss_bit_for_bit():
  plain, full = _models(None), _models(NestedDims([32], [1.0]))
  for name, model in plain.items():
    params = init_params(model)
    batch = _batch_for(name)
    step = jax.jit(lambda p, b, m=model: _loss(m, p, b))
    assert np.asarray(step(params, batch)).tobytes() == np.asarray(
        jax.jit(lambda p, b, m=full[name]: _loss(m, p, b))(params, batch)).tobytes(), name
