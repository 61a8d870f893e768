"""Export: the SavedModel, run by TensorFlow alone, embeds like the JAX checkpoint.

One tiny VMSST directory (4 training steps: parity, not quality, is tested) is
exported once; a fresh Python process in which JAX, flax and vmsst cannot be
imported loads it with TensorFlow, tensorflow_text and numpy, so the test
would catch a SavedModel that secretly needs them.
"""

import json
import subprocess
import sys
import time

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_text as tf_text
from absl import flags
from flax import traverse_util

import vmsst
from vmsst.export_formats import saved_model as export
from vmsst.encoding import checkpoint
from vmsst.encoding import restore
from vmsst.encoding import saved_model as saved_model_lib
from vmsst.model import tokens as tokens_lib
from vmsst.encoding import similarity

SENTENCES = [
    "A man rides a bicycle.",
    "Ein Mann fährt mit dem Fahrrad über die Brücke.",
    "Мужчина едет на велосипеде по мосту.",
    "一个男人骑着自行车过桥。",
    "رجل يركب دراجة على الجسر.",
    "एक आदमी पुल पर साइकिल चला रहा है।",
    "",
    "   ",
    "🚲🙂 emoji 👍🏽 gemischte Schrift: Fahrrad велосипед 自行车 دراجة साइकिल",
    " ".join(["Ein sehr langer Satz über Fahrräder und Brücken"] * 40),
    "x" * 3000,
    "自行车" * 400,
]

# Runs in a fresh interpreter: TensorFlow + tensorflow_text + numpy, nothing else.
# JAX, flax and vmsst are made unimportable rather than merely not imported:
# `import tensorflow` itself imports jax when it is installed (its TFLite
# converter), so only a blocked import proves the SavedModel does not need it.
_TENSORFLOW_ONLY = r"""
import json, sys
BLOCKED = ("jax", "jaxlib", "flax", "vmsst")
sys.modules.update(dict.fromkeys(BLOCKED))  # None: `import jax` raises ImportError
import numpy as np
import tensorflow as tf
import tensorflow_text  # registers the SentencePiece ops the graph uses
saved_model, sentences_file, output = sys.argv[1:]
sentences = json.load(open(sentences_file, encoding="utf-8"))
loaded = tf.saved_model.load(saved_model)
serve, score = loaded.signatures["serving_default"], loaded.signatures["score"]
embeddings = serve(text=tf.constant(sentences))["embeddings"].numpy()
empty = serve(text=tf.constant([], tf.string))["embeddings"].numpy()
rotated = sentences[1:] + sentences[:1]
scores = score(text_a=tf.constant(sentences), text_b=tf.constant(rotated))["scores"].numpy()
leaked = sorted(k for k, m in sys.modules.items() if m and k.split(".")[0] in BLOCKED)
assert not leaked, leaked
np.savez(output, embeddings=embeddings, empty=empty, scores=scores)
"""


@pytest.fixture(scope="module")
def model_dir(tiny_model):
  return tiny_model[0]


@pytest.fixture(scope="module")
def exported(model_dir):
  """(SavedModel directory, metadata, seconds the export took)."""
  output = model_dir.parent / "export_test_saved_model"
  start = time.time()
  metadata = export.export(str(model_dir), str(output))
  return output, metadata, time.time() - start


@pytest.fixture(scope="module")
def restored(model_dir):
  return restore.restore(str(model_dir))


@pytest.fixture(scope="module")
def jax_embeddings(restored):
  """The reference: CheckpointEncoder's μ_sem, float32 [len(SENTENCES), d]."""
  return checkpoint.CheckpointEncoder(restored, batch_size=8).encode(SENTENCES)


@pytest.fixture(scope="module")
def tensorflow_outputs(exported, tmp_path_factory):
  """What the SavedModel computes in a process that never imported JAX or vmsst."""
  saved_model, _, _ = exported
  work = tmp_path_factory.mktemp("tensorflow_only")
  (work / "sentences.json").write_text(json.dumps(SENTENCES), encoding="utf-8")
  run = subprocess.run([sys.executable, "-c", _TENSORFLOW_ONLY, str(saved_model),
                        str(work / "sentences.json"), str(work / "out.npz")],
                       cwd=work, capture_output=True, text=True, timeout=300, check=False)
  assert run.returncode == 0, run.stderr[-3000:]
  return dict(np.load(work / "out.npz"))


