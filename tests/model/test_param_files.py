"""Partial parameter files: names, row slices and misfits, on small real trees."""

import jax.numpy as jnp
import numpy as np
import pytest

from vmsst.model import param_files


def _tree():
  return {"a": {"kernel": jnp.arange(12.0).reshape(4, 3)}, "b": {"scale": jnp.ones(3)}}


def test_flatten_joins_paths_with_slashes_and_unflatten_inverts_it():
  flat = param_files.flatten(_tree())
  assert sorted(flat) == ["a/kernel", "b/scale"]
  back = param_files.unflatten(flat)
  np.testing.assert_array_equal(back["a"]["kernel"], _tree()["a"]["kernel"])
  assert param_files.unflatten({"x/y/z": 1, "x/w": 2}) == {"x": {"y": {"z": 1}, "w": 2}}


@pytest.mark.parametrize("key, want", [("a/kernel[:32]", ("a/kernel", 32)),
                                       ("a/kernel", ("a/kernel", None)),
                                       ("a[:1]/kernel", ("a[:1]/kernel", None))])
def test_split_rows_reads_a_trailing_row_slice_only(key, want):
  assert param_files.split_rows(key) == want


def test_fit_problems_lists_every_unknown_name_and_wrong_shape():
  model = {"a/kernel": (4, 3), "b/scale": (3,)}
  stored = {"a/kernel[:2]": (2, 3), "b/scale": (4,), "c/bias": (1,), "a/kernel": (4, 3)}
  problems = param_files.fit_problems(stored, model)
  assert problems == ["shape of b/scale: stored (4,), model (3,)",
                      "unexpected: c/bias (the model has no c/bias)"]
  too_many_rows = param_files.fit_problems({"a/kernel[:5]": (5, 3)}, model)
  assert len(too_many_rows) == 1 and too_many_rows[0].startswith("shape of a/kernel[:5]")


def test_merge_puts_rows_in_and_keeps_the_rest():
  merged = param_files.merge(_tree(), {"a/kernel[:2]": -np.ones((2, 3))})
  kernel = np.asarray(merged["a"]["kernel"])
  np.testing.assert_array_equal(kernel[:2], -1.0)
  np.testing.assert_array_equal(kernel[2:], np.arange(6.0, 12.0).reshape(2, 3))
  np.testing.assert_array_equal(merged["b"]["scale"], np.ones(3))


def test_a_misfit_is_one_error_naming_all_problems_and_the_fix():
  with pytest.raises(ValueError) as error:
    param_files.merge(_tree(), {"a/kernel": np.ones((3, 3)), "d/x": np.ones(2)})
  message = str(error.value)
  assert "(2 problems)" in message and "a/kernel" in message and "d/x" in message
  assert "python -m vmsst.mt5_import" in message


def test_saved_file_loads_onto_the_tree_with_its_row_slice(tmp_path):
  path = str(tmp_path / "init.safetensors")
  param_files.save_params(path, {"a/kernel[:1]": np.full((1, 3), 7.0), "b/scale": np.zeros(3)})
  loaded = param_files.load_params(path, _tree())
  kernel = np.asarray(loaded["a"]["kernel"])
  np.testing.assert_array_equal(kernel[0], 7.0)
  np.testing.assert_array_equal(kernel[1:], np.arange(3.0, 12.0).reshape(3, 3))
  np.testing.assert_array_equal(loaded["b"]["scale"], np.zeros(3))
  with pytest.raises(ValueError, match="init.safetensors does not fit"):
    param_files.save_params(path, {"b/scale": np.zeros(5)})
    param_files.load_params(path, _tree())


def test_per_layer_names_map_onto_the_scan_layers_layout_and_back():
  assert param_files.scanned_name("semantic_encoder/layer_11/mlp/wo/kernel") == (
      "semantic_encoder/layers/mlp/wo/kernel", 11)
  assert param_files.scanned_name("decoder_layer_2/latent/latent_proj/kernel") == (
      "decoder/layers/latent/latent_proj/kernel", 2)
  assert param_files.scanned_name("semantic_encoder/final_norm/scale") is None
  shapes = param_files.per_layer_shapes({"language_encoder_0/layers/attention/out/kernel":
                                         (3, 2, 4, 8),
                                         "decoder/layers/pre_mlp_norm/scale": (2, 8),
                                         "token_embed/embedding": (10, 8)})
  assert shapes == {**{f"language_encoder_0/layer_{i}/attention/out/kernel": (2, 4, 8)
                       for i in range(3)},
                    "decoder_layer_0/pre_mlp_norm/scale": (8,),
                    "decoder_layer_1/pre_mlp_norm/scale": (8,),
                    "token_embed/embedding": (10, 8)}
  assert all(param_files.scanned_name(n)[0] in ("language_encoder_0/layers/attention/out/kernel",
                                                 "decoder/layers/pre_mlp_norm/scale")
             for n in shapes if n != "token_embed/embedding")


def test_per_layer_tensors_load_stacked_into_a_scanned_tree(tmp_path):
  path = str(tmp_path / "layers.safetensors")
  layers = [np.full((2, 3), float(i)) for i in range(3)]
  param_files.save_params(path, {f"enc/layer_{i}/kernel": x for i, x in enumerate(layers)}
                          | {"b/scale": np.arange(3.0)})
  tree = {"enc": {"layers": {"kernel": jnp.zeros((3, 2, 3))}}, "b": {"scale": jnp.ones(3)}}
  loaded = param_files.load_params(path, tree)
  np.testing.assert_array_equal(loaded["enc"]["layers"]["kernel"], np.stack(layers))
  np.testing.assert_array_equal(loaded["b"]["scale"], np.arange(3.0))
  arrays = param_files.load_arrays("the export", {"enc/layer_0/kernel": layers[2],
                                                  "enc/layer_1/kernel": layers[0],
                                                  "enc/layer_2/kernel": layers[1]}, tree)
  np.testing.assert_array_equal(arrays["enc"]["layers"]["kernel"][:, 0, 0], [2, 0, 1])


def test_a_stack_given_only_some_of_its_layers_is_an_error_naming_it(tmp_path):
  path = str(tmp_path / "partial.safetensors")
  param_files.save_params(path, {"enc/layer_0/kernel": np.ones((2, 3)),
                                 "enc/layer_3/kernel": np.ones((2, 3))})
  tree = {"enc": {"layers": {"kernel": jnp.zeros((3, 2, 3))}}}
  with pytest.raises(ValueError, match=r"(?s)1 problems.*unexpected: enc/layer_3/kernel"):
    param_files.load_params(path, tree)
  param_files.save_params(path, {"enc/layer_0/kernel": np.ones((2, 3))})
  with pytest.raises(ValueError, match=r"enc/layers/kernel stacks 3 layers .* only layers "
                     r"\[0\] are stored: give every layer or none"):
    param_files.load_params(path, tree)
