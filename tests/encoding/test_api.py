"""vmsst.Encoder: order kept under length batching, per-pair cosine, both backends agree."""

import subprocess
import sys

import numpy as np
import pytest

import vmsst
import vmsst.training.loop
import vmsst_testing
from vmsst.export_formats import saved_model as export
from vmsst.encoding.api import Encoder
from vmsst.encoding import protocol
from vmsst.base.gin_utils import gin
from vmsst_testing import HandEncoder

SENTENCES = ["A man rides a bicycle.", "", "Ein Mann fährt Fahrrad auf einer sehr langen "
             "Straße neben einem roten Bus.", "Hallo.", "Мужчина едет на велосипеде.",
             "一个男人骑自行车。", "A man rides a bicycle.", "🚲 " * 50]


def hand_vectors(sentences):
  return np.array([[len(s), s.count(" "), 1] for s in sentences], np.float32)


def test_encode_batches_longest_first_and_keeps_the_callers_order():
  backend = HandEncoder()
  embeddings = Encoder(backend).encode(SENTENCES, batch_size=3)
  np.testing.assert_array_equal(embeddings, hand_vectors(SENTENCES))
  assert embeddings.dtype == np.float32
  sent = [s for batch in backend.batches for s in batch]
  assert sorted(sent) == sorted(set(SENTENCES))  # each distinct sentence once
  assert [len(s) for s in sent] == sorted(map(len, sent), reverse=True)
  assert max(len(batch) for batch in backend.batches) == 3


def test_single_string_empty_list_normalize_and_dimension():
  encoder = Encoder(HandEncoder())
  assert encoder.dimension == 3
  np.testing.assert_array_equal(encoder.encode("a b"), [3, 1, 1])
  assert encoder.encode([]).shape == (0, 3)
  for precision, dtype in (("binary", np.int8), ("ubinary", np.uint8)):  # packed bits: 1 byte
    none = encoder.encode([], precision=precision)
    assert (none.shape, none.dtype) == ((0, 1), dtype)
    assert encoder.encode(["a b"], precision=precision).dtype == dtype
  unit = encoder.encode(SENTENCES, normalize=True)
  np.testing.assert_allclose(np.linalg.norm(unit, axis=1), 1.0, rtol=1e-6)
  with pytest.raises(TypeError, match="encode takes strings"):
    encoder.encode(["fine", 3])


def test_show_progress_bar_writes_a_bar_only_when_asked(capsys):
  encoder = Encoder(HandEncoder())
  encoder.encode(SENTENCES, batch_size=2)
  assert "hand: encoding" not in capsys.readouterr().err
  encoder.encode(SENTENCES, batch_size=2, show_progress_bar=True)
  assert "hand: encoding" in capsys.readouterr().err


def test_pairwise_similarity_is_the_cosine_of_each_pair_by_hand():
  table = {"x": [1, 0], "y": [0, 3], "u": [1, 1], "v": [0, -2], "w": [-4, 4]}
  encoder = Encoder(protocol.PrecomputedEncoder(table))
  np.testing.assert_allclose(encoder.pairwise_similarity(["x", "y"], ["u", "v"]), [2 ** -0.5, -1],
                             rtol=1e-6)
  # Row 0 depends on (x, u) alone: not on row 1, nor on any whole-matrix norm.
  np.testing.assert_allclose(encoder.pairwise_similarity(["x", "y"], ["u", "w"]), [2 ** -0.5, 2 ** -0.5],
                             rtol=1e-6)
  np.testing.assert_allclose(encoder.pairwise_similarity("x", "u"), [2 ** -0.5], rtol=1e-6)
  a, b = np.array([[1, 0], [0, 300]]), np.array([[1, 1], [0, -2]])
  np.testing.assert_allclose(encoder.pairwise_similarity(a, b), [2 ** -0.5, -1], rtol=1e-6)
  np.testing.assert_allclose(encoder.pairwise_similarity(a, ["u", "v"]), [2 ** -0.5, -1], rtol=1e-6)
  with pytest.raises(ValueError, match="a has 2 items, b has 1"):
    encoder.pairwise_similarity(["x", "y"], ["u"])


def test_similarity_is_the_n_by_m_cosine_matrix_as_in_sentence_transformers():
  table = {"x": [1, 0], "y": [0, 3], "u": [1, 1], "v": [0, -2], "w": [-4, 4]}
  encoder = Encoder(protocol.PrecomputedEncoder(table))
  h = 2 ** -0.5
  np.testing.assert_allclose(encoder.similarity(["x", "y"], ["u", "v", "w"]),
                             [[h, 0, -h], [h, -1, h]], rtol=1e-6, atol=1e-7)
  assert encoder.similarity("x", ["u", "v"]).shape == (1, 2)
  np.testing.assert_allclose(np.diag(encoder.similarity(["x", "y"], ["u", "v"])),
                             encoder.pairwise_similarity(["x", "y"], ["u", "v"]), rtol=1e-6)


def test_repr_names_the_backend_and_what_is_known():
  assert repr(Encoder(HandEncoder())) == "Encoder(name='hand', backend=HandEncoder)"
  assert repr(Encoder(WordEncoder(), dimension=3)) == (
      "Encoder(name='hand', backend=WordEncoder, dimension=3, max_seq_length=3)")


