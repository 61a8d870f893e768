"""The network's structure: what each path sees and which parameters exist."""

import contextlib
import dataclasses

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from vmsst_testing import ROOT, TINY, init_params, param_shapes, random_batch
from vmsst.training import configurables
from vmsst.base.gin_utils import gin
from vmsst.model import layer_stacks
from vmsst.model import models
from vmsst.model import partitioning
from vmsst.model.config import NetworkConfig
from vmsst.base.languages import LANGUAGES
from vmsst.model.network import VMSSTNetwork
from vmsst.objectives import BiTranslation, Contrastive, VMSST
from vmsst.objectives import bitranslation

configurables.register()  # what the run files name (imports TensorFlow: at collection)


def _translation_nll(model, params, target, target_mask, target_lang, source, source_mask):
  mu, _ = model.semantic(params, source, source_mask)
  latent = jnp.concatenate([jnp.zeros_like(mu), mu], axis=-1)
  return bitranslation.decode_nll(model, params, target, target_mask, target_lang, latent, None)[0]


@pytest.mark.slow  # over ~7 s (docs/results/tests/)
def test_decoder_sees_the_source_only_through_the_latent():
  model = VMSST(TINY)
  params = init_params(model)
  # One compile for the four calls (same shapes); op by op, each call dispatched every primitive.
  translation_nll = jax.jit(lambda *args: _translation_nll(model, *args))
  b1, b2 = random_batch(seed=1), random_batch(seed=2)
  args = (b1["tokens_a"], b1["mask_a"], b1["lang_a"])
  different = translation_nll(params, *args, b1["tokens_b"], b1["mask_b"])
  other = translation_nll(params, *args, b2["tokens_b"], b2["mask_b"])
  assert not np.allclose(different, other)  # the source matters ...
  # ... but once μ_sem cannot depend on the source, no other path carries it.
  params = jax.tree.map(lambda x: x, params)
  params["semantic_head"]["mu"]["kernel"] = jnp.zeros_like(params["semantic_head"]["mu"]["kernel"])
  same_1 = translation_nll(params, *args, b1["tokens_b"], b1["mask_b"])
  same_2 = translation_nll(params, *args, b2["tokens_b"], b2["mask_b"])
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


def test_language_ids_index_their_own_table_not_the_vocabulary():
  """Language id i is row i of language_embed: token rows never enter for it."""
  model = VMSST(TINY)
  params = init_params(model)
  boxed = jax.eval_shape(lambda: model.get_initial_variables(
      jax.random.key(0), models.batch_shapes(2, 8)))["params"]
  assert boxed["language_embed"]["embedding"].names == ("languages", "embed")
  assert params["language_embed"]["embedding"].shape == (len(LANGUAGES), TINY.emb_dim)
  assert dict(partitioning.LOGICAL_AXIS_RULES)["languages"] is None
  batch = random_batch()
  tokens, mask = batch["tokens_a"], batch["mask_a"]
  # Ids that are no token of the batch (nor padding), so their token rows matter to nothing.
  langs = jnp.asarray(np.setdiff1d(np.arange(1, len(LANGUAGES)), tokens)[[0, 5, 10, -1]])
  latent = jax.random.normal(jax.random.key(0), (4, 2 * TINY.emb_dim))

  def paths(p):
    lang_mu = model.apply(p, tokens, mask, langs, True, method=VMSSTNetwork.encode_language)[0]
    logits = model.apply(p, tokens, mask, langs, latent, True, method=VMSSTNetwork.decode)
    return lang_mu, logits[:, 0]

  base = paths(params)
  # (A random shift: a constant one would vanish in the layer norms' mean.)
  shift = jax.random.normal(jax.random.key(2), (TINY.emb_dim,))
  # The token rows with the same ids as the languages: not read for the language.
  token_rows = params["token_embed"]["embedding"].at[langs].add(shift)
  untouched = paths({**params, "token_embed": {"embedding": token_rows}})
  # ... but the language rows are (encoder input and decoder start, row by row).
  language_rows = params["language_embed"]["embedding"].at[langs[2]].add(shift)
  moved = paths({**params, "language_embed": {"embedding": language_rows}})
  for before, tokens_moved, language_moved in zip(base, untouched, moved):
    changed = lambda x: ~np.all(np.isclose(before, x, atol=1e-6), axis=-1)
    assert not changed(tokens_moved).any()
    assert changed(language_moved).tolist() == [False, False, True, False]


