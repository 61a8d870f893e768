"""Model directories an earlier vmsst wrote: restoring one is one error naming the fix, and the fix works.

Two kinds exist: directories from before model.json (config.gin only) and
checkpoints from before the language table (no `language_embed`; language ids
were `<2xxx>` vocabulary pieces). Both are built here from the session's tiny
trained directory. The fix the error names, a fresh run started from the old
parameters (`train.init_params`), is run on a directory of both kinds at once
(as every real one is: the language table came first).
"""

import re
import shutil

import jax
import numpy as np
import orbax.checkpoint as ocp
import pytest

import vmsst_testing
from vmsst.base import cli
from vmsst.encoding import restore
from vmsst.base.gin_utils import gin
from vmsst.training import checkpointing


def _fix_named(model_dir) -> str:
  """The error's fix for model_dir, as a regular expression."""
  return (r"an earlier vmsst wrote it.*python -m vmsst\.train --gin_file=gin/runs/.*"
          r"--gin\.train\.init_params=\"'" + re.escape(str(model_dir)) + r"'\".*writes model\.json")


@pytest.fixture(scope="module")
def old_dir(tiny_model, tmp_path_factory):
  """(a MODEL_DIR without model.json and without the language table, its params)."""
  model_dir, params = tiny_model
  old = tmp_path_factory.mktemp("old") / "vmsst"
  old.mkdir()
  for name in ("config.gin", "spm.model"):
    shutil.copy(model_dir / name, old / name)
  params = {k: v for k, v in params.items() if k != "language_embed"}
  manager = ocp.CheckpointManager(str(old / "checkpoints"))
  manager.save(4, args=ocp.args.StandardSave({"step": np.int32(4), "params": params}))
  manager.wait_until_finished()
  return old, params


def test_a_directory_without_model_json_is_one_error_naming_the_fix(tiny_model, tmp_path):
  model_dir, _ = tiny_model
  old = tmp_path / "old"
  shutil.copytree(model_dir, old)
  (old / "model.json").unlink()
  with pytest.raises(cli.UserError, match=r"(?s)model\.json not found beside config\.gin: "
                     + _fix_named(old)):
    restore.restore(str(old))


def test_a_checkpoint_without_the_language_table_is_one_error_naming_the_fix(old_dir, tiny_model):
  old, _ = old_dir
  shutil.copy(tiny_model[0] / "model.json", old / "model.json")
  try:
    with pytest.raises(cli.UserError, match=r"(?s)has no language table \(params/language_embed\): "
                       + _fix_named(old)):
      restore.restore(str(old))
  finally:
    (old / "model.json").unlink()


def test_resuming_such_a_checkpoint_names_the_same_fix(old_dir, tiny_model):
  old, params = old_dir
  shapes = lambda tree: jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype), tree)
  with pytest.raises(checkpointing.IncompatibleCheckpointError,
                     match=r"(?s)params/language_embed/embedding: saved \(absent\).*" + _fix_named(old)):
    checkpointing.check_compatible({"params": shapes(params)},
                                   {"params": shapes(tiny_model[1])}, str(old / "checkpoints"), 4)


@pytest.mark.slow
def test_the_named_fix_writes_a_directory_that_restores(old_dir, data_dir, tiny_vocab_path,
                                                        tmp_path):
  """The fix's run (one step here) starts from the old parameters and writes model.json."""
  old, params = old_dir
  new = tmp_path / "new"
  from vmsst.training import loop  # pylint: disable=import-outside-toplevel
  vmsst_testing.configure_small_run(data_dir, tiny_vocab_path, new, steps=1,
                                    extra=["train.evaluator = None",
                                           f"train.init_params = '{old}'"])
  try:
    start = loop.train()
  finally:
    gin.clear_config()
  assert (new / "model.json").is_file()
  restored = restore.restore(str(new))
  assert restored.step == 1 and "language_embed" in restored.params
  jax.tree.map(np.testing.assert_array_equal, jax.device_get(restored.params),
               jax.device_get(start["params"]))
