"""Query-tower tuning: triplet losses by hand, the frozen document tower, triplet data, a real run."""

import dataclasses
import os

import jax
import numpy as np
import optax
import pytest
import seqio

import vmsst.training.loop
import vmsst_testing
from vmsst_testing import TINY, init_params, random_batch
from vmsst_tasks.registry import common
from vmsst_tasks.registry import triplets as triplet_family
from vmsst_tasks.sources import triplet_sets as triplets_lib
from vmsst.encoding import checkpoint
from vmsst.encoding import restore
from vmsst.base.gin_utils import gin
from vmsst.model import param_files
from vmsst.training import parameter_groups
from vmsst.model import partitioning
from vmsst.training import trainer as trainer_lib
from vmsst.encoding import protocol
from vmsst.evaluation import in_training
from vmsst.evaluation import preservation
from vmsst_tasks.registry.feature_converters import PairFeatureConverter
from vmsst.objectives import QueryTower
from vmsst.objectives import query_tower


@pytest.fixture(autouse=True)
def _clean_gin():
  yield
  gin.clear_config()


def test_cosine_triplet_loss_by_hand():
  # Row 1: cos(a, p) = 0.6, cos(a, n) = 0 -> max(0, 0.1 − 0.6 + 0) = 0 (ranked right).
  # Row 2: cos(a, p) = 0,   cos(a, n) = 1 -> max(0, 0.1 − 0 + 1) = 1.1 (an error).
  a = np.array([[1.0, 0.0], [1.0, 0.0]])
  p = np.array([[0.6, 0.8], [0.0, 2.0]])
  n = np.array([[0.0, 1.0], [3.0, 0.0]])
  loss, m = query_tower.triplet_margin_loss(a, p, n, margin=0.1, similarity="cosine")
  assert float(loss) == pytest.approx(0.55, abs=1e-6)
  assert float(m["triplet_error_rate"]) == 0.5 and float(m["active_fraction"]) == 0.5
  assert float(m["positive_similarity"]) == pytest.approx(0.3, abs=1e-6)


def test_euclidean_triplet_loss_by_hand():
  # Row 1: d(a, p) = 5, d(a, n) = 1 -> max(0, 5 − 1 + 1) = 5.
  # Row 2: d(a, p) = 1, d(a, n) = 2 -> max(0, 1 − 2 + 1) = 0 (exactly at the margin).
  a = np.zeros((2, 2))
  p = np.array([[3.0, 4.0], [1.0, 0.0]])
  n = np.array([[1.0, 0.0], [0.0, 2.0]])
  loss, m = query_tower.triplet_margin_loss(a, p, n, margin=1.0, similarity="euclidean")
  assert float(loss) == pytest.approx(2.5, abs=1e-5)
  assert float(m["triplet_error_rate"]) == 0.5
  assert float(m["active_fraction"]) == 0.5
  with pytest.raises(ValueError, match="similarity"):
    QueryTower(TINY, similarity="dot")


def _triplet_batch(batch_size=4, seed=0):
  batch = random_batch(batch_size, seed=seed)
  batch["tokens_negative"] = random_batch(batch_size, seed=seed + 7)["tokens_a"]
  return batch


@pytest.mark.slow  # over ~7 s (docs/results/tests/)
def test_anchor_goes_through_the_query_tower_documents_through_the_frozen_one():
  model = QueryTower(TINY, margin=0.2)
  params = init_params(model)
  state = {query_tower.DOCUMENTS: init_params(model, seed=1)}  # a different document tower
  batch = _triplet_batch()
  loss, (metrics, _) = jax.jit(model.loss_fn_with_state)(params, state, batch,
                                                         jax.random.key(0))
  docs = state[query_tower.DOCUMENTS]
  anchor = model.encode(params, batch["tokens_a"], batch["mask_a"])
  positive = model.encode(docs, batch["tokens_b"], batch["mask_b"])
  negative = model.encode(docs, batch["tokens_negative"],
                          (batch["tokens_negative"] != 0).astype(np.int32))
  want, _ = query_tower.triplet_margin_loss(anchor, positive, negative, margin=0.2,
                                            similarity="cosine")
  assert float(loss) == pytest.approx(float(want), rel=1e-5)
  assert float(metrics["loss"]) == float(loss)
  # The other assignment of towers gives another loss: the test can fail.
  swapped, _ = query_tower.triplet_margin_loss(
      model.encode(docs, batch["tokens_a"], batch["mask_a"]),
      model.encode(params, batch["tokens_b"], batch["mask_b"]), negative, margin=0.2,
      similarity="cosine")
  assert float(swapped) != pytest.approx(float(loss), rel=1e-3)


