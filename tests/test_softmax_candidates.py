"""The candidate softmax: which ids it keeps, and that it is the full softmax restricted to them.

A CPU speed-up of the translation objectives (docs/cpu_recipe.md §9): each
step normalises over the batch's target ids plus uniform draws instead of the
whole vocabulary. These tests hold what makes it safe to switch on: every
counted target is a candidate (or is counted as missed, never mis-scored),
the restricted logits are the full logits' columns, and at K = V the loss is
the paper's full-softmax loss.
"""

import jax
import numpy as np
import pytest

from vmsst_testing import TINY, init_params, random_batch
from vmsst import losses
from vmsst.network import VMSSTNetwork
from vmsst.objectives import BiTranslation, VMSST, VMSSTContrastive


def _candidates(batch, num_candidates, seed=0):
  tokens = np.concatenate([batch["tokens_a"], batch["tokens_b"]])
  mask = np.concatenate([batch["mask_a"], batch["mask_b"]])
  out = losses.softmax_candidates(tokens, mask, TINY.vocab_size, num_candidates,
                                  jax.random.key(seed))
  return tokens, mask, *map(np.asarray, out)


def test_every_counted_target_is_a_candidate_at_its_column():
  tokens, mask, candidates, index, found = _candidates(random_batch(), 64)
  assert len(set(candidates.tolist())) == 64  # distinct ids, drawn without replacement
  assert found[mask > 0].all()
  np.testing.assert_array_equal(candidates[index][mask > 0], tokens[mask > 0])
  # Padding ids are not targets: id 0 is a candidate only if drawn, never forced.
  distinct = set(tokens[mask > 0].tolist())
  assert distinct <= set(candidates.tolist()) and len(distinct) < 64


def test_the_fill_is_uniform_draws_from_the_other_ids():
  batch = random_batch()
  _, mask, first, *_ = _candidates(batch, 100, seed=0)
  _, _, second, *_ = _candidates(batch, 100, seed=1)
  assert set(first.tolist()) != set(second.tolist())  # the fill depends on the key


def test_targets_beyond_k_are_reported_not_scored():
  tokens, mask, candidates, index, found = _candidates(random_batch(), 5)
  distinct = len(set(tokens[mask > 0].tolist()))
  assert distinct > 5
  kept = set(candidates.tolist())
  np.testing.assert_array_equal(found, np.isin(tokens, list(kept)))
  assert (~found & (mask > 0)).sum() > 0


@pytest.mark.parametrize("k", [0, -1, TINY.vocab_size + 1])
def test_k_outside_the_vocabulary_is_refused(k):
  batch = random_batch()
  with pytest.raises(ValueError, match="0 < K <= vocab_size"):
    losses.softmax_candidates(batch["tokens_a"], batch["mask_a"], TINY.vocab_size, k,
                              jax.random.key(0))


def test_restricted_logits_are_the_full_logits_columns():
  model = BiTranslation(TINY)
  params = init_params(model)
  batch = random_batch()
  latent = np.random.default_rng(0).normal(size=(4, TINY.emb_dim)).astype(np.float32)
  columns = np.array([7, 3, 250, 1], np.int32)
  args = (batch["tokens_a"], batch["mask_a"], batch["lang_a"], latent, True)
  full = VMSSTNetwork(TINY).apply({"params": params}, *args, method=VMSSTNetwork.decode)
  some = VMSSTNetwork(TINY).apply({"params": params}, *args, columns,
                                  method=VMSSTNetwork.decode)
  np.testing.assert_allclose(np.asarray(some), np.asarray(full)[..., columns], rtol=1e-5,
                             atol=1e-6)


def test_all_ids_as_candidates_is_the_full_softmax():
  """Every id in a permuted order: the same partition function, the same NLL."""
  model = BiTranslation(TINY)
  params, batch = init_params(model), random_batch()
  latent = np.random.default_rng(0).normal(size=(4, TINY.emb_dim)).astype(np.float32)
  args = (batch["tokens_a"], batch["mask_a"], batch["lang_a"], latent, True)
  full = VMSSTNetwork(TINY).apply({"params": params}, *args, method=VMSSTNetwork.decode)
  candidates, index, found = losses.softmax_candidates(
      batch["tokens_a"], batch["mask_a"], TINY.vocab_size, TINY.vocab_size, jax.random.key(3))
  restricted = VMSSTNetwork(TINY).apply({"params": params}, *args, candidates,
                                        method=VMSSTNetwork.decode)
  assert bool(np.asarray(found).all())
  expected = losses.sequence_nll(full, batch["tokens_a"], batch["mask_a"])
  got = losses.sequence_nll(restricted, index, batch["mask_a"])
  for want, have in zip(expected, got):
    np.testing.assert_allclose(np.asarray(have), np.asarray(want), rtol=1e-5)


@pytest.mark.parametrize("objective", [BiTranslation, VMSST, VMSSTContrastive])
@pytest.mark.parametrize("k", [TINY.vocab_size, 10 * TINY.vocab_size])
def test_k_at_or_above_the_vocabulary_is_the_full_softmax(objective, k):
  """A run file's K needs no change for a small vocabulary: K ≥ V trains the paper's loss."""
  full, restricted = objective(TINY), objective(TINY, softmax_candidates=k)
  params, batch = init_params(full), random_batch()
  loss, metrics = full.loss_fn(params, batch, jax.random.key(0), step=10)
  same, same_metrics = restricted.loss_fn(params, batch, jax.random.key(0), step=10)
  assert float(same) == float(loss)
  assert set(same_metrics) == set(metrics)


@pytest.mark.parametrize("objective", [BiTranslation, VMSST, VMSSTContrastive])
def test_every_translation_objective_reports_missed_targets(objective):
  model = objective(TINY, softmax_candidates=8)  # fewer than the batch's distinct targets
  params, batch = init_params(model), random_batch()
  loss, metrics = model.loss_fn(params, batch, jax.random.key(0), step=10)
  assert np.isfinite(float(loss))
  assert float(metrics["softmax_candidates_missed"]) > 0


def test_fewer_candidates_lower_the_nll_and_leave_the_encoder_path_alone():
  """A partition over K < V ids is smaller, so each NLL drops; μ_sem is untouched."""
  full, restricted = VMSST(TINY), VMSST(TINY, softmax_candidates=120)
  params, batch = init_params(full), random_batch()
  _, m_full = full.loss_fn(params, batch, jax.random.key(0), step=10)
  _, m_k = restricted.loss_fn(params, batch, jax.random.key(0), step=10)
  assert float(m_k["softmax_candidates_missed"]) == 0.0
  assert float(m_k["translation_nll"]) < float(m_full["translation_nll"])
  grads = jax.grad(lambda p: restricted.loss_fn(p, batch, jax.random.key(0), step=10)[0])(params)
  assert float(np.abs(np.asarray(grads["semantic_head"]["mu"]["kernel"])).sum()) > 0
