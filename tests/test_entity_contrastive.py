"""Entity-contrastive (EASE): the loss by hand, masking, sharding, vector init, a real run."""

import dataclasses

import gin
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import vmsst.train
import vmsst_testing
from vmsst import losses
from vmsst import models
from vmsst import partitioning
from vmsst import trainer as trainer_lib
from vmsst import vocabulary as vocabulary_lib
from vmsst.config import NetworkConfig
from vmsst.objectives import MODELS
from vmsst.objectives import entity_contrastive as ec

DROPOUT = dataclasses.replace(vmsst_testing.TINY, dropout_rate=0.1)
SAMPLE = (vmsst_testing.ROOT.parent / "shared" / "data" / "wiki_entity_sample"
          / "enwiki-pages-articles-sample.xml.bz2")


@pytest.fixture(autouse=True)
def _clean_gin():
  yield
  gin.clear_config()


def _lse(row):
  row = np.asarray(row, np.float64)
  return row.max() + np.log(np.sum(np.exp(row - row.max())))


def _no_same_sentence(batch):
  return jnp.zeros((batch, batch), bool)


# ----------------------------------------------------------------------- loss


def test_entity_contrast_2x2_with_a_hard_negative_block_by_hand():
  tau = 0.5
  s = jnp.array([[1.0, 0.0], [0.0, 2.0]])
  # [B=2, 1+H=2, d]: positives e0=(1,0), e1=(1,1); hard negatives h0=(0,1), h1=(-1,0).
  vectors = jnp.array([[[1.0, 0.0], [0.0, 1.0]], [[1.0, 1.0], [-1.0, 0.0]]])
  ids = jnp.array([[0, 2], [1, 3]], jnp.int32)
  loss, accuracy = ec.entity_contrast(s, vectors, ids, _no_same_sentence(2), tau)
  r = 1 / np.sqrt(2)
  # Row 0: [cos(s0,e0), cos(s0,e1) | cos(s0,h0), cos(s0,h1)] / τ = [1, r | 0, -1] / τ.
  row0 = np.array([1.0, r, 0.0, -1.0]) / tau
  # Row 1: s1 = (0,1): [0, r | 1, 0] / τ; its hard-negative h0 beats the positive.
  row1 = np.array([0.0, r, 1.0, 0.0]) / tau
  expected = 0.5 * ((_lse(row0) - row0[0]) + (_lse(row1) - row1[1]))
  np.testing.assert_allclose(float(loss), expected, rtol=1e-5)
  assert float(accuracy) == pytest.approx(0.5)  # row 0 right, row 1 picks h0


def test_without_hard_negatives_it_is_in_batch_cross_entropy():
  s = jnp.array([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]])
  e = jnp.array([[[2.0, 0.0]], [[1.0, 1.0]], [[0.0, 3.0]]])
  loss, _ = ec.entity_contrast(s, e, jnp.array([[0], [1], [2]]), _no_same_sentence(3), 1.0)
  r = 1 / np.sqrt(2)
  cos = np.array([[1, r, 0], [0, r, 1], [r, 1, r]])
  expected = np.mean([_lse(cos[i]) - cos[i, i] for i in range(3)])
  np.testing.assert_allclose(float(loss), expected, rtol=1e-5)


def test_duplicate_entities_same_sentences_padding_and_hard_negative_clashes_are_masked():
  tau = 0.5
  s = jnp.array([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0], [1.0, -1.0]])
  e = jnp.array([[[1.0, 0.0], [0.0, 1.0]], [[1.0, 0.0], [5.0, 5.0]],
                 [[0.0, 1.0], [1.0, 2.0]], [[1.0, 1.0], [9.0, 9.0]]])
  # Rows 0 and 1 link the same entity 7; row 1's hard negative is entity 5 =
  # row 2's positive (kept for others, masked for row 2); row 3's hard slot is
  # padding; rows 2 and 3 are the same sentence.
  ids = jnp.array([[7, 4], [7, 5], [5, 6], [8, -1]], jnp.int32)
  same = jnp.zeros((4, 4), bool).at[2, 3].set(True).at[3, 2].set(True)
  loss, _ = ec.entity_contrast(s, e, ids, same, tau)
  sn, en = (np.asarray(losses.l2_normalize(x)) for x in (s, e))
  cos = np.concatenate([sn @ en[:, 0].T, sn @ en[:, 1].T], axis=1) / tau  # [4, 8]
  keep = np.ones((4, 8), bool)
  keep[0, 1] = keep[1, 0] = False  # same entity 7
  keep[2, 3] = keep[3, 2] = False  # same sentence
  keep[2, 5] = False  # row 1's hard negative is row 2's own entity
  keep[:, 7] = False  # padding
  expected = np.mean([_lse(cos[i][keep[i]]) - cos[i, i] for i in range(4)])
  np.testing.assert_allclose(float(loss), expected, rtol=1e-5)
  keep[:, :7] = True  # had nothing been masked but padding, the value would differ
  unmasked = np.mean([_lse(cos[i][keep[i]]) - cos[i, i] for i in range(4)])
  assert abs(unmasked - expected) > 0.05