def test_without_decoder_language_embedding_translation_reads_the_language_off_the_prefix():
  """The paper's "no dec. l.e." ablation (§7.1), in a translation term (§4).

  The latent is [0; μ_sem(source)] (bitranslation.translation_latent). With the
  decoder language embedding the first token is predicted knowing the target
  language; without it nothing carries the language id, so the first
  position is the same for every target language and the decoder can only
  read the language off the teacher-forced prefix x_<t.
  """
  batch = random_batch()
  mu = jax.random.normal(jax.random.key(1), (4, TINY.emb_dim))
  latent = bitranslation.translation_latent(mu[:2], mu[2:], TINY.emb_dim)
  targets = batch["tokens_a"]
  other_targets = np.concatenate([targets[:, :1], (targets[:, 1:] + 5) % 300], axis=1)
  langs, other_langs = batch["lang_a"], (batch["lang_a"] + 1) % len(LANGUAGES)
  for on in (True, False):
    model = VMSST(dataclasses.replace(TINY, decoder_language_embedding=on))
    params = init_params(model)
    decode = lambda t, l: model.apply(params, t, jnp.ones_like(t), l, latent, True,
                                      method=VMSSTNetwork.decode)
    base = decode(targets, langs)
    assert np.allclose(base[:, 0], decode(targets, other_langs)[:, 0]) != on
    if not on:  # The language id reaches no position; the prefix reaches all after it.
      np.testing.assert_allclose(base, decode(targets, other_langs), rtol=1e-6)
      after = decode(other_targets, langs)
      np.testing.assert_allclose(base[:, :2], after[:, :2], rtol=1e-5)
      assert not np.allclose(base[:, 2:], after[:, 2:])


@pytest.mark.slow
def test_without_decoder_language_embedding_only_the_elbo_sees_the_language_id():
  """VMSST's loss under the ablation: the language id reaches the ELBO's
  reconstructions through z_lang ~ q(z_lang | x, language), never the
  translation terms (§4: p(x_i | μ_sem(x_j)))."""
  model = VMSST(dataclasses.replace(TINY, decoder_language_embedding=False))
  params = init_params(model)
  batch = random_batch()
  relabelled = {**batch, "lang_a": (batch["lang_a"] + 1) % len(LANGUAGES),
                "lang_b": (batch["lang_b"] + 3) % len(LANGUAGES)}
  terms = jax.jit(lambda b: model.loss_fn(params, b, jax.random.key(0), step=10)[1])
  before, after = terms(batch), terms(relabelled)  # one compile: the same shapes
  np.testing.assert_allclose(before["translation_nll"], after["translation_nll"], rtol=1e-6)
  assert not np.isclose(before["reconstruction_nll"], after["reconstruction_nll"], rtol=1e-6)


def test_semantic_embedding_ignores_padding_ids():
  model = Contrastive(TINY)
  params = init_params(model)
  batch = random_batch()
  noisy = np.where(batch["mask_a"] == 0, 17, batch["tokens_a"])
  np.testing.assert_allclose(model.encode(params, batch["tokens_a"], batch["mask_a"]),
                             model.encode(params, noisy, batch["mask_a"]), rtol=1e-5, atol=1e-6)


def test_each_objective_creates_only_the_paths_it_uses():
  vmsst = set(init_params(VMSST(TINY)))
  assert {"token_embed", "language_embed", "semantic_encoder", "language_encoder_0",
          "output_projection"} <= vmsst
  assert set(init_params(Contrastive(TINY))) == {
      "token_embed", "semantic_positions", "semantic_encoder", "semantic_head"}
  bitranslation = init_params(BiTranslation(TINY))
  # The decoder's first position reads the language table; no language encoder.
  assert "language_embed" in bitranslation
  assert not any(k.startswith(("language_encoder", "language_head")) for k in bitranslation)
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


def test_four_language_encoders_route_by_language_id():
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


# --- memory switches: remat and nn.scan change how layers run, not what they compute.

