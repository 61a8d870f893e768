"""A restored checkpoint as an encoder: length and row buckets give the full-length embeddings."""

import jax
import numpy as np
import pytest

from vmsst.model import partitioning
from vmsst.encoding import checkpoint
from vmsst.encoding import restore
from vmsst.model import tokens as tokens_lib

SENTENCES = ["A man rides a bicycle.", "Ein Mann fährt Fahrrad auf einer sehr langen Straße "
             "neben einem roten Bus und vielen Autos.", "", "Hello."] * 5


@pytest.fixture(scope="module")
def trained(tiny_model):
  return tiny_model


@pytest.mark.slow
def test_length_bucketed_encoding_equals_full_length_encoding(trained):
  model_dir, _ = trained
  encoder = checkpoint.CheckpointEncoder.from_model_dir(str(model_dir), batch_size=8)
  bucketed = encoder.encode(SENTENCES)
  restored = encoder.restored
  full = tokens_lib.embed_sentences(
      lambda t, m: restored.model.encode(restored.params, t, m), restored.vocabulary,
      SENTENCES, restored.sequence_length, 8)
  assert bucketed.shape == (len(SENTENCES), 64)
  np.testing.assert_allclose(bucketed, full, atol=1e-5)
  assert encoder.name == "vmsst"


def test_a_call_is_padded_to_the_next_power_of_two_rows_not_the_whole_batch():
  # (rows, batch_size, data shards) -> rows computed
  cases = {(1, 64, 1): 1, (3, 64, 1): 4, (32, 64, 1): 32, (33, 64, 1): 64, (64, 64, 1): 64,
           (1, 64, 8): 8, (9, 64, 8): 16, (5, 6, 2): 6}
  assert {case: checkpoint._row_bucket(*case) for case in cases} == cases


@pytest.mark.slow
def test_one_sentence_computes_one_row_and_the_same_embedding_as_in_a_full_batch(trained):
  model_dir, _ = trained
  one_device = partitioning.make_mesh(devices=jax.devices()[:1])
  encoder = checkpoint.CheckpointEncoder(restore.restore(str(model_dir), mesh=one_device),
                                         batch_size=8)
  in_batch = encoder.encode(SENTENCES[:8])
  rows_seen, compiled = [], encoder._encode["a"]  # one compiled encoder per tower
  encoder._encode["a"] = lambda params, tokens, mask: (rows_seen.append(len(tokens)),
                                                       compiled(params, tokens, mask))[1]
  alone = np.concatenate([encoder.encode([s]) for s in SENTENCES[:8]]
                         + [encoder.encode(SENTENCES[:3])])
  assert rows_seen == [1] * 8 + [4]
  np.testing.assert_allclose(alone, np.concatenate([in_batch, in_batch[:3]]), atol=1e-5)


def test_bfloat16_serving_casts_the_matrices_once_and_embeds_as_the_per_call_cast(trained):
  """serving_params: matrices stored in bfloat16 give the embeddings of f32 weights cast
  inside each matmul (the cast is then the identity); vectors stay float32."""
  model_dir, _ = trained
  restored = restore.restore(str(model_dir), dtype="bfloat16")
  cast = checkpoint.serving_params(restored.params, restored.model.network_config.dtype)
  for before, after in zip(jax.tree.leaves(restored.params), jax.tree.leaves(cast)):
    assert after.dtype == (jax.numpy.bfloat16 if before.ndim >= 2 else before.dtype)
  assert checkpoint.serving_params(restored.params, "float32") is restored.params
  tokens, mask = tokens_lib.tokenize_batch(restored.vocabulary, SENTENCES[:4], 32)
  with jax.set_mesh(restored.mesh):
    per_call = restored.model.encode(restored.params, tokens, mask)
    once = restored.model.encode(cast, tokens, mask)
  np.testing.assert_array_equal(np.asarray(once), np.asarray(per_call))
  encoder = checkpoint.CheckpointEncoder(restored, batch_size=8)
  got, want = encoder.encode(SENTENCES[:4]), np.asarray(per_call, np.float32)
  cosines = (got * want).sum(1) / np.linalg.norm(got, axis=1) / np.linalg.norm(want, axis=1)
  assert cosines.min() > 0.999  # bfloat16 sums over another padded length
