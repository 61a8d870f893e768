"""Each objective's loss is the documented combination of its terms."""

import jax
import numpy as np
import pytest

from vmsst_testing import TINY, init_params, random_batch
from vmsst.model import losses
from vmsst.model.network import VMSSTNetwork
from vmsst.objectives import BiTranslation, Contrastive, VMSST, VMSSTContrastive


def _network_apply(params, method, *args):
  """One method of the plain network on the objective's parameters (dropout off)."""
  return VMSSTNetwork(TINY).apply({"params": params}, *args, method=method)


def _sentence_nll(params, batch, side: str, latent) -> np.ndarray:
  """−log p(x_side | latent) per sentence [B], summed over unpadded tokens by hand."""
  tokens, mask = batch[f"tokens_{side}"], batch[f"mask_{side}"]
  logits = np.asarray(_network_apply(params, VMSSTNetwork.decode, tokens, mask,
                                     batch[f"lang_{side}"], latent), np.float64)
  logits -= logits.max(-1, keepdims=True)
  log_p = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
  picked = np.take_along_axis(log_p, tokens[..., None].astype(np.int64), -1)[..., 0]
  return -(picked * mask).sum(-1)


def _kl(mu, logvar) -> np.ndarray:
  mu, logvar = np.asarray(mu, np.float64), np.asarray(logvar, np.float64)
  return 0.5 * (np.exp(logvar) + mu**2 - 1.0 - logvar).sum(-1)


def _without_posterior_noise(params):
  """Both log σ² heads set to −40 (σ ≈ 2e-9), so z = μ to float32 precision.

  The reparameterised samples are then known without reading the objective's
  random-key plumbing, and every term of the loss can be computed by hand.
  """
  def fix(path, leaf):
    names = [getattr(k, "key", "") for k in path]
    if "logvar" not in names:
      return leaf
    return np.full_like(leaf, -40.0) if names[-1] == "bias" else np.zeros_like(leaf)
  return jax.tree_util.tree_map_with_path(fix, params)


@pytest.mark.slow  # over ~7 s (docs/results/tests/)
def test_vmsst_loss_is_hand_computed_translation_plus_lambda_negative_elbo():
  """loss = T + λ (R + w(step) K), each term computed here from the network alone.

  T decodes each side from [0; μ_sem(other side)]; R decodes each side from
  [μ_lang(side); μ_sem(x_s)] with s = sem_side; K = KL(sem_s) + KL(lang_a) +
  KL(lang_b); w rises linearly over kl_anneal_steps.
  """
  model = VMSST(TINY, elbo_weight=0.3, kl_anneal_steps=100, kl_scale=1.0)
  params = _without_posterior_noise(init_params(model))
  batch = random_batch()
  sem = {s: _network_apply(params, VMSSTNetwork.encode_semantic, batch[f"tokens_{s}"],
                           batch[f"mask_{s}"]) for s in "ab"}
  lang = {s: _network_apply(params, VMSSTNetwork.encode_language, batch[f"tokens_{s}"],
                            batch[f"mask_{s}"], batch[f"lang_{s}"]) for s in "ab"}
  zeros = np.zeros((4, TINY.emb_dim), np.float32)
  translation = (_sentence_nll(params, batch, "a", np.concatenate([zeros, sem["b"][0]], -1))
                 + _sentence_nll(params, batch, "b", np.concatenate([zeros, sem["a"][0]], -1)))
  first = (batch["sem_side"] == 0)[:, None]
  sem_mu = np.where(first, sem["a"][0], sem["b"][0])
  sem_logvar = np.where(first, sem["a"][1]["logvar"], sem["b"][1]["logvar"])
  reconstruction = sum(
      _sentence_nll(params, batch, s, np.concatenate([lang[s][0], sem_mu], -1)) for s in "ab")
  kl = _kl(sem_mu, sem_logvar) + _kl(*lang["a"]) + _kl(*lang["b"])
  for step, weight in ((0, 0.0), (40, 0.4), (250, 1.0)):
    loss, _ = model.loss_fn(params, batch, jax.random.key(0), step=step)
    expected = np.mean(translation + 0.3 * (reconstruction + weight * kl))
    assert float(loss) == pytest.approx(expected, rel=1e-5), step
  # What TensorBoard shows are the same hand-computed terms.
  _, m = model.loss_fn(params, batch, jax.random.key(0), step=40)
  hand = {"translation_nll": translation.mean(), "reconstruction_nll": reconstruction.mean(),
          "kl_sem": _kl(sem_mu, sem_logvar).mean(), "elbo": -(reconstruction + kl).mean(),
          "kl_weight": 0.4}
  for key, value in hand.items():
    assert float(m[key]) == pytest.approx(value, rel=1e-5), key


