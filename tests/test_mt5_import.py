"""vmsst.mt5_import: a tiny random mT5, converted, computes what Hugging Face computes.

The checkpoint is built offline from an MT5Config (no download) and saved in
two layouts: as transformers 5 saves it (lm_head tied to shared.weight, not
stored) and as google/mt5-* on the Hub hold it (its own lm_head.weight).
Padding positions are compared nowhere: our masks also hide padded queries,
Hugging Face's only padded keys, and nothing downstream reads those rows.
"""

import copy
import dataclasses
import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest
# torch, transformers and sentence-transformers load in the tests that use them: each xdist
# worker imports every test module to collect it, whichever tier it runs.
from safetensors.numpy import load_file, save_file
from jax.sharding import NamedSharding, PartitionSpec as P

from vmsst_testing import TINY, init_params, random_batch
from vmsst.model import layer_stacks
from vmsst.model import layers
from vmsst.model import mt5_conversion as mt5_import
from vmsst.model import param_files
from vmsst.model import partitioning
from vmsst.model.config import NetworkConfig
from vmsst.model.network import VMSSTNetwork
from vmsst.objectives import VMSST

HF_CONFIG = dict(vocab_size=300, d_model=32, d_kv=8, num_heads=4, d_ff=64, num_layers=2,
                 num_decoder_layers=2, feed_forward_proj="gated-gelu", dropout_rate=0.0,
                 relative_attention_num_buckets=32, relative_attention_max_distance=128)
TOLERANCE = 1e-5  # measured: ≤ 2e-6 on states, ≤ 1.2e-5 on tied logits of |30|


@pytest.fixture(scope="module")
def hf(tmp_path_factory):
  """(torch model, {"tied": dir, "untied": dir}, untied lm_head [V, d])."""
  import torch  # pylint: disable=import-outside-toplevel
  import transformers  # pylint: disable=import-outside-toplevel
  torch.manual_seed(0)
  model = transformers.MT5ForConditionalGeneration(transformers.MT5Config(**HF_CONFIG)).eval()
  tied = tmp_path_factory.mktemp("mt5_tied")
  model.save_pretrained(tied)
  untied = tmp_path_factory.mktemp("mt5_untied")
  tensors = load_file(tied / "model.safetensors")
  assert "lm_head.weight" not in tensors  # transformers 5 ties it to shared.weight
  lm_head = np.random.default_rng(0).normal(0, 0.1, (300, 32)).astype(np.float32)
  save_file(tensors | {"lm_head.weight": lm_head}, untied / "model.safetensors")
  config = json.loads((tied / "config.json").read_text()) | {"tie_word_embeddings": False}
  (untied / "config.json").write_text(json.dumps(config))
  return model, {"tied": str(tied), "untied": str(untied)}, lm_head


def _converted(directory: str, **overrides):
  """(VMSST model, params with mT5's tensors merged in, Report)."""
  checkpoint = mt5_import.Checkpoint(directory)
  model = VMSST(mt5_import.network_config(checkpoint, **overrides))
  converted, report = mt5_import.convert(checkpoint, model)
  return model, param_files.merge(init_params(model), converted), report


def _assert_close(ours, theirs, mask) -> None:
  """ours ≈ theirs on real tokens ([B, L, ...] arrays, mask [B, L])."""
  real = np.asarray(mask, bool)
  np.testing.assert_allclose(np.asarray(ours)[real], np.asarray(theirs)[real],
                             rtol=TOLERANCE, atol=TOLERANCE)


def _torch(x):
  import torch  # pylint: disable=import-outside-toplevel
  return torch.from_numpy(np.asarray(x, np.int64))


def test_relative_position_buckets_equal_hugging_face():
  import torch  # pylint: disable=import-outside-toplevel
  from transformers.models.mt5.modeling_mt5 import MT5Attention  # pylint: disable=import-outside-toplevel
  for bidirectional in (True, False):
    ours = layers.relative_position_buckets(300, bidirectional=bidirectional,
                                            num_buckets=32, max_distance=128)
    offsets = torch.arange(300)[None, :] - torch.arange(300)[:, None]
    theirs = MT5Attention._relative_position_bucket(  # pylint: disable=protected-access
        offsets, bidirectional=bidirectional, num_buckets=32, max_distance=128)
    np.testing.assert_array_equal(ours, theirs.numpy())


