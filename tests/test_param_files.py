"""Partial parameter files: names, row slices and misfits, on small real trees."""

import jax.numpy as jnp
import numpy as np
import pytest

from vmsst import param_files


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