def test_rows_without_an_entity_are_left_out():
  s = jnp.array([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]])
  e = jnp.array([[[1.0, 0.0]], [[3.0, 3.0]], [[0.0, 1.0]]])
  with_padding, _ = ec.entity_contrast(s, e, jnp.array([[0], [-1], [2]]),
                                       _no_same_sentence(3), 1.0)
  cos = np.array([[1.0, 0.0], [1 / np.sqrt(2), 1 / np.sqrt(2)]])  # rows 0, 2 x columns 0, 2
  expected = 0.5 * ((_lse(cos[0]) - cos[0, 0]) + (_lse(cos[1]) - cos[1, 1]))
  np.testing.assert_allclose(float(with_padding), expected, rtol=1e-5)


def _batch(ids):
  batch = vmsst_testing.random_batch(batch_size=len(ids))
  batch["entities"] = np.asarray(ids, np.int32)
  return batch


def test_loss_is_self_contrast_of_two_dropout_views_plus_weighted_entity_term():
  model = MODELS["entity_contrastive"](DROPOUT, num_entities=6, num_hard_negatives=1,
                                       entity_weight=0.3)
  params = vmsst_testing.init_params(model)
  batch = _batch([[0, 3], [1, 4], [2, -1], [5, 3]])
  rng = jax.random.key(3)
  loss, metrics = model.loss_fn(params, batch, rng)
  tokens = np.concatenate([batch["tokens_a"]] * 2)
  views = np.asarray(model.semantic(params, tokens, np.concatenate([batch["mask_a"]] * 2), rng)[0])
  v1, v2 = views[:4], views[4:]
  assert np.abs(v1 - v2).max() > 1e-3  # dropout is on: the two views differ
  n1, n2 = (x / np.linalg.norm(x, axis=-1, keepdims=True) for x in (v1, v2))
  sim = n1 @ n2.T / 0.05
  self_loss = 0.5 * np.mean([(_lse(sim[i]) - sim[i, i]) + (_lse(sim[:, i]) - sim[i, i])
                             for i in range(4)])
  table = np.asarray(params["entities"]["embedding"]) @ np.asarray(
      params["entities"]["projection"])
  tn = table / np.linalg.norm(table, axis=-1, keepdims=True)
  ids = batch["entities"]
  logits = np.concatenate([n1 @ tn[ids[:, 0]].T, n1 @ tn[np.maximum(ids[:, 1], 0)].T], 1) / 0.05
  logits[:, 6] = -np.inf  # row 2's padded hard negative
  entity_loss = np.mean([_lse(logits[i]) - logits[i, i] for i in range(4)])
  np.testing.assert_allclose(float(metrics["self_contrast_loss"]), self_loss, rtol=1e-4)
  np.testing.assert_allclose(float(metrics["entity_loss"]), entity_loss, rtol=1e-4)
  np.testing.assert_allclose(float(loss), self_loss + 0.3 * entity_loss, rtol=1e-4)


def test_needs_dropout_and_the_entities_feature():
  with pytest.raises(ValueError, match="dropout_rate > 0"):
    MODELS["entity_contrastive"](vmsst_testing.TINY, num_entities=4)
  model = MODELS["entity_contrastive"](DROPOUT, num_entities=4)
  with pytest.raises(KeyError, match="vmsst_wiki_entities"):
    model.loss_fn(vmsst_testing.init_params(model), vmsst_testing.random_batch(),
                  jax.random.key(0))
  assert model.input_shapes(4, 12)["entities"] == (4, 1)
  assert "entities" not in models.batch_shapes(4, 12)  # other objectives' batches unchanged