def test_relative_position_bias_gathers_the_exact_buckets_at_any_length():
  """Clipped offsets into a ±max_distance table: the same buckets as the full [L, L]."""
  cfg = dataclasses.replace(TINY, relative_attention=True, relative_attention_max_distance=20,
                            relative_attention_num_buckets=8)
  for bidirectional in (True, False):
    bias = layers.RelativePositionBias(cfg, bidirectional=bidirectional)
    table = jnp.arange(8 * 2, dtype=jnp.float32).reshape(8, 2)  # row b, head h: 2b + h
    out = bias.apply({"params": {"embedding": table}}, 50)
    buckets = layers.relative_position_buckets(50, bidirectional=bidirectional,
                                               num_buckets=8, max_distance=20)
    np.testing.assert_array_equal(out[0, 1], 2 * buckets + 1)
    assert buckets.max() == 7 and (buckets == 7).sum() > 50  # Offsets past 20 are clipped.


@pytest.mark.slow
def test_semantic_encoder_token_states_equal_the_mt5_encoder(hf):
  import torch  # pylint: disable=import-outside-toplevel
  torch_model, dirs, _ = hf
  model, params, _ = _converted(dirs["untied"])
  for seed in (0, 1):
    batch = random_batch(batch_size=4, length=12, seed=seed)
    _, aux = model.semantic(params, batch["tokens_a"], batch["mask_a"])
    with torch.no_grad():
      theirs = torch_model.encoder(input_ids=_torch(batch["tokens_a"]),
                                   attention_mask=_torch(batch["mask_a"])).last_hidden_state
    _assert_close(aux["token_states"], theirs.numpy(), batch["mask_a"])


@pytest.mark.slow  # over ~7 s (docs/results/tests/)
def test_shallower_language_encoder_equals_the_first_mt5_layers(hf):
  import torch  # pylint: disable=import-outside-toplevel
  torch_model, dirs, _ = hf
  model, params, _ = _converted(dirs["untied"], num_language_encoder_layers=1,
                                encoder_language_embedding=False)
  # An identity μ head exposes the pooled token states of encode_language.
  params["language_head"]["mu"]["kernel"] = jnp.eye(32)
  batch = random_batch(seed=2)
  mu, _ = model.apply(params, batch["tokens_b"], batch["mask_b"], batch["lang_b"], True,
                      method=VMSSTNetwork.encode_language)
  one_block = copy.deepcopy(torch_model.encoder)
  one_block.block = one_block.block[:1]
  with torch.no_grad():
    states = one_block(input_ids=_torch(batch["tokens_b"]),
                       attention_mask=_torch(batch["mask_b"])).last_hidden_state.numpy()
  mask = batch["mask_b"][..., None]
  pooled = (states * mask).sum(1) / mask.sum(1)
  np.testing.assert_allclose(mu, pooled, atol=TOLERANCE)


@pytest.mark.slow  # over ~7 s (docs/results/tests/)
@pytest.mark.parametrize("layout", ["untied", "tied"])
def test_decoder_without_latent_equals_the_mt5_decoder_without_cross_attention(hf, layout):
  import torch  # pylint: disable=import-outside-toplevel
  torch_model, dirs, lm_head = hf
  model, params, _ = _converted(dirs[layout])
  assert model.network_config.tie_output_embedding == (layout == "tied")
  # With the latent's projection at zero our layer is self-attention + FFN, as
  # is Hugging Face's decoder block called without encoder states.
  for i in range(2):
    kernel = params[f"decoder_layer_{i}"]["latent"]["latent_proj"]["kernel"]
    params[f"decoder_layer_{i}"]["latent"]["latent_proj"]["kernel"] = jnp.zeros_like(kernel)
  # The language table's rows set to mT5's start token (pad, id 0): the
  # decoder input is then Hugging Face's shift_right of the targets.
  table = params["language_embed"]["embedding"]
  params["language_embed"]["embedding"] = jnp.broadcast_to(
      params["token_embed"]["embedding"][0], table.shape)
  batch = random_batch(seed=3)
  logits = model.apply(params, batch["tokens_a"], batch["mask_a"], batch["lang_a"],
                       jnp.zeros((4, 64)), True, method=VMSSTNetwork.decode)
  inputs = np.concatenate([np.zeros((4, 1), np.int32), batch["tokens_a"][:, :-1]], axis=1)
  input_mask = np.concatenate([np.ones((4, 1), np.int32), batch["mask_a"][:, :-1]], axis=1)
  with torch.no_grad():
    h = torch_model.decoder(input_ids=_torch(inputs), attention_mask=_torch(input_mask),
                            use_cache=False).last_hidden_state
    theirs = torch_model.lm_head(h).numpy() if layout == "tied" else h.numpy() @ lm_head.T
  _assert_close(logits, theirs, input_mask)


