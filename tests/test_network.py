"""The network's structure: what each path sees and which parameters exist."""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np

from vmsst_testing import TINY, init_params, random_batch
from vmsst import models
from vmsst.network import VMSSTNetwork
from vmsst.objectives import BiTranslation, Contrastive, VMSST


def _translation_nll(model, params, target, target_mask, target_lang, source, source_mask):
  mu, _ = model.semantic(params, source, source_mask)
  latent = jnp.concatenate([jnp.zeros_like(mu), mu], axis=-1)
  return models.decode_nll(model, params, target, target_mask, target_lang, latent, None)[0]


def test_decoder_sees_the_source_only_through_the_latent():
  model = VMSST(TINY)
  params = init_params(model)
  b1, b2 = random_batch(seed=1), random_batch(seed=2)
  args = (b1["tokens_a"], b1["mask_a"], b1["lang_a"])
  different = _translation_nll(model, params, *args, b1["tokens_b"], b1["mask_b"])
  other = _translation_nll(model, params, *args, b2["tokens_b"], b2["mask_b"])
  assert not np.allclose(different, other)  # the source matters ...
  # ... but once μ_sem cannot depend on the source, no other path carries it.
  params = jax.tree.map(lambda x: x, params)
  params["semantic_head"]["mu"]["kernel"] = jnp.zeros_like(params["semantic_head"]["mu"]["kernel"])
  same_1 = _translation_nll(model, params, *args, b1["tokens_b"], b1["mask_b"])
  same_2 = _translation_nll(model, params, *args, b2["tokens_b"], b2["mask_b"])
  np.testing.assert_allclose(same_1, same_2, rtol=1e-6)
  assert not any("cross" in "/".join(map(str, p)) for p, _ in
                 jax.tree_util.tree_flatten_with_path(params)[0])


def test_decoder_is_causal_and_starts_with_the_language_symbol():
  model = VMSST(TINY)
  params = init_params(model)
  batch = random_batch()
  latent = jax.random.normal(jax.random.key(0), (4, 2 * TINY.emb_dim))
  decode = lambda tokens, langs: model.apply(params, tokens, jnp.ones_like(tokens), langs,
                                             latent, True, method=VMSSTNetwork.decode)
  tokens = batch["tokens_a"]
  changed = tokens.copy()
  changed[:, 5] = (changed[:, 5] + 7) % 300
  base, after = decode(tokens, batch["lang_a"]), decode(changed, batch["lang_a"])
  np.testing.assert_allclose(base[:, :6], after[:, :6], rtol=1e-5)  # inputs are shifted by 1
  assert not np.allclose(base[:, 6:], after[:, 6:])
  other_lang = decode(tokens, batch["lang_a"] + 1)
  assert not np.allclose(base[:, 0], other_lang[:, 0])


def test_semantic_embedding_ignores_padding_ids():
  model = Contrastive(TINY)
  params = init_params(model)
  batch = random_batch()
  noisy = np.where(batch["mask_a"] == 0, 17, batch["tokens_a"])
  np.testing.assert_allclose(model.encode(params, batch["tokens_a"], batch["mask_a"]),
                             model.encode(params, noisy, batch["mask_a"]), rtol=1e-5, atol=1e-6)


def test_each_objective_creates_only_the_paths_it_uses():
  vmsst = set(init_params(VMSST(TINY)))
  assert {"token_embed", "semantic_encoder", "language_encoder_0", "output_projection"} <= vmsst
  assert set(init_params(Contrastive(TINY))) == {
      "token_embed", "semantic_positions", "semantic_encoder", "semantic_head"}
  bitranslation = init_params(BiTranslation(TINY))
  assert not any(k.startswith("language") for k in bitranslation)
  # 2d × V without a language latent, 3d × V with it.
  assert bitranslation["output_projection"]["kernel"].shape == (2 * TINY.emb_dim, TINY.vocab_size)
  assert init_params(VMSST(TINY))["output_projection"]["kernel"].shape == (
      3 * TINY.emb_dim, TINY.vocab_size)


def test_ablation_switches_change_the_parameter_tree():
  shared = init_params(VMSST(dataclasses.replace(TINY, share_encoders=True)))
  assert not any(k.startswith("language_encoder") for k in shared)
  four = init_params(VMSST(dataclasses.replace(TINY, num_language_encoders=4)))
  assert {f"language_encoder_{i}" for i in range(4)} <= set(four)
  factorized = init_params(VMSST(dataclasses.replace(TINY, factorized_output=True)))
  assert factorized["output_bottleneck"]["kernel"].shape == (3 * TINY.emb_dim, TINY.emb_dim)
  assert factorized["output_projection"]["kernel"].shape == (TINY.emb_dim, TINY.vocab_size)


def test_four_language_encoders_route_by_language_symbol():
  cfg = dataclasses.replace(TINY, num_language_encoders=4)
  model = VMSST(cfg)
  params = init_params(model)
  batch = random_batch()
  encode = lambda p, langs: model.apply(p, batch["tokens_a"], batch["mask_a"], langs, True,
                                        method=VMSSTNetwork.encode_language)[0]
  langs = jnp.array([8, 9, 10, 11])  # encoders 0, 1, 2, 3
  base = encode(params, langs)
  params["language_encoder_2"] = jax.tree.map(lambda x: x + 0.5, params["language_encoder_2"])
  moved = encode(params, langs)
  changed_rows = ~np.all(np.isclose(base, moved), axis=-1)
  assert changed_rows.tolist() == [False, False, True, False]