def test_graph_tokenizer_equals_seqio_with_training_truncation(restored):
  tokenizer = tf_text.SentencepieceTokenizer(model=restored.vocabulary.sp_model)
  length = restored.sequence_length
  graph = export.tokenize(tokenizer, tf.constant(SENTENCES), length,
                          restored.vocabulary.eos_id).numpy()
  expected, _ = tokens_lib.tokenize_batch(restored.vocabulary, SENTENCES, length)
  assert graph.shape == (len(SENTENCES), length)  # the long rows fill the trained length
  np.testing.assert_array_equal(graph, expected)
  assert list(graph[6, :2]) == [restored.vocabulary.eos_id, 0]  # "" is just EOS


def test_saved_model_embeds_like_the_checkpoint_in_tensorflow_alone(
    exported, jax_embeddings, tensorflow_outputs):
  tf_embeddings = tensorflow_outputs["embeddings"]
  assert tf_embeddings.shape == (len(SENTENCES), exported[1]["dimension"])
  assert tf_embeddings.dtype == np.float32
  difference = np.abs(tf_embeddings - jax_embeddings).max()
  print(f"max |SavedModel - JAX| = {difference:.2e}; export took {exported[2]:.1f} s")
  np.testing.assert_allclose(tf_embeddings, jax_embeddings, atol=1e-4)
  assert tensorflow_outputs["empty"].shape == (0, exported[1]["dimension"])


def test_the_evaluation_suite_reads_the_saved_model(exported, jax_embeddings):
  # `python -m vmsst.evaluate --saved_model=DIR` goes through this class.
  saved_model, _, _ = exported
  embeddings = saved_model_lib.SavedModelEncoder(str(saved_model)).encode(SENTENCES)
  np.testing.assert_allclose(embeddings, jax_embeddings, atol=1e-4)


def test_score_signature_is_the_cosine_of_each_pair(jax_embeddings, tensorflow_outputs):
  rotated = np.roll(jax_embeddings, -1, axis=0)
  np.testing.assert_allclose(tensorflow_outputs["scores"],
                             similarity.paired_cosine(jax_embeddings, rotated), atol=1e-5)


def test_params_npz_round_trips_and_the_index_names_every_parameter(restored, exported):
  saved_model, metadata, _ = exported
  params = traverse_util.flatten_dict(restored.params, sep="/")
  with np.load(saved_model / export.PARAMS_FILE) as npz:
    assert sorted(npz.files) == sorted(params)
    for name, value in params.items():
      np.testing.assert_array_equal(npz[name], np.asarray(value))
  index = json.loads((saved_model / export.PARAMS_INDEX_FILE).read_text())
  assert index["file"] == export.PARAMS_FILE and index["separator"] == "/"
  assert sorted(index["params"]) == sorted(params)
  for name, entry in index["params"].items():
    assert entry["shape"] == list(params[name].shape) and entry["dtype"] == "float32"
    assert len(entry["axes"]) == len(entry["shape"])
  assert index["params"]["token_embed/embedding"]["axes"] == ["vocab", "embed"]
  # The SavedModel holds the μ_sem path only: no decoder, no language encoder.
  kept = {n for n, e in index["params"].items() if e["in_saved_model"]}
  assert "token_embed/embedding" in kept and "semantic_head/mu/kernel" in kept
  assert not {n for n in kept if n.startswith(("decoder", "language", "output"))}
  assert metadata["saved_model_parameters"] == len(kept)
  variables = tf.saved_model.load(str(saved_model)).params
  assert sorted(variables) == sorted(kept)


def test_metadata_and_directory_copies(restored, exported, model_dir):
  saved_model, metadata, _ = exported
  on_disk = json.loads((saved_model / export.EXTRA_DIR / export.METADATA_FILE).read_text())
  assert on_disk == metadata
  assert metadata["step"] == 4 and metadata["sequence_length"] == restored.sequence_length
  assert metadata["dimension"] == 64 and metadata["normalized"] is False
  assert metadata["dtype"] == "float32"  # the precision the tiny run trained with
  assert metadata["vocabulary_size"] == restored.vocabulary.vocab_size
  extra = saved_model / export.EXTRA_DIR
  assert (extra / "spm.model").read_bytes() == (model_dir / "spm.model").read_bytes()
  assert (extra / "config.gin").read_text() == (model_dir / "config.gin").read_text()
  assert (extra / "model.json").read_text() == (model_dir / "model.json").read_text()