def test_report_accounts_for_every_tensor_and_drops_cross_attention(hf):
  _, dirs, _ = hf
  checkpoint = mt5_import.Checkpoint(dirs["untied"])
  _, _, report = _converted(dirs["untied"])
  assert set(report.mapped.values()) | set(report.dropped) == set(checkpoint.names)
  cross = [n for n, r in report.dropped.items() if r == mt5_import.CROSS_ATTENTION]
  assert len(cross) == 2 * 5  # q, k, v, o and the norm of each decoder block
  assert sum(report.sizes[n] for n in cross) == 2 * (4 * 32 * 32 + 32)
  assert report.mapped["output_projection/kernel[:32]"] == "lm_head.weight"
  assert report.mapped["language_encoder_0/layer_1/mlp/wi_1/kernel"] == (
      "encoder.block.1.layer.1.DenseReluDense.wi_1.weight")
  assert {n.split("/")[0] for n in report.fresh} == {
      "decoder_layer_0", "decoder_layer_1", "semantic_head", "language_head",
      "output_projection", "language_embed"}
  assert "language_embed/embedding" in report.fresh  # Language ids are no mT5 pieces.
  assert "  language_embed/embedding" in report.summary().split("freshly initialised")[1]
  assert "cross-attention" in report.summary() and "10 tensors" in report.summary()


def test_incompatible_networks_fail_listing_every_problem(hf):
  _, dirs, _ = hf
  checkpoint = mt5_import.Checkpoint(dirs["untied"])
  deeper = VMSST(mt5_import.network_config(checkpoint, num_encoder_layers=3))
  with pytest.raises(ValueError, match="encoder has only 2 layers"):
    mt5_import.convert(checkpoint, deeper)
  wrong = VMSST(mt5_import.network_config(checkpoint, emb_dim=64,
                                          scale_attention_logits=True))
  with pytest.raises(ValueError, match="(?s)emb_dim = 64.*scale_attention_logits"):
    mt5_import.convert(checkpoint, wrong)


def test_load_params_places_tensors_and_row_blocks_and_lists_misfits(tmp_path):
  params = {"a": {"kernel": jnp.zeros((4, 3))}, "b": {"scale": jnp.zeros((3,))}}
  path = str(tmp_path / "ok.safetensors")
  param_files.save_params(path, {"a/kernel[:2]": np.ones((2, 3)), "b/scale": np.arange(3.0)})
  loaded = param_files.load_params(path, params)
  np.testing.assert_array_equal(loaded["a"]["kernel"], [[1] * 3] * 2 + [[0] * 3] * 2)
  np.testing.assert_array_equal(loaded["b"]["scale"], [0, 1, 2])
  bad = str(tmp_path / "bad.safetensors")
  param_files.save_params(bad, {"a/kernel": np.ones((3, 4)), "c/x": np.ones(1)})
  with pytest.raises(ValueError, match=r"(?s)2 problems.*shape of a/kernel.*unexpected: c/x"):
    param_files.load_params(bad, params)