MEMORY_CFG = dataclasses.replace(TINY, num_encoder_layers=2, num_language_encoder_layers=2,
                                 num_decoder_layers=2, dropout_rate=0.1)


def _loss_and_grads(model, params, batch, rng):
  return jax.jit(jax.value_and_grad(lambda p: model.loss_fn(p, batch, rng)[0]))(params)


def _max_difference(a, b):
  assert jax.tree.structure(a) == jax.tree.structure(b)
  return max(float(jnp.max(jnp.abs(x - y))) for x, y in zip(jax.tree.leaves(a),
                                                             jax.tree.leaves(b)))


@pytest.mark.slow
def test_remat_keeps_parameters_loss_and_gradients():
  """With dropout on: remat replays the same dropout masks in the backward pass.

  One layer a stack (TINY): remat wraps each layer on its own, and one puts every kind
  (semantic and language encoder, decoder) under each policy; a second layer a stack only
  lengthened the three compiles (the scan test below keeps two, which stacking needs).
  """
  cfg = dataclasses.replace(TINY, dropout_rate=0.1)
  batch, rng = random_batch(), jax.random.key(3)
  plain = VMSST(cfg)
  params = init_params(plain)
  loss, grads = _loss_and_grads(plain, params, batch, rng)
  for policy in ("full", "dots_saveable"):
    model = VMSST(dataclasses.replace(cfg, remat=policy))
    assert jax.tree.structure(param_shapes(model)) == jax.tree.structure(params)
    remat_loss, remat_grads = _loss_and_grads(model, params, batch, rng)
    np.testing.assert_allclose(remat_loss, loss, rtol=1e-6)
    assert _max_difference(remat_grads, grads) < 1e-5
  with pytest.raises(ValueError, match="NetworkConfig.remat"):
    dataclasses.replace(cfg, remat="everything")


# T5.1.1's switches (gin/models/sizes/mt5_large.gin), the architecture of every
# VMSST paper run; the random 24-layer runs scan it (gin/models/memory/scan.gin).
T5_1_1 = dict(relative_attention=True, rms_norm=True, gated_mlp=True, projection_bias=False,
              scale_attention_logits=False, tie_output_embedding=False)


@pytest.mark.slow
@pytest.mark.parametrize("architecture,remat", [({}, "none"), (T5_1_1, "full")],
                         ids=["original", "t5_1_1"])
def test_scan_layers_is_the_same_network_on_stacked_parameters(architecture, remat):
  """Scanned layers split the dropout key per layer, so compare without dropout.

  The unscanned parameters stacked by layer_stacks.stack_layer_params give the
  scanned network the same loss and the stacked gradients (under T5.1.1's
  switches too: each stack's one relative position bias is shared by the scan).
  The scan body is rematerialised or not whatever the architecture
  (layer_stacks.scanned_layers), so each architecture takes one remat setting:
  T5.1.1 the paper's 24-layer runs' (scan.gin with remat.gin), the original none.
  """
  cfg = dataclasses.replace(MEMORY_CFG, dropout_rate=0.0, **architecture)
  batch, rng = random_batch(), jax.random.key(3)
  plain = VMSST(cfg)
  params = init_params(plain)
  loss, grads = _loss_and_grads(plain, params, batch, rng)
  model = VMSST(dataclasses.replace(cfg, scan_layers=True, remat=remat))
  scanned_init = param_shapes(model)  # shapes only: no initialiser runs
  stacked = layer_stacks.stack_layer_params(params)
  assert jax.tree.structure(scanned_init) == jax.tree.structure(stacked)
  wi = "wi_0" if cfg.gated_mlp else "wi"
  assert stacked["semantic_encoder"]["layers"]["mlp"][wi]["kernel"].shape == (
      2, cfg.emb_dim, cfg.mlp_dim)
  assert "decoder_layer_0" not in scanned_init and "decoder" in scanned_init
  count = lambda tree: sum(x.size for x in jax.tree.leaves(tree))
  assert count(scanned_init) == count(params)
  scan_loss, scan_grads = _loss_and_grads(model, stacked, batch, rng)
  np.testing.assert_allclose(scan_loss, loss, rtol=1e-6)
  assert _max_difference(scan_grads, layer_stacks.stack_layer_params(grads)) < 1e-5