def test_normalize_flag_gives_unit_rows(restored, jax_embeddings):
  params = traverse_util.flatten_dict(restored.params, sep="/")
  names = export.semantic_params(restored.model, params, restored.sequence_length)
  module = export.ServingModule(restored, {n: np.asarray(params[n]) for n in names},
                                normalize=True, platforms=["cpu"])
  unit = module.serve(tf.constant(SENTENCES))["embeddings"].numpy()
  np.testing.assert_allclose(np.linalg.norm(unit, axis=-1), 1.0, atol=1e-5)
  np.testing.assert_allclose(unit, similarity.normalize(jax_embeddings), atol=1e-5)


def test_bfloat16_export_embeds_close_to_the_float32_checkpoint(model_dir, jax_embeddings,
                                                                 tmp_path):
  metadata = export.export(str(model_dir), str(tmp_path / "bf16"), dtype="bfloat16")
  assert metadata["dtype"] == "bfloat16"
  embeddings = saved_model_lib.SavedModelEncoder(str(tmp_path / "bf16")).encode(SENTENCES)
  assert embeddings.dtype == np.float32
  cosine = np.sum(similarity.normalize(embeddings) * similarity.normalize(jax_embeddings), -1)
  assert cosine.min() > 0.99, cosine
  assert np.abs(embeddings - jax_embeddings).max() > 1e-4  # it did run in bf16


def test_bad_directories_are_clear_errors(exported, tmp_path):
  with pytest.raises(FileExistsError, match="--output=.* is not empty"):
    export.export(str(tmp_path), str(exported[0]))
  with pytest.raises(FileNotFoundError, match="model.json not found"):
    export.export(str(tmp_path), str(tmp_path / "out"))


def test_importing_the_module_defines_no_flags():
  assert "platforms" not in flags.FLAGS and "normalize" not in flags.FLAGS


def test_encoder_from_saved_model_knows_the_length_and_counts_cut_sentences(
    restored, exported):
  saved_model, metadata, _ = exported
  assert (saved_model_lib.EXPORT_EXTRA_DIR, saved_model_lib.EXPORT_METADATA) == (
      export.EXTRA_DIR, export.METADATA_FILE)
  from_saved = vmsst.Encoder.from_saved_model(str(saved_model))
  from_checkpoint = checkpoint.CheckpointEncoder(restored, batch_size=8)
  assert from_saved.max_seq_length == metadata["sequence_length"] == from_checkpoint.max_seq_length
  long = " ".join(["word"] * 4 * metadata["sequence_length"])
  sentences = [*SENTENCES, long]
  assert from_saved.count_truncated(sentences) == from_checkpoint.count_truncated(sentences) >= 1


@pytest.mark.parametrize("rows,length,want", [
    (0, 0, (1, 8)), (1, 3, (1, 8)), (3, 9, (4, 16)), (5, 16, (8, 16)), (33, 17, (64, 24)),
    (256, 64, (256, 64)), (257, 41, (512, 48))])
def test_calls_are_padded_to_a_bounded_set_of_shapes(rows, length, want):
  """Every new (batch, length) costs an XLA compile in the SavedModel: shapes are bucketed."""
  eos = 1
  tokens = np.arange(2, 2 + rows * length, dtype=np.int32).reshape(rows, length)
  padded = export.bucketed(tf.constant(tokens), 64, eos).numpy()
  assert padded.shape == want
  np.testing.assert_array_equal(padded[:rows, :length], tokens)
  assert not padded[:rows, length:].any()  # padding columns are masked out
  filler = np.zeros((want[0] - rows, want[1]), np.int32)
  filler[:, 0] = eos  # padding rows are one EOS each, never an all-padding row
  np.testing.assert_array_equal(padded[rows:], filler)


def test_the_saved_model_pads_rows_by_the_checkpoint_encoders_rule():
  """One row rule for every encoder: the graph's lookup table is `padded_rows`'s values."""
  sizes = checkpoint.row_buckets()
  assert sizes == tuple(1 << i for i in range(21))
  for rows in [*range(0, 70), 1000, 4097, (1 << 20) - 1, 1 << 20]:
    assert checkpoint.padded_rows(rows) == min(s for s in sizes if s >= max(rows, 1))
    padded = export.bucketed(tf.zeros([rows, 3], tf.int32), 64, 1)
    assert padded.shape[0] == checkpoint.padded_rows(rows)