def test_vmsst_encoder_is_imported_lazily():
  probe = ("import sys, vmsst\n"
           "heavy = lambda: [m for m in ('jax', 'tensorflow') if m in sys.modules]\n"
           "assert not heavy(), heavy()\n"
           "assert vmsst.Encoder.__module__ == 'vmsst.encoding.api'\n"
           "assert not heavy(), heavy()\n")
  subprocess.run([sys.executable, "-c", probe], check=True)
  assert vmsst.Encoder is Encoder


@pytest.fixture(scope="module")
def model_and_export(data_dir, tiny_vocab_path, tmp_path_factory):
  """A 1-step tiny Contrastive directory (a second objective to export) and its SavedModel."""
  model_dir = tmp_path_factory.mktemp("encoder") / "contrastive"
  vmsst_testing.configure_small_run(data_dir, tiny_vocab_path, model_dir, steps=1,
                                    objective="contrastive", extra=["train.evaluator = None"])
  vmsst.training.loop.train()
  gin.clear_config()
  export.export(str(model_dir), str(model_dir.parent / "saved_model"))
  return model_dir, model_dir.parent / "saved_model"


def test_checkpoint_and_saved_model_encoders_agree(model_and_export):
  model_dir, saved_model = model_and_export
  from_checkpoint = Encoder.from_checkpoint(str(model_dir), batch_size=8)
  from_saved_model = Encoder.from_saved_model(str(saved_model))
  assert from_checkpoint.dimension == from_saved_model.dimension == 64
  assert from_checkpoint.name == "contrastive" and from_saved_model.name == "saved_model"
  jax_embeddings = from_checkpoint.encode(SENTENCES, batch_size=3)
  np.testing.assert_allclose(from_saved_model.encode(SENTENCES), jax_embeddings, atol=1e-4)
  np.testing.assert_allclose(jax_embeddings[0], jax_embeddings[6])  # a repeated sentence
  pairs = SENTENCES[:4], SENTENCES[4:]
  np.testing.assert_allclose(from_saved_model.pairwise_similarity(*pairs),
                             from_checkpoint.pairwise_similarity(*pairs), atol=1e-5)


def test_a_float32_checkpoint_encodes_in_bfloat16_close_to_float32(model_and_export):
  model_dir, _ = model_and_export
  f32 = Encoder.from_checkpoint(str(model_dir), batch_size=8).encode(SENTENCES)
  bf16_encoder = Encoder.from_checkpoint(str(model_dir), batch_size=8, dtype="bfloat16")
  assert bf16_encoder.backend.restored.model.network_config.dtype == np.dtype("bfloat16")
  bf16 = bf16_encoder.encode(SENTENCES)
  assert bf16.dtype == np.float32 and not np.array_equal(bf16, f32)
  cosine = np.sum(bf16 * f32, -1) / np.linalg.norm(bf16, axis=-1) / np.linalg.norm(f32, axis=-1)
  assert cosine.min() > 0.99, cosine
  with pytest.raises(ValueError, match="choose one of"):
    Encoder.from_checkpoint(str(model_dir), dtype="float16")


def test_missing_saved_model_is_a_clear_error(tmp_path):
  with pytest.raises(FileNotFoundError, match="python -m vmsst.export"):
    Encoder.from_saved_model(str(tmp_path / "nowhere"))


class WordEncoder(HandEncoder):
  """HandEncoder that sees at most `max_seq_length - 1` words plus an EOS, like our models."""

  max_seq_length = 3

  def count_truncated(self, sentences):
    return sum(len(s.split()) > self.max_seq_length - 1 for s in sentences)


def test_encode_says_how_many_sentences_were_cut(caplog):
  encoder = Encoder(WordEncoder())
  assert encoder.max_seq_length == 3 and Encoder(HandEncoder()).max_seq_length is None
  with caplog.at_level("WARNING"):
    encoder.encode(["one two three", "one two", "a b c d", "a b c d"])
  assert "2 of 3 distinct sentences are longer than 3 pieces (EOS included) and were cut" in (
      caplog.text)
  assert encoder.count_truncated(["a b c", "a"]) == 1


def test_a_checkpoint_counts_sentences_longer_than_its_training_length(model_and_export):
  model_dir, _ = model_and_export
  encoder = Encoder.from_checkpoint(str(model_dir), batch_size=8)
  vocabulary = encoder.backend.restored.vocabulary
  length = encoder.max_seq_length
  assert length == encoder.backend.restored.sequence_length
  pieces = [len(vocabulary.encode(s)) for s in SENTENCES]
  # By hand from the piece counts: a sentence keeps length - 1 pieces and the EOS.
  assert encoder.count_truncated(SENTENCES) == sum(n > length - 1 for n in pieces) > 0
  longer = Encoder.from_checkpoint(str(model_dir), batch_size=8, max_seq_length=64)
  assert longer.count_truncated(SENTENCES) == sum(n > 63 for n in pieces) < sum(
      n > length - 1 for n in pieces)
  assert longer.encode(SENTENCES).shape == (len(SENTENCES), 64)
  with pytest.raises(ValueError, match="this model takes 2 to"):
    Encoder.from_checkpoint(str(model_dir), max_seq_length=10_000)


def test_the_saved_model_is_callable_like_its_serving_signature(model_and_export):
  import tensorflow as tf  # pylint: disable=import-outside-toplevel
  import tensorflow_text  # pylint: disable=import-outside-toplevel,unused-import
  _, saved_model = model_and_export
  loaded = tf.saved_model.load(str(saved_model))
  texts = ["A man rides a bicycle.", "Hallo."]
  np.testing.assert_array_equal(
      loaded(texts).numpy(),
      loaded.signatures["serving_default"](text=tf.constant(texts))["embeddings"].numpy())