@pytest.mark.skipif(jax.device_count() < 8, reason="needs 8 (forced CPU) devices")
def test_load_params_keeps_each_parameters_sharding(tmp_path):
  mesh = partitioning.make_mesh(4, 2, devices=jax.devices()[:8])
  sharding = NamedSharding(mesh, P(None, "model"))
  params = {"output_projection": {"kernel": jax.device_put(jnp.zeros((6, 4)), sharding)}}
  path = str(tmp_path / "rows.safetensors")
  rows = np.arange(8.0).reshape(2, 4)
  param_files.save_params(path, {"output_projection/kernel[:2]": rows})
  kernel = param_files.load_params(path, params)["output_projection"]["kernel"]
  assert kernel.sharding == sharding
  np.testing.assert_array_equal(kernel, np.concatenate([rows, np.zeros((4, 4))]))


def _tree(params) -> dict[str, tuple[int, ...]]:
  return {k: tuple(v.shape) for k, v in param_files.flatten(params).items()}


def _layer(prefix: str, mlp_names=("wi", "wo"), norm=("bias", "scale"),
           bias=True) -> dict[str, tuple[int, ...]]:
  """An encoder layer of TINY (d 32, 2 heads of 16, MLP 64) under `prefix`."""
  tree = {f"{prefix}/attention/{n}/kernel": (32, 2, 16) for n in ("query", "key", "value")}
  tree[f"{prefix}/attention/out/kernel"] = (2, 16, 32)
  for n in mlp_names:
    tree[f"{prefix}/mlp/{n}/kernel"] = (64, 32) if n == "wo" else (32, 64)
    if bias:
      tree[f"{prefix}/mlp/{n}/bias"] = (32,) if n == "wo" else (64,)
  for norm_name in ("pre_attention_norm", "pre_mlp_norm"):
    tree.update({f"{prefix}/{norm_name}/{p}": (32,) for p in norm})
  return tree


def test_default_network_config_keeps_its_parameter_tree():
  expected = {"token_embed/embedding": (300, 32), "output_projection/kernel": (96, 300),
              "output_projection/bias": (300,), "language_embed/embedding": (224, 32)}
  for stack in ("semantic", "language"):
    positions = f"{stack}_positions" + ("_0" if stack == "language" else "")
    name = "semantic_encoder" if stack == "semantic" else "language_encoder_0"
    expected |= _layer(f"{name}/layer_0") | {f"{positions}/positions": (12, 32)}
    expected |= {f"{name}/final_norm/bias": (32,), f"{name}/final_norm/scale": (32,)}
    expected |= {f"{stack}_head/{n}/{p}": (32, 32) if p == "kernel" else (32,)
                 for n in ("mu", "logvar") for p in ("kernel", "bias")}
  expected |= _layer("decoder_layer_0") | {
      "decoder_positions/positions": (12, 32), "decoder_final_norm/bias": (32,),
      "decoder_final_norm/scale": (32,), "decoder_layer_0/latent/latent_proj/kernel": (96, 32),
      "decoder_layer_0/latent/latent_proj/bias": (32,),
      "decoder_layer_0/latent/pre_latent_norm/bias": (32,),
      "decoder_layer_0/latent/pre_latent_norm/scale": (32,)}
  assert _tree(init_params(VMSST(TINY))) == expected


def test_t5_switches_replace_positions_norms_mlp_and_biases():
  t5 = dataclasses.replace(TINY, relative_attention=True, rms_norm=True, gated_mlp=True,
                           projection_bias=False, scale_attention_logits=False)
  tree = _tree(init_params(VMSST(t5)))
  assert not [n for n in tree if "positions" in n or n.endswith("/bias")]
  assert tree["semantic_encoder/relative_position_bias/embedding"] == (32, 2)
  assert tree["language_encoder_0/relative_position_bias/embedding"] == (32, 2)
  assert tree["decoder_relative_position_bias/embedding"] == (32, 2)
  layer = {k: v for k, v in tree.items() if k.startswith("semantic_encoder/layer_0/")}
  assert layer == _layer("semantic_encoder/layer_0", ("wi_0", "wi_1", "wo"), ("scale",),
                         bias=False)
  assert NetworkConfig().relative_attention is False  # defaults stay the original model