@pytest.mark.slow  # over ~7 s (docs/results/tests/)
def test_semantic_side_alternation_selects_which_sentence_feeds_z_sem():
  model = VMSST(TINY)
  params = init_params(model)
  batch = random_batch()
  expected = {}
  for side in "ab":
    mu, aux = model.semantic(params, batch[f"tokens_{side}"], batch[f"mask_{side}"])
    expected[side] = losses.gaussian_kl(mu, aux["logvar"])
  for sides, choice in ((np.zeros(4), "aaaa"), (np.ones(4), "bbbb"), (np.arange(4) % 2, "abab")):
    batch["sem_side"] = sides.astype(np.int32)
    _, m = model.loss_fn(params, batch, jax.random.key(0))
    want = np.mean([expected[c][i] for i, c in enumerate(choice)])
    assert float(m["kl_sem"]) == pytest.approx(float(want), rel=1e-5)


@pytest.mark.slow  # over ~7 s (docs/results/tests/)
def test_vmsst_loss_is_invariant_to_padding_ids():
  model = VMSST(TINY)
  params = init_params(model)
  batch = random_batch()
  noisy = dict(batch, tokens_b=np.where(batch["mask_b"] == 0, 9, batch["tokens_b"]))
  a, _ = model.loss_fn(params, batch, jax.random.key(0), step=10)
  b, _ = model.loss_fn(params, noisy, jax.random.key(0), step=10)
  assert float(a) == pytest.approx(float(b), rel=1e-5)


def test_bitranslation_is_hand_computed_translation_without_elbo():
  """Each side decoded from the other side's μ_sem alone (no language slot)."""
  model = BiTranslation(TINY)
  params = init_params(model)
  batch = random_batch()
  mu = {s: _network_apply(params, VMSSTNetwork.encode_semantic, batch[f"tokens_{s}"],
                          batch[f"mask_{s}"])[0] for s in "ab"}
  expected = np.mean(_sentence_nll(params, batch, "a", mu["b"])
                     + _sentence_nll(params, batch, "b", mu["a"]))
  loss, m = model.loss_fn(params, batch, jax.random.key(0))
  assert float(loss) == pytest.approx(expected, rel=1e-5)
  assert "kl_sem" not in m


@pytest.mark.parametrize("options", [{}, {"similarity": "cosine", "temperature": 0.1}],
                         ids=["paper_dot", "cosine"])
def test_contrastive_is_symmetric_info_nce_of_the_embeddings(options):
  model = Contrastive(TINY, **options)
  params = init_params(model)
  batch = random_batch()
  loss, m = model.loss_fn(params, batch, jax.random.key(0))  # dropout 0 in TINY
  a = model.encode(params, batch["tokens_a"], batch["mask_a"])
  b = model.encode(params, batch["tokens_b"], batch["mask_b"])
  # Default: the paper's dot product with no temperature (§6.3).
  expected, accuracy = losses.symmetric_info_nce(
      a, b, options.get("temperature", 1.0), similarity=options.get("similarity", "dot"))
  assert float(loss) == pytest.approx(float(expected), rel=1e-5)
  assert float(m["contrastive_accuracy"]) == pytest.approx(float(accuracy))


def test_contrastive_rejects_an_unknown_similarity():
  with pytest.raises(ValueError, match="Contrastive.similarity"):
    Contrastive(TINY, similarity="euclidean")


@pytest.mark.slow
def test_vmsst_contrastive_weights_the_vmsst_loss():
  model = VMSSTContrastive(TINY, multitask_weight=0.2)
  loss, m = model.loss_fn(init_params(model), random_batch(), jax.random.key(0))
  assert float(loss) == pytest.approx(float(m["contrastive_loss"] + 0.2 * m["vmsst_loss"]),
                                      rel=1e-5)


def test_vmsst_contrastive_defaults_are_the_papers():
  """λ = 0.0005 (§6.4, 6-layer and pretrained) and the dot-product contrastive term."""
  model = VMSSTContrastive(TINY)
  assert (model.multitask_weight, model.similarity, model.temperature) == (0.0005, "dot", 1.0)
  params = init_params(model)
  batch = random_batch()
  loss, m = model.loss_fn(params, batch, jax.random.key(0))
  a = model.encode(params, batch["tokens_a"], batch["mask_a"])
  b = model.encode(params, batch["tokens_b"], batch["mask_b"])
  expected, _ = losses.symmetric_info_nce(a, b, 1.0, similarity="dot")
  assert float(m["contrastive_loss"]) == pytest.approx(float(expected), rel=1e-5)
  assert float(loss) == pytest.approx(float(expected + 0.0005 * m["vmsst_loss"]), rel=1e-5)


def test_score_batch_is_per_pair_cosine():
  model = Contrastive(TINY)
  params = init_params(model)
  batch = random_batch()
  scores = np.asarray(model.score_batch(params, batch))
  a = np.asarray(model.encode(params, batch["tokens_a"], batch["mask_a"]))
  b = np.asarray(model.encode(params, batch["tokens_b"], batch["mask_b"]))
  want = [x @ y / np.linalg.norm(x) / np.linalg.norm(y) for x, y in zip(a, b)]
  np.testing.assert_allclose(scores, want, rtol=1e-5)


# The candidate softmax: the full softmax restricted to K ids, and the full one at K ≥ V.

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


@pytest.mark.slow  # over ~7 s (docs/results/tests/)
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
