"""Each objective's loss is the documented combination of its terms."""

import jax
import numpy as np
import pytest

from vmsst_testing import TINY, init_params, random_batch
from vmsst import losses
from vmsst.objectives import BiTranslation, Contrastive, VMSST, VMSSTContrastive


@pytest.mark.slow
def test_vmsst_loss_is_translation_plus_lambda_negative_elbo():
  model = VMSST(TINY, elbo_weight=0.3, kl_anneal_steps=100, kl_scale=1.0)
  params = init_params(model)
  loss, m = model.loss_fn(params, random_batch(), jax.random.key(0), step=40)
  assert float(m["kl_weight"]) == pytest.approx(0.4)
  kl = m["kl_sem"] + m["kl_lang_a"] + m["kl_lang_b"]
  expected = m["translation_nll"] + 0.3 * (m["reconstruction_nll"] + 0.4 * kl)
  assert float(loss) == pytest.approx(float(expected), rel=1e-5)
  assert float(m["elbo"]) == pytest.approx(-float(m["reconstruction_nll"] + kl), rel=1e-5)
  for key in ("translation_token_accuracy", "reconstruction_token_accuracy"):
    assert 0.0 <= float(m[key]) <= 1.0


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


def test_vmsst_loss_is_invariant_to_padding_ids():
  model = VMSST(TINY)
  params = init_params(model)
  batch = random_batch()
  noisy = dict(batch, tokens_b=np.where(batch["mask_b"] == 0, 9, batch["tokens_b"]))
  a, _ = model.loss_fn(params, batch, jax.random.key(0), step=10)
  b, _ = model.loss_fn(params, noisy, jax.random.key(0), step=10)
  assert float(a) == pytest.approx(float(b), rel=1e-5)


def test_bitranslation_has_no_elbo():
  model = BiTranslation(TINY)
  loss, m = model.loss_fn(init_params(model), random_batch(), jax.random.key(0))
  assert float(loss) == pytest.approx(float(m["translation_nll"]))
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
