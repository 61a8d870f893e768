"""A model trained with nested (Matryoshka) sizes and calibrated for int8, exported for
sentence-transformers: `SentenceTransformer(path, truncate_dim=k)` and mteb's loader with
`embed_dim=k` give `Encoder.encode(..., truncate_dim=k)`, and the export's calibration gives
its int8 codes through sentence-transformers' `quantize_embeddings`, as the card shows.

The export records the sizes (config_sentence_transformers.json's `nested_dims`,
the export metadata's `nested_dims`); PyTorch loads it in a fresh process with
JAX and vmsst blocked, so nothing of ours can leak into what it computes.
"""

import json
import os
import subprocess
import sys

import export_loading
import numpy as np
import pytest

import vmsst
from vmsst.base import cli
from vmsst.export_formats import huggingface as hf_export
from vmsst.encoding import calibration
from vmsst.encoding import checkpoint
from vmsst.encoding import protocol
from vmsst.encoding import restore
from vmsst.base.gin_utils import gin

pytestmark = [pytest.mark.integration, pytest.mark.slow]

SIZES = [16, 32, 64]  # vmsst_testing.small_run_bindings: emb_dim 64

_TORCH_ONLY = r"""
import json, sys
sys.modules.update(dict.fromkeys(("jax", "jaxlib", "flax", "vmsst", "tensorflow")))
import numpy as np
from sentence_transformers import SentenceTransformer
export, sentences, output, k = sys.argv[1], json.loads(sys.argv[2]), sys.argv[3], int(sys.argv[4])
np.save(output, SentenceTransformer(export, device="cpu", truncate_dim=k).encode(sentences))
"""

SENTENCES = ["A man is playing a guitar.", "Ein Mann spielt Gitarre.",
             "Une femme lit un livre dans le parc.", "Two dogs run across the field.",
             "El niño come una manzana."]


def calibration_sentences(data_dir, work):
  """300 NTREX lines of four languages, apart from SENTENCES: a calibration set's kind."""
  from vmsst_tasks.sources import pair_readers  # pylint: disable=import-outside-toplevel
  from vmsst.base import text_files  # pylint: disable=import-outside-toplevel
  paths = pair_readers.ntrex_files(data_dir)
  lines = sum((text_files.read_lines(paths[c])[:75] for c in ("deu", "eng", "fra", "spa")), [])
  (work / "calibration.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
  return work / "calibration.txt"


@pytest.fixture(scope="module")
def nested_export(data_dir, tiny_vocab_path, tmp_path_factory):
  import vmsst.training.loop  # pylint: disable=import-outside-toplevel
  import vmsst_testing  # pylint: disable=import-outside-toplevel
  model_dir = tmp_path_factory.mktemp("nested") / "run"
  vmsst_testing.configure_small_run(
      data_dir, tiny_vocab_path, model_dir, steps=3, objective="contrastive",
      extra=["train.evaluator = None", "Contrastive.nested = @NestedDims()",
             f"NestedDims.sizes = {SIZES}", "NestedDims.weights = [1.0, 0.5, 1.0]"])
  vmsst.training.loop.train()
  gin.clear_config()
  calibration.calibrate_file(  # quantization.json beside the model, as `vmsst.calibrate` does
      lambda: protocol.UniqueSentences(checkpoint.CheckpointEncoder(
          restore.restore(str(model_dir), dtype="float32"), name="nested"), progress=False),
      str(calibration_sentences(data_dir, tmp_path_factory.mktemp("calibration"))),
      str(model_dir))
  output = tmp_path_factory.mktemp("nested_export") / "st"
  return model_dir, output, hf_export.export(str(model_dir), str(output))


def test_model_json_keeps_the_nested_sizes(nested_export):
  model_dir, _, _ = nested_export
  model = restore.restore(str(model_dir)).model
  assert model.nested.sizes == tuple(SIZES) and model.nested.weights == (1.0, 0.5, 1.0)


def test_sentence_transformers_truncate_dim_gives_the_encoders_truncated_vectors(
    nested_export, tmp_path):
  model_dir, export_dir, metadata = nested_export
  assert metadata["nested_dims"] == SIZES
  config = json.loads((export_dir / "config_sentence_transformers.json").read_text())
  assert config["nested_dims"] == SIZES and config["truncate_dim"] is None
  encoder = vmsst.Encoder.from_checkpoint(str(model_dir), dtype="float32")
  env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
         "CUDA_VISIBLE_DEVICES": ""}
  for k in (16, 32):
    out = tmp_path / f"st{k}.npy"
    run = subprocess.run([sys.executable, "-c", _TORCH_ONLY, str(export_dir),
                          json.dumps(SENTENCES), str(out), str(k)], env=env, cwd=tmp_path,
                         capture_output=True, text=True, timeout=600, check=False)
    assert run.returncode == 0, run.stderr[-3000:]
    theirs = np.load(out)
    ours = encoder.encode(SENTENCES, truncate_dim=k)
    assert theirs.shape == ours.shape == (len(SENTENCES), k)
    cosine = np.sum(theirs * ours, -1) / (np.linalg.norm(theirs, axis=-1)
                                          * np.linalg.norm(ours, axis=-1))
    assert cosine.min() >= 0.9999, cosine
    normalized = encoder.encode(SENTENCES, truncate_dim=k, normalize=True)
    np.testing.assert_allclose(np.linalg.norm(normalized, axis=-1), 1.0, rtol=1e-5)


def test_truncate_dim_beyond_the_embedding_is_a_user_error(nested_export):
  model_dir, _, _ = nested_export
  encoder = vmsst.Encoder.from_checkpoint(str(model_dir))
  with pytest.raises(cli.UserError, match="truncate_dim"):
    encoder.encode(SENTENCES, truncate_dim=65)


def test_truncated_int8_codes_through_sentence_transformers_and_mteb(nested_export):
  """The card's code (int8 codes from the copied calibration) and both loaders at k."""
  model_dir, export_dir, metadata = nested_export
  assert metadata["calibrated"] and (export_dir / "quantization.json").exists()
  encoder = vmsst.Encoder.from_checkpoint(str(model_dir), dtype="float32")
  sentences_block, _ = export_loading.run_card(export_dir, SENTENCES)
  codes = sentences_block["codes"]
  agreement = export_loading.int8_agreement(codes, encoder.encode(SENTENCES, precision="int8"))
  assert agreement >= 0.99, agreement
  ranges = sentences_block["ranges"]
  from sentence_transformers import quantize_embeddings  # pylint: disable=import-outside-toplevel
  for k in (16, 32):
    ours = encoder.encode(SENTENCES, truncate_dim=k)
    st = export_loading.sentence_transformer(export_dir, truncate_dim=k).encode(SENTENCES)
    export_loading.assert_close(st, ours, f"SentenceTransformer truncate_dim={k}")
    mteb = export_loading.mteb_model(export_dir, embed_dim=k).model.encode(SENTENCES)
    export_loading.assert_close(mteb, ours, f"mteb embed_dim={k}")
    theirs = quantize_embeddings(st, precision="int8", ranges=ranges[:, :k])
    agreement = export_loading.int8_agreement(
        theirs, encoder.encode(SENTENCES, truncate_dim=k, precision="int8"))
    assert agreement >= 0.99, (k, agreement)