@pytest.mark.slow
def test_training_moves_the_query_tower_never_the_document_tower():
  model = QueryTower(TINY)
  mesh = partitioning.make_mesh(1, 1, devices=jax.devices()[:1])
  optimizer = parameter_groups.frozen_groups(optimizer=optax.adam(1e-2), groups=["embeddings"])
  trainer = trainer_lib.Trainer(model, optimizer, mesh, model.input_shapes(4, 12))
  state = trainer.initialize(jax.random.key(0))
  start = jax.device_get(state.params)
  assert np.array_equal(jax.device_get(state.model_state[query_tower.DOCUMENTS])
                        ["token_embed"]["embedding"], start["token_embed"]["embedding"])
  for step in range(3):
    state, metrics = trainer.step(state, _triplet_batch(seed=step), jax.random.key(1))
  assert np.isfinite(float(metrics["loss"]))
  documents = param_files.flatten(jax.device_get(state.model_state[query_tower.DOCUMENTS]))
  before, after = param_files.flatten(start), param_files.flatten(jax.device_get(state.params))
  assert all(np.array_equal(documents[k], before[k]) for k in before)  # bit-identical
  moved = {k for k in before if not np.array_equal(after[k], before[k])}
  assert "semantic_head/mu/kernel" in moved
  assert not moved & {"token_embed/embedding", "semantic_positions/positions"}


def test_triplet_tsv_reader_names_file_and_line(tmp_path):
  good = tmp_path / "good.tsv"
  good.write_text("a man sings\ta man is singing\ta cat sleeps\n\nx\ty\tz\n")
  rows, blank = triplets_lib.read_tsv(good)
  assert rows == [("a man sings", "a man is singing", "a cat sleeps"), ("x", "y", "z")]
  assert blank == 1
  bad = tmp_path / "bad.tsv"
  bad.write_text("a\tb\tc\nonly two\tfields\n")
  with pytest.raises(ValueError, match=r"bad\.tsv:2: expected 3"):
    triplets_lib.read_tsv(bad)
  triplets_lib.write_tsv(tmp_path / "out.tsv", [("a\tb", "c", "d")])  # a TAB inside is made a space
  assert triplets_lib.read_tsv(tmp_path / "out.tsv")[0] == [("a b", "c", "d")]


def test_triplet_task_reads_a_directory_of_tsv_files(tmp_path):
  triplets_lib.write_tsv(tmp_path / "train.tsv", [("a", "b", "c"), ("d", "e", "f")])
  triplets_lib.write_tsv(tmp_path / "validation.tsv", [("g", "h", "i")])
  (tmp_path / "validation.tsv").write_text("g\th\ti\n\n")  # one blank line: counted
  splits = triplets_lib.read_triplet_splits(str(tmp_path), data_dir="unused")
  assert splits["train"][0] == [("a", "b", "c"), ("d", "e", "f")]
  assert splits["validation"][0] == [("g", "h", "i")]
  counts = splits["validation"][1]
  assert (counts.read, counts.kept, dict(counts.skipped)) == (2, 1, {"blank_line": 1})
  (tmp_path / "validation.tsv").unlink()
  with pytest.raises(FileNotFoundError, match="validation.tsv not found"):
    triplets_lib.read_triplet_splits(str(tmp_path), data_dir="unused")


def test_stsb_builder_on_the_real_train_split(data_dir):
  stsb = data_dir / "stsb"
  if not (stsb / "sts-train.csv").exists():
    pytest.skip(f"STSb not found at {stsb}")
  rows, counts = triplets_lib.stsb_triplets(stsb, "train")
  assert counts.pairs == 5749 == counts.kept + counts.skipped_identical + counts.not_high
  assert counts.kept == len(rows) == counts.same_anchor + counts.same_file + counts.any_file
  assert counts.same_anchor > 0 and counts.same_file > 0
  reported = triplets_lib.pair_counts(counts)  # what the task's data report shows
  assert reported.read == 5749 == reported.kept + sum(reported.skipped.values())
  # Line 1 of sts-train.csv: MSRvid, 5.000, "A plane is taking off." / "An air plane ...".
  anchor, positive, negative = rows[0]
  assert (anchor, positive) == ("A plane is taking off.", "An air plane is taking off.")
  from vmsst.base import sts_files  # pylint: disable=import-outside-toplevel
  pairs = sts_files.read_stsb(stsb, "train")
  low_msrvid = {s for s1, s2, g, f in zip(pairs.sentences1, pairs.sentences2, pairs.gold,
                                          pairs.source_files)
                if g <= 1.0 and f == "MSRvid" for s in (s1, s2)}
  assert negative in low_msrvid
  assert all(n not in (a, p) for a, p, n in rows)
  assert triplets_lib.stsb_triplets(stsb, "train")[0] == rows  # seeded: the same again