@pytest.mark.skipif(jax.device_count() < 8, reason="needs 8 CPU devices (tests/conftest.py)")
def test_data4_model2_equals_one_device():
  model = MODELS["entity_contrastive"](DROPOUT, num_entities=7, num_hard_negatives=1)
  batches = [_batch(np.stack([np.arange(8) % 7, (np.arange(8) + 3 + s) % 7], 1))
             for s in range(2)]
  runs = []
  for mesh in (partitioning.make_mesh(1, 1, devices=jax.devices()[:1]),
               partitioning.make_mesh(4, 2, devices=jax.devices()[:8])):
    trainer = trainer_lib.Trainer(model, optax.adam(3e-3), mesh, model.input_shapes(8, 12))
    state, history = trainer.initialize(jax.random.key(0)), []
    for batch in batches:
      state, metrics = trainer.step(state, batch, jax.random.key(1))
      history.append((float(metrics["entity_loss"]), float(metrics["self_contrast_loss"])))
    runs.append((trainer, history, jax.device_get(state.params)))
  (_, history_1, params_1), (trainer_8, history_8, params_8) = runs
  np.testing.assert_allclose(history_1, history_8, rtol=1e-5)
  jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=2e-4, atol=2e-5),
               params_1, params_8)
  table = trainer_8.state_shardings.params["entities"]["embedding"]
  assert tuple(table.spec) == ("model", None)  # the entity table is split like the vocabulary
  assert params_8["entities"]["embedding"].shape == (ec.ROW_MULTIPLE, DROPOUT.emb_dim)


# ------------------------------------------------------------ vector files


def test_entity_table_starts_from_a_word2vec_text_or_npy_file(tmp_path):
  entity_dir = tmp_path / "entities"
  entity_dir.mkdir()
  (entity_dir / "entities.tsv").write_text("Computer system\t3\t\nBraille\t2\t\nLinux\t2\t\n")
  (entity_dir / "meta.json").write_text('{"num_entities": 3, "num_hard_negatives": 0}')
  vectors = tmp_path / "vectors.txt"
  dim = DROPOUT.emb_dim
  line = lambda key, value: key + " " + " ".join([str(value)] * dim) + "\n"
  vectors.write_text(f"3 {dim}\n" + line("ENTITY/Computer_system", 0.5) + line("Linux", -2)
                     + line("Unrelated", 9))
  model = MODELS["entity_contrastive"](DROPOUT, entity_dir=str(entity_dir),
                                       entity_vectors=str(vectors))
  table = np.asarray(vmsst_testing.init_params(model)["entities"]["embedding"])
  np.testing.assert_array_equal(table[0], 0.5)
  np.testing.assert_array_equal(table[2], -2.0)
  assert np.abs(table[1]).std() > 0.1  # not in the file: keeps its random initialisation
  npy = tmp_path / "vectors.npy"
  np.save(npy, np.arange(3 * dim, dtype=np.float32).reshape(3, dim))
  model = MODELS["entity_contrastive"](DROPOUT, entity_dir=str(entity_dir),
                                       entity_vectors=str(npy))
  table = np.asarray(vmsst_testing.init_params(model)["entities"]["embedding"])
  np.testing.assert_array_equal(table[:3], np.load(npy))
  vectors.write_text(f"3 {dim}\nLinux 1 2\n")
  with pytest.raises(ValueError, match=r"vectors.txt:2: 2 values, expected 32"):
    ec.load_entity_vectors(str(vectors), ["Linux"], dim)


# ------------------------------------------------------------- a real short run


def test_short_run_on_the_wikipedia_sample_improves_held_out_entity_retrieval(
    data_dir, tiny_vocab_path, tmp_path):
  if not SAMPLE.exists():
    pytest.skip(f"{SAMPLE} not found (../shared/data/wiki_entity_sample)")
  from tasks import wiki_entities  # pylint: disable=import-outside-toplevel
  entity_dir = tmp_path / "entities"
  wiki_entities.main([f"--dump={SAMPLE}", f"--output={entity_dir}", "--heldout_fraction=0.5"])
  texts, _, ids = wiki_entities.load_split(str(entity_dir), "validation")
  # Most of the sample's 205 entities are linked once; 8 held-out sentences link an entity
  # that training sentences link too (their anchor words are a learnable cue).
  assert len(texts) >= 5, len(texts)
  extra = [f"ENTITY_DIR = '{entity_dir}'", "train.evaluator = None", "BATCH_SIZE = 16",
           "inverse_sqrt_schedule.warmup_steps = 10"]
  results = []
  for steps in (1, 150):
    vmsst_testing.configure_small_run(data_dir, tiny_vocab_path, tmp_path / "ease", steps=steps,
                                      objective="entity_contrastive", extra=extra)
    run = vmsst.train.train()
    model = ec.EntityContrastive(NetworkConfig())  # the run's, from the parsed gin
    vocab = vocabulary_lib.get_vocabulary(tiny_vocab_path)
    results.append(ec.entity_retrieval(model, run["params"], texts, ids[:, 0], vocabulary=vocab,
                                       sequence_length=32))
    gin.clear_config()
  before, after = results
  print("held-out sentence->entity retrieval before/after:", before, after,
        "train entity_accuracy:", run["final_metrics"]["entity_accuracy"])
  assert after["mrr"] > 2 * before["mrr"], (before, after)
  assert after["accuracy"] >= before["accuracy"], (before, after)