@pytest.mark.skipif(jax.device_count() < 8, reason="needs 8 (forced CPU) devices")
def test_per_layer_tensors_stack_onto_a_sharded_layer_axis(tmp_path):
  """Each device reads only its layers' slices (the layer axis sharded here to show it)."""
  mesh = partitioning.make_mesh(4, 2, devices=jax.devices()[:8])
  sharding = NamedSharding(mesh, P("data", None, "model"))
  params = {"semantic_encoder": {"layers": {"mlp": {"wo": {"kernel": jax.device_put(
      jnp.zeros((4, 6, 4)), sharding)}}}}}
  layers = np.arange(4 * 6 * 4, dtype=np.float32).reshape(4, 6, 4)
  path = str(tmp_path / "layers.safetensors")
  param_files.save_params(path, {f"semantic_encoder/layer_{i}/mlp/wo/kernel": layers[i]
                                 for i in range(4)})
  kernel = param_files.load_params(path, params)["semantic_encoder"]["layers"]["mlp"]["wo"][
      "kernel"]
  assert kernel.sharding == sharding
  np.testing.assert_array_equal(kernel, layers)


def _scanned_twin(model):
  return VMSST(dataclasses.replace(model.network_config, scan_layers=True))


def test_the_converted_file_is_the_same_for_a_scanned_run(hf):
  """mt5_import writes layer_<i> names whether or not the run scans its layers."""
  _, dirs, _ = hf
  checkpoint = mt5_import.Checkpoint(dirs["untied"])
  unrolled = VMSST(mt5_import.network_config(checkpoint))
  converted, report = mt5_import.convert(checkpoint, unrolled)
  scanned, scanned_report = mt5_import.convert(checkpoint, _scanned_twin(unrolled))
  assert scanned.keys() == converted.keys()
  assert "semantic_encoder/layer_1/attention/query/kernel" in scanned
  assert scanned_report.mapped == report.mapped
  assert sorted(scanned_report.fresh) == sorted(report.fresh)
  for name, value in converted.items():
    np.testing.assert_array_equal(scanned[name], value)


@pytest.mark.slow
def test_mt5_weights_loaded_into_scanned_layers_give_the_unrolled_network(hf, tmp_path):
  """The mT5 file stacked into the scan_layers layout is the same network.

  Loaded alone, the mT5 tensors give the same encoder states (every tensor of
  the encoder is mT5's); every parameter of the unrolled network written to
  a file and loaded into the scanned one gives its loss (dropout off: scan
  splits the dropout key per layer).
  """
  _, dirs, _ = hf
  checkpoint = mt5_import.Checkpoint(dirs["untied"])
  unrolled = VMSST(mt5_import.network_config(checkpoint, dropout_rate=0.0))
  scanned = _scanned_twin(unrolled)
  mt5_file = str(tmp_path / "mt5.safetensors")
  param_files.save_params(mt5_file, mt5_import.convert(checkpoint, unrolled)[0])
  plain = param_files.load_params(mt5_file, init_params(unrolled))
  stacked = param_files.load_params(mt5_file, init_params(scanned))
  assert "layers" in stacked["semantic_encoder"] and "decoder" in stacked
  batch = random_batch(batch_size=4, length=12, seed=4)
  states = [model.semantic(p, batch["tokens_a"], batch["mask_a"])[1]["token_states"]
            for model, p in ((unrolled, plain), (scanned, stacked))]
  _assert_close(states[1], states[0], batch["mask_a"])

  everything = str(tmp_path / "unrolled.safetensors")
  param_files.save_params(everything, param_files.flatten(plain))
  stacked = param_files.load_params(everything, init_params(scanned))
  want = layer_stacks.stack_layer_params(plain)
  assert jax.tree.structure(stacked) == jax.tree.structure(want)
  for got, expected in zip(jax.tree.leaves(stacked), jax.tree.leaves(want)):
    np.testing.assert_array_equal(got, expected)
  rng = jax.random.key(5)
  np.testing.assert_allclose(scanned.loss_fn(stacked, batch, rng)[0],
                             unrolled.loss_fn(plain, batch, rng)[0], rtol=1e-6)
