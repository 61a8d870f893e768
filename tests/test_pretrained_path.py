"""The paper's pretrained setting end to end, offline: a random mT5 → VMSST → embeddings.

§5 of the paper uses the mT5 SentencePiece vocabulary for every model and
starts the "pretrained" rows from mT5. Both are built here: a SentencePiece
model trained by vmsst.vocabulary (the session's tiny one: like mT5's
spiece.model it has no language pieces) and a random MT5ForConditionalGeneration
of that vocabulary's size, saved as transformers saves it. Then the path of
gin/runs/vmsst_24l_pretrained.gin runs on it: vmsst.mt5_import converts the
checkpoint for the run's model, train(init_params=...) trains a few steps on
real pairs (their language ids index the network's language table, which the
conversion leaves fresh), and vmsst.export writes a SavedModel whose
embeddings equal the checkpoint's.
"""

import numpy as np
import pytest
# torch, transformers and sentence-transformers load in the tests that use them: each xdist
# worker imports every test module to collect it, whichever tier it runs.
import tensorflow as tf
from safetensors.numpy import load_file

import vmsst.training.loop
import vmsst_testing
from vmsst.export_formats import saved_model as export
from vmsst.encoding import checkpoint as checkpoint_lib
from vmsst.base.gin_utils import gin
from vmsst.model import mt5_conversion as mt5_import
from vmsst.model import param_files
from vmsst.base import sentencepiece_vocabulary

SENTENCES = ["A man rides a bicycle.", "Ein Mann fährt Fahrrad.", "Un homme fait du vélo.", ""]
# The NetworkConfig fields that make the network an mT5 stack of the checkpoint's sizes.
MT5_FIELDS = ("vocab_size", "factorized_output", "emb_dim", "num_heads", "head_dim", "mlp_dim", "num_encoder_layers",
              "num_language_encoder_layers", "num_decoder_layers", "relative_attention",
              "rms_norm", "gated_mlp", "projection_bias", "scale_attention_logits",
              "tie_output_embedding")


@pytest.fixture(scope="module")
def random_mt5(tiny_vocab_path, tmp_path_factory) -> str:
  """A random mT5 whose embedding rows are the tiny vocabulary's pieces (saved, tied).

  Like mT5's (250,112 rows for 250,100 pieces) its table is the vocabulary
  padded to a multiple of 128: 2,048 rows for 2,000 pieces.
  """
  import torch  # pylint: disable=import-outside-toplevel
  import transformers  # pylint: disable=import-outside-toplevel
  torch.manual_seed(0)
  size = sentencepiece_vocabulary.get_vocabulary(tiny_vocab_path).vocab_size
  config = transformers.MT5Config(vocab_size=-(-size // 128) * 128, d_model=32, d_kv=8, num_heads=4, d_ff=64,
                                  num_layers=2, num_decoder_layers=1, dropout_rate=0.0,
                                  feed_forward_proj="gated-gelu")
  directory = tmp_path_factory.mktemp("random_mt5")
  transformers.MT5ForConditionalGeneration(config).save_pretrained(directory)
  return str(directory)


@pytest.mark.slow
@pytest.mark.parametrize("scan", [False, True], ids=["unrolled", "scanned"])
def test_mt5_vocabulary_import_train_export_embed(data_dir, tiny_vocab_path, random_mt5,
                                                   tmp_path, scan):
  """Scanned as the paper's pretrained runs are (gin/models/memory/scan.gin): the
  converted file's layer_<i> tensors are stacked when train loads them."""
  pieces = sentencepiece_vocabulary.get_vocabulary(tiny_vocab_path).tokenizer
  assert pieces.piece_to_id("<2deu>") == pieces.unk_id()  # No language symbols, as in mT5.
  checkpoint = mt5_import.Checkpoint(random_mt5)
  cfg = mt5_import.network_config(checkpoint)
  model_dir, init_file = tmp_path / "vmsst", str(tmp_path / "mt5_vmsst.safetensors")
  vmsst_testing.configure_small_run(
      data_dir, tiny_vocab_path, model_dir, steps=3,
      extra=[f"NetworkConfig.{f} = {getattr(cfg, f)!r}" for f in MT5_FIELDS]
      + ["train.evaluator = None", f"train.init_params = '{init_file}'",
         f"NetworkConfig.scan_layers = {scan}"])
  try:
    # What `python -m vmsst.mt5_import --gin_file=...` does with the run's gin files.
    converted, report = mt5_import.convert(
        checkpoint, gin.query_parameter("train.model").scoped_configurable_fn())
    assert "language_embed/embedding" in report.fresh
    param_files.save_params(init_file, converted)
    result = vmsst.training.loop.train()
  finally:
    gin.clear_config()

  assert result["step"] == 3 and np.isfinite(result["final_metrics"]["loss"])
  # Three small steps from mT5's tensors stay near them (a fresh table is ~√2·|E| away).
  shared = load_file(f"{random_mt5}/model.safetensors")["shared.weight"]
  table = result["params"]["token_embed"]["embedding"]
  assert np.linalg.norm(table - shared) < 0.1 * np.linalg.norm(shared)
  assert table.shape == (2048, 32)
  assert ("layers" in result["params"]["semantic_encoder"]) == scan
  assert result["params"]["language_embed"]["embedding"].shape == (224, 32)

  saved_model = tmp_path / "saved_model"
  export.export(str(model_dir), str(saved_model))
  serve = tf.saved_model.load(str(saved_model)).signatures["serving_default"]
  exported = serve(text=tf.constant(SENTENCES))["embeddings"].numpy()
  checkpoint_embeddings = checkpoint_lib.CheckpointEncoder.from_model_dir(
      str(model_dir), batch_size=8).encode(SENTENCES)
  assert exported.shape == (len(SENTENCES), 32) and np.isfinite(exported).all()
  np.testing.assert_allclose(exported, checkpoint_embeddings, atol=1e-4)