def test_triplet_task_pads_the_negative_to_the_training_length(data_dir, tiny_vocab_path):
  inputs = common.RegistrationInputs.read(str(data_dir), tiny_vocab_path)
  triplet_family.triplet_tasks(inputs, triplets="stsb")
  vocab = inputs.vocabulary
  ds = seqio.get_dataset(triplets_lib.TASK, task_feature_lengths={"tokens_a": 10, "tokens_b": 10},
                         feature_converter=PairFeatureConverter(pack=False),
                         dataset_split="validation", shuffle=False)
  example = next(ds.as_numpy_iterator())
  first = triplets_lib.stsb_triplets(data_dir / "stsb", "dev")[0][0]
  want = list(vocab.encode(first[2]))[:9] + [1]
  assert list(example["tokens_negative"]) == want + [0] * (10 - len(want))
  assert example["tokens_a"][example["mask_a"].sum() - 1] == 1  # EOS, like the negative
  assert set(example) >= {"tokens_a", "mask_a", "tokens_b", "mask_b", "tokens_negative"}


@pytest.mark.slow
def test_init_params_accepts_a_trained_model_directory(tiny_model):
  model_dir, trained = tiny_model
  config = restore.restore(str(model_dir)).model.network_config
  gin.clear_config()
  model = QueryTower(config)
  fresh = init_params(model, length=8)
  loaded = param_files.load_params(str(model_dir), fresh)
  stored = param_files.flatten(trained)
  flat = param_files.flatten(jax.device_get(loaded))
  assert set(flat) < set(stored)  # the VMSST decoder is left out
  assert all(np.array_equal(flat[k], stored[k]) for k in flat)
  small = QueryTower(dataclasses.replace(config, emb_dim=config.emb_dim // 2))
  with pytest.raises(ValueError, match="shape of token_embed/embedding"):
    param_files.load_params(str(model_dir), init_params(small, length=8))


@pytest.mark.slow
def test_cpu_tuning_from_a_checkpoint_lowers_heldout_triplet_error(data_dir, tiny_vocab_path,
                                                                   tiny_model, tmp_path):
  init_dir, _ = tiny_model
  model_dir = tmp_path / "query_tower"
  vmsst_testing.configure_small_run(
      data_dir, tiny_vocab_path, model_dir, steps=120, objective="query_tower",
      extra=[f"INIT_MODEL_DIR = '{init_dir}'", "train.evaluator = None"])
  result = vmsst.training.loop.train()
  losses = [loss for _, loss in result["loss_history"]]
  assert np.mean(losses[-3:]) < np.mean(losses[:3]), losses
  heldout = triplets_lib.stsb_triplets(data_dir / "stsb", "test")[0]
  gin.clear_config()
  # The frozen document tower saved in the tuned run's checkpoint is bit-identical to the
  # starting model, and differs from the tuned query tower.
  document_tower = restore.restore_document_tower(str(model_dir))
  started = param_files.flatten(jax.device_get(restore.restore(str(init_dir)).params))
  frozen = param_files.flatten(jax.device_get(document_tower.params))
  tuned_params = param_files.flatten(jax.device_get(restore.restore(str(model_dir)).params))
  assert all(np.array_equal(frozen[k], started[k]) for k in frozen)
  assert not np.array_equal(frozen["semantic_head/mu/kernel"],
                            tuned_params["semantic_head/mu/kernel"])
  with pytest.raises(ValueError, match="not QueryTower"):
    restore.restore_document_tower(str(init_dir))
  wrap = lambda encoder: protocol.UniqueSentences(encoder, progress=False)
  original = wrap(checkpoint.CheckpointEncoder.from_model_dir(str(init_dir)))
  tuned = wrap(checkpoint.CheckpointEncoder.from_model_dir(str(model_dir)))
  documents = wrap(checkpoint.CheckpointEncoder(document_tower, name="document_tower"))
  counts = preservation.triplet_evaluation(preservation.Towers(original, original),
                                           preservation.Towers(tuned, documents), heldout,
                                           margin=0.3)
  print("train loss", losses[:3], losses[-3:], "held-out", counts)
  # Measured: held-out loss 0.125 -> 0.081, cosine errors 25 -> 23 of 338
  # (a count difference this small is not significant; the loss is the signal).
  assert counts["loss_after"] < 0.8 * counts["loss_before"]
  assert counts["after"]["cosine_errors"] <= counts["before"]["cosine_errors"]
  # Preservation rows on small real subsets: one row per language pair and check.
  root = tmp_path / "data"
  (root / "xnli_de").mkdir(parents=True)
  lines = (data_dir / "xnli_de" / "test.tsv").read_text(encoding="utf-8").split("\n")[:150]
  (root / "xnli_de" / "test.tsv").write_text("\n".join(lines) + "\n", encoding="utf-8")
  os.symlink(data_dir / "stsb-multi-mt", root / "stsb-multi-mt")
  (root / "tatoeba").mkdir()
  os.symlink(data_dir / "tatoeba" / "v1", root / "tatoeba" / "v1")
  report = preservation.evaluate(original.encoder, tuned.encoder, root,
                                 documents=documents.encoder, triplets=heldout[:50],
                                 sts_languages=["en", "de"], tatoeba_languages=["deu"],
                                 margin=0.3, progress=False)
  pairs = {(r["check"], r["pair"]) for r in report["rows"]}
  assert {("sts spearman", p) for p in ("en-en", "en-de", "de-en", "de-de")} <= pairs
  assert {("tatoeba xx2en", "deu-eng"), ("tatoeba en2xx", "eng-deu"),
          ("xnli entailment_vs_contradiction distance", "de-de")} <= pairs
  total = report["counts"]["all"]
  assert sum(total.values()) == len(report["rows"]) and report["skipped"] == []
  print(preservation.report(report))


def test_validation_scores_query_anchors_against_the_frozen_documents(data_dir, tiny_model):
  import flax.linen as nn  # pylint: disable=import-outside-toplevel
  from vmsst.evaluation import pair_ranking  # pylint: disable=import-outside-toplevel
  init_dir, _ = tiny_model
  restored = restore.restore(str(init_dir))
  validation = in_training.QueryTowerValidation(
      triplets="stsb", data_dir=str(data_dir), vocabulary=restored.vocabulary,
      documents_model_dir=str(init_dir), sequence_length=restored.sequence_length,
      margin=0.1, batch_size=8, max_triplets=24)

  def embed(tokens, mask, side="a", sign=1.0):  # one-tower model: side is ignored
    with jax.set_mesh(restored.mesh), nn.logical_axis_rules(partitioning.LOGICAL_AXIS_RULES):
      return sign * restored.model.encode(restored.params, tokens, mask)

  result = validation.run(embed)
  rows = triplets_lib.stsb_triplets(data_dir / "stsb", "dev")[0][:24]
  encoder = checkpoint.CheckpointEncoder(restored, batch_size=8)
  anchors, positives, negatives = (encoder.encode([r[i] for r in rows]) for i in range(3))
  want, _ = query_tower.triplet_margin_loss(anchors, positives, negatives, margin=0.1,
                                            similarity="cosine")
  assert result["loss"] == pytest.approx(float(want), rel=1e-4)
  errors = pair_ranking.triplet_errors(anchors, positives, negatives)["cosine_errors"]
  assert result["errors"] == errors and result["n"] == 24
  # Another query tower (anchors negated) against the same documents: every verdict flips.
  flipped = validation.run(lambda tokens, mask, side: embed(tokens, mask, side, -1.0))
  assert flipped["errors"] == 24 - errors


def test_msmarco_splits_as_the_paper(tmp_path):
  import gzip  # pylint: disable=import-outside-toplevel
  import json  # pylint: disable=import-outside-toplevel
  samples = [{"query": f"q{i}", "pos": [f"p{i}", f"p{i}b"], "neg": [f"n{i}", f"n{i}b", f"n{i}c"]}
             for i in range(8)]
  path = tmp_path / "msmarco-triplets.jsonl.gz"
  with gzip.open(path, "wt", encoding="utf-8") as f:
    f.write("".join(json.dumps(s) + "\n" for s in samples))
  splits = triplets_lib.msmarco_splits(path, {"train": 3, "validation": 2, "test": 2})
  assert splits["train"] == [("q0", "p0", "n0"), ("q1", "p1", "n1"), ("q2", "p2", "n2")]
  assert splits["validation"] == [("q3", "p3", "n3"), ("q4", "p4", "n4")]
  # Sample 5 falls between validation and test (the paper's 499,184 = 487,983 + 4,200 +
  # 7,000 + 1); test is every positive x negative of the last two: 2 x 2 x 3.
  assert len(splits["test"]) == 12 and splits["test"][0] == ("q6", "p6", "n6")
  assert ("q7", "p7b", "n7c") in splits["test"]
  with pytest.raises(ValueError, match="fewer than"):
    triplets_lib.msmarco_splits(path, {"train": 7, "validation": 1, "test": 1})
  bad = tmp_path / "bad.jsonl"
  bad.write_text('{"query": "q", "pos": ["p"], "neg": ["n"]}\n{"question": "q"}\n')
  with pytest.raises(ValueError, match=r"bad\.jsonl:2: expected a JSON object"):
    triplets_lib.msmarco_splits(bad, {"train": 1, "validation": 0, "test": 0})
