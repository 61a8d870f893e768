"""Checkpoints from before the language table (language ids were `<2xxx>` vocabulary pieces).

Such a directory has an spm.model with one user-defined piece per language and
no `language_embed` parameter; the network embedded a language as the token
row of its piece. Built here from the session's tiny trained directory: its
vocabulary rewritten with the pieces (vmsst_testing.legacy_vocabulary) and its
parameters saved without the table.
"""

import jax
import jax.numpy as jnp
import numpy as np
import orbax.checkpoint as ocp
import pytest

import vmsst_testing
from vmsst.training import checkpointing
from vmsst.encoding import checkpoint
from vmsst.encoding import restore
from vmsst import languages
from vmsst.model import param_files
from vmsst.model import tokens as tokens_lib
from vmsst import sentencepiece_vocabulary

SENTENCES = ["A man rides a bicycle.", "Ein Mann fährt Fahrrad.", ""]


@pytest.fixture(scope="module")
def legacy_dir(tiny_model, tmp_path_factory):
  """(legacy MODEL_DIR, its params, the trained directory it was made from)."""
  model_dir, params = tiny_model
  legacy = tmp_path_factory.mktemp("legacy") / "vmsst"
  legacy.mkdir()
  (legacy / "config.gin").write_text((model_dir / "config.gin").read_text())
  (legacy / "model.json").write_text((model_dir / "model.json").read_text())
  vmsst_testing.legacy_vocabulary(str(model_dir / "spm.model"), str(legacy / "spm.model"))
  old = {k: v for k, v in params.items() if k != "language_embed"}
  manager = ocp.CheckpointManager(str(legacy / "checkpoints"))
  manager.save(4, args=ocp.args.StandardSave({"step": np.int32(4), "params": old}))
  manager.wait_until_finished()
  return legacy, old, model_dir


def test_restore_rebuilds_the_language_table_from_the_token_rows(legacy_dir):
  legacy, old, _ = legacy_dir
  restored = restore.restore(str(legacy))
  params = jax.device_get(restored.params)
  jax.tree.map(np.testing.assert_array_equal,
               {k: v for k, v in params.items() if k != "language_embed"}, old)
  token_table = old["token_embed"]["embedding"]
  ids = [sentencepiece_vocabulary.language_token_id(restored.vocabulary, c)
         for c in languages.LANGUAGES]
  np.testing.assert_array_equal(params["language_embed"]["embedding"], token_table[ids])
  assert ids[0] == token_table.shape[0] - len(languages.LANGUAGES)  # The rewritten pieces.


def test_legacy_directory_embeds_with_its_own_vocabulary_and_parameters(legacy_dir):
  legacy, old, _ = legacy_dir
  restored = restore.restore(str(legacy))
  embeddings = checkpoint.CheckpointEncoder(restored, batch_size=8).encode(SENTENCES)
  tokens, mask = tokens_lib.tokenize_batch(restored.vocabulary, SENTENCES,
                                           restored.sequence_length)
  np.testing.assert_allclose(embeddings, restored.model.encode(old, tokens, mask), atol=1e-5)


@pytest.mark.slow
def test_resuming_training_says_what_changed_and_how_to_go_on(legacy_dir, tiny_model):
  legacy, old, _ = legacy_dir
  _, params = tiny_model
  shapes = lambda tree: jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype), tree)
  with pytest.raises(checkpointing.IncompatibleCheckpointError,
                     match=r"(?s)params/language_embed/embedding: saved \(absent\).*predates the "
                           r"language table.*train.init_params=\"'" + str(legacy) + "'\""):
    checkpointing.check_compatible({"params": shapes(old)}, {"params": shapes(params)},
                                   str(legacy / "checkpoints"), 4)
  # The way on it names: init_params = the old directory loads all but the table.
  fresh = jax.tree.map(jnp.zeros_like, params)
  loaded = jax.device_get(param_files.load_params(str(legacy), fresh))
  np.testing.assert_array_equal(loaded["token_embed"]["embedding"],
                                old["token_embed"]["embedding"])
  assert not loaded["language_embed"]["embedding"].any()  # Kept as initialised.
