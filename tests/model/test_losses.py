"""Hand-computed checks of every loss in vmsst/model/losses.py."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from vmsst.model import losses
from vmsst_testing import TINY, random_batch


def test_gaussian_kl_closed_form():
  mu = jnp.array([[1.0, 0.0], [0.0, 0.0]])
  logvar = jnp.array([[0.0, math.log(2.0)], [0.0, 0.0]])
  # Row 0: ½[(1 + 1 − 1 − 0) + (2 + 0 − 1 − ln 2)] = ½(2 − ln 2); row 1: standard normal.
  np.testing.assert_allclose(losses.gaussian_kl(mu, logvar), [0.5 * (2 - math.log(2)), 0.0],
                             rtol=1e-6)


def test_gaussian_kl_matches_monte_carlo():
  mu, logvar = jnp.array([[0.3, -1.2]]), jnp.array([[0.4, -0.7]])
  z = losses.reparameterize(jax.random.key(0), jnp.repeat(mu, 200_000, 0),
                            jnp.repeat(logvar, 200_000, 0))
  log_q = -0.5 * jnp.sum(jnp.square(z - mu) / jnp.exp(logvar) + logvar, -1)
  log_p = -0.5 * jnp.sum(jnp.square(z), -1)
  assert float(jnp.mean(log_q - log_p)) == pytest.approx(float(losses.gaussian_kl(mu, logvar)[0]),
                                                         abs=0.01)


def test_reparameterize_uses_standard_deviation():
  mu, logvar = jnp.array([[2.0]]), jnp.array([[math.log(9.0)]])
  eps = jax.random.normal(jax.random.key(3), (1, 1))
  np.testing.assert_allclose(losses.reparameterize(jax.random.key(3), mu, logvar),
                             2.0 + 3.0 * eps, rtol=1e-6)


@pytest.mark.parametrize("step,steps,expected", [
    (0, 100, 0.0), (25, 100, 0.25), (100, 100, 1.0), (400, 100, 1.0), (7, 0, 1.0)])
def test_linear_annealing(step, steps, expected):
  assert float(losses.linear_annealing(step, steps)) == pytest.approx(expected)


def test_sequence_nll_ignores_padding():
  logits = jnp.log(jnp.array([[[0.5, 0.25, 0.25], [0.1, 0.8, 0.1], [0.9, 0.05, 0.05]]]))
  targets = jnp.array([[0, 1, 2]])
  mask = jnp.array([[1, 1, 0]])
  nll, correct = losses.sequence_nll(logits, targets, mask)
  np.testing.assert_allclose(nll, [-(math.log(0.5) + math.log(0.8))], rtol=1e-6)
  np.testing.assert_allclose(correct, [2.0])


def _info_nce_by_hand(sim, tau):
  s = np.asarray(sim) / tau
  row = -np.mean([s[i, i] - np.log(np.exp(s[i]).sum()) for i in range(3)])
  col = -np.mean([s[i, i] - np.log(np.exp(s[:, i]).sum()) for i in range(3)])
  return 0.5 * (row + col)


def test_symmetric_info_nce_3x3():
  a = jnp.array([[1.0, 0.0], [0.0, 2.0], [1.0, 1.0]])
  b = jnp.array([[3.0, 0.0], [1.0, 1.0], [0.0, 1.0]])
  na = np.asarray(a) / np.linalg.norm(a, axis=1, keepdims=True)
  nb = np.asarray(b) / np.linalg.norm(b, axis=1, keepdims=True)
  loss, accuracy = losses.symmetric_info_nce(a, b, temperature=0.5)
  assert float(loss) == pytest.approx(_info_nce_by_hand(na @ nb.T, 0.5), rel=1e-5)
  # a→b argmax: row0→0, row1→2, row2→1 ; b→a argmax: col0→0, col1→2, col2→1.
  assert float(accuracy) == pytest.approx(2 / 6)


def test_symmetric_info_nce_dot_product_is_the_papers_form():
  """§6.3 of the VMSST paper: p(s_i|t_i) = exp(s_i · t_i) / Σ_j exp(s_i · t_j)."""
  a = jnp.array([[1.0, 0.0], [0.0, 2.0], [1.0, 1.0]])
  b = jnp.array([[3.0, 0.0], [1.0, 1.0], [0.0, 1.0]])
  # a · bᵀ = [[3, 1, 0], [0, 2, 2], [3, 2, 1]], written out term by term.
  e = math.exp
  a_to_b = [3 - math.log(e(3) + e(1) + e(0)), 2 - math.log(e(0) + 2 * e(2)),
            1 - math.log(e(3) + e(2) + e(1))]
  b_to_a = [3 - math.log(2 * e(3) + e(0)), 2 - math.log(e(1) + 2 * e(2)),
            1 - math.log(e(0) + e(2) + e(1))]
  want = -0.5 * (sum(a_to_b) / 3 + sum(b_to_a) / 3)
  loss, accuracy = losses.symmetric_info_nce(a, b, 1.0, similarity="dot")
  assert float(loss) == pytest.approx(want, rel=1e-6)
  # a→b argmax: 0, 1 (tie 2 = 2, first wins), 0 (miss); b→a: 0, 1, 1 (miss).
  assert float(accuracy) == pytest.approx(4 / 6)


def test_dot_form_sees_the_norm_and_the_cosine_form_does_not():
  a = jnp.array([[1.0, 0.0], [0.0, 2.0], [1.0, 1.0]])
  b = jnp.array([[3.0, 0.0], [1.0, 1.0], [0.0, 1.0]])
  dot = lambda x, y, t=1.0: float(losses.symmetric_info_nce(x, y, t, similarity="dot")[0])
  cos = lambda x, y: float(losses.symmetric_info_nce(x, y, 0.1, similarity="cosine")[0])
  assert cos(2 * a, b) == pytest.approx(cos(a, b), rel=1e-6)
  assert dot(2 * a, b) != pytest.approx(dot(a, b), rel=1e-3)
  assert dot(a, b, 2.0) == pytest.approx(dot(a / 2, b), rel=1e-6)  # τ divides the dot product.
  assert losses.pair_scores(a, b, "dot", 1.0).tolist() == [[3, 1, 0], [0, 2, 2], [3, 2, 1]]


@pytest.mark.parametrize("similarity,temperature,message", [
    ("l2", 1.0, "similarity must be one of"), ("dot", 0.0, "temperature must be > 0")])
def test_info_nce_rejects_bad_options(similarity, temperature, message):
  with pytest.raises(ValueError, match=message):
    losses.symmetric_info_nce(jnp.ones((2, 2)), jnp.ones((2, 2)), temperature,
                              similarity=similarity)


def test_info_nce_masks_duplicate_sentences_but_not_the_positive():
  a = jnp.array([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]])
  b = jnp.array([[1.0, 0.0], [1.0, 0.0], [0.0, 1.0]])
  dup_b = losses.same_sequence_matrix(jnp.array([[5, 6], [5, 6], [7, 8]]))
  assert dup_b.tolist() == [[True, True, False], [True, True, False], [False, False, True]]
  masked, _ = losses.symmetric_info_nce(a, b, 1.0, duplicates_b=dup_b)
  plain, _ = losses.symmetric_info_nce(a, b, 1.0)
  na = np.asarray(a) / np.linalg.norm(a, axis=1, keepdims=True)
  nb = np.asarray(b) / np.linalg.norm(b, axis=1, keepdims=True)
  s = na @ nb.T
  # Row 0 cannot see b_1 (a copy of its positive), nor row 1 see b_0.
  row = -np.mean([s[0, 0] - np.log(np.exp(s[0, [0, 2]]).sum()),
                  s[1, 1] - np.log(np.exp(s[1, [1, 2]]).sum()),
                  s[2, 2] - np.log(np.exp(s[2]).sum())])
  col = -np.mean([s[i, i] - np.log(np.exp(s[:, i]).sum()) for i in range(3)])
  assert float(masked) == pytest.approx(0.5 * (row + col), rel=1e-5)
  assert float(masked) != pytest.approx(float(plain), rel=1e-3)


# The candidate softmax (losses.softmax_candidates): which ids it keeps. A CPU
# speed-up of the translation objectives (docs/cpu_recipe.md §9); every counted
# target is a candidate or is counted as missed, never mis-scored.

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


def test_diagonal_is_jnp_diagonal_and_its_gradient_without_a_conditional():
  matrix = jax.random.normal(jax.random.key(0), (5, 5))
  np.testing.assert_array_equal(losses.diagonal(matrix), jnp.diagonal(matrix))
  weights = jnp.arange(5.0)
  grad = jax.grad(lambda m: jnp.sum(losses.diagonal(m) * weights))(matrix)
  np.testing.assert_array_equal(grad, jnp.diag(weights))
  program = jax.jit(jax.grad(lambda m: jnp.sum(losses.diagonal(m)))).lower(matrix).as_text()
  assert "stablehlo.case" not in program  # jnp.diagonal's would hold one