def test_scanned_parameters_carry_the_replicated_layers_axis():
  model = VMSST(dataclasses.replace(TINY, scan_layers=True))
  boxed = jax.eval_shape(lambda: model.get_initial_variables(
      jax.random.key(0), models.batch_shapes(2, 8)))["params"]
  spec = boxed["semantic_encoder"]["layers"]["mlp"]["wi"]["kernel"].names
  assert spec == ("layers", "embed", "mlp")
  assert dict(partitioning.LOGICAL_AXIS_RULES)["layers"] is None


@pytest.mark.slow
def test_scanned_and_rematerialised_decoder_is_still_causal():
  model = VMSST(dataclasses.replace(TINY, num_decoder_layers=2, scan_layers=True,
                                    remat="full"))
  params = init_params(model)
  batch = random_batch()
  latent = jax.random.normal(jax.random.key(0), (4, 2 * TINY.emb_dim))
  # One compile for both calls (same shapes); op by op, each dispatched every primitive.
  decode = jax.jit(lambda tokens: model.apply(params, tokens, jnp.ones_like(tokens),
                                              batch["lang_a"], latent, True,
                                              method=VMSSTNetwork.decode))
  changed = batch["tokens_a"].copy()
  changed[:, 5] = (changed[:, 5] + 7) % 300
  base, after = decode(batch["tokens_a"]), decode(changed)
  np.testing.assert_allclose(base[:, :6], after[:, :6], rtol=1e-5)
  assert not np.allclose(base[:, 6:], after[:, 6:])


def test_memory_gin_files_set_the_switches():
  gin.clear_config()
  gin.parse_config_files_and_bindings(
      [str(ROOT / "gin/models/memory/remat.gin"), str(ROOT / "gin/models/memory/scan.gin")],
      [], finalize_config=False)
  try:
    cfg = NetworkConfig()
  finally:
    gin.clear_config()
  assert (cfg.remat, cfg.scan_layers) == ("full", True)


@pytest.mark.slow
def test_dropout_keeps_flax_masks_and_row_keys_make_masks_per_row():
  from vmsst.model import layers  # pylint: disable=import-outside-toplevel
  x = jnp.ones((6, 5, 40))
  rng = {"dropout": jax.random.key(3)}
  ours = layers.Dropout(0.25).apply({}, x, False, rngs=rng)
  flax_masks = nn.Dropout(0.25).apply({}, x, False, rngs=rng)
  np.testing.assert_array_equal(ours, flax_masks)  # same values, only materialised
  keys = jax.random.split(jax.random.key(7), 6)
  with layers.row_dropout_keys(keys):
    whole = layers.Dropout(0.25).apply({}, x, False, rngs=rng)
    with pytest.raises(ValueError, match="6 keys for a batch of 2 rows"):
      layers.Dropout(0.25).apply({}, x[:2], False, rngs=rng)
  with layers.row_dropout_keys(keys[2:4]):
    rows = layers.Dropout(0.25).apply({}, x[2:4], False, rngs=rng)
  np.testing.assert_array_equal(rows, whole[2:4])  # a row's mask ignores its batch-mates
  np.testing.assert_allclose(np.unique(whole), [0.0, 1 / 0.75], rtol=1e-6)
  assert 0.2 < float(np.mean(whole == 0)) < 0.3
  assert not np.array_equal(whole[0], whole[1])  # and differs between rows


def test_dropout_of_every_unit_gives_zeros_and_zero_gradients():
  from vmsst.model import layers  # pylint: disable=import-outside-toplevel
  x, rng = jnp.ones((2, 3, 8)), {"dropout": jax.random.key(0)}
  for keys in (None, jax.random.split(jax.random.key(1), 2)):
    with layers.row_dropout_keys(keys) if keys is not None else contextlib.nullcontext():
      grad = jax.grad(lambda x: layers.Dropout(1.0).apply({}, x, False, rngs=rng).sum())(x)
      np.testing.assert_array_equal(layers.Dropout(1.0).apply({}, x, False, rngs=rng), 0.0)
    np.testing.assert_array_equal(grad, 0.0)
