"""Dual momentum contrast: the loss by hand, EMA and FIFO queues, towers per side, the NLI
term, sharding, resume, learning."""

import dataclasses
import json

import flax.linen as nn
from flax import traverse_util
from clu import metric_writers
import jax
import numpy as np
import optax
import pytest

import vmsst
import vmsst.training.loop
import vmsst_testing
from vmsst_testing import TINY, init_params, random_batch
from vmsst.base.gin_utils import gin
from vmsst.training import checkpointing
from vmsst.encoding import embed_files
from vmsst.export_formats import saved_model as export
from vmsst.encoding import checkpoint
from vmsst.encoding import restore
from vmsst.mining import file_mining
from vmsst.model import models
from vmsst.model import partitioning
from vmsst.model import tokens as tokens_lib
from vmsst.training import trainer as trainer_lib
from vmsst.base import sentencepiece_vocabulary
from vmsst.objectives import MomentumContrast
from vmsst.objectives import momentum_contrast
from vmsst.objectives import nli_head
from vmsst.encoding import protocol
from vmsst.encoding import saved_model
from vmsst.evaluation import parallel
from vmsst.evaluation import question_retrieval
from vmsst.encoding import similarity
from vmsst.evaluation import sts
from vmsst.evaluation import tatoeba
from vmsst.evaluation.in_training import RetrievalEvaluator
from vmsst.evaluation.tatoeba import retrieval_accuracy

needs_8_devices = pytest.mark.skipif(
    jax.device_count() < 8,
    reason="needs XLA_FLAGS=--xla_force_host_platform_device_count=8 (tests/conftest.py sets it)")


@pytest.fixture(autouse=True)
def _clean_gin():
  yield
  gin.clear_config()


def _normalize(x):
  x = np.asarray(x, np.float64)
  return x / np.linalg.norm(x, axis=-1, keepdims=True)


def _numpy_queue_info_nce(q, k, queue, temperature):
  q, k = _normalize(q), _normalize(k)
  logits = np.concatenate([np.sum(q * k, -1, keepdims=True), q @ np.asarray(queue).T], -1)
  logits /= temperature
  top = logits.max(-1)
  lse = top + np.log(np.exp(logits - top[:, None]).sum(-1))
  return np.mean(lse - logits[:, 0]), np.mean(logits[:, 0] > logits[:, 1:].max(-1))


def _trainer(model, batch_size=4, mesh=None, optimizer=None):
  mesh = mesh or partitioning.make_mesh(1, 1, devices=jax.devices()[:1])
  return trainer_lib.Trainer(model, optimizer or optax.adam(3e-3), mesh,
                             models.batch_shapes(batch_size, 12))


@pytest.mark.slow  # over ~7 s (docs/results/tests/)
def test_queue_info_nce_by_hand_and_against_numpy():
  # logits [1, 0, -1] at τ = 1: loss = log(e + 1 + 1/e) − 1; the positive wins.
  loss, accuracy = momentum_contrast.queue_info_nce(
      np.array([[2.0, 0.0]]), np.array([[3.0, 0.0]]), np.array([[0.0, 1.0], [-1.0, 0.0]]), 1.0)
  assert float(loss) == pytest.approx(np.log(np.e + 1 + 1 / np.e) - 1, rel=1e-6)
  assert float(accuracy) == 1.0
  rng = np.random.default_rng(0)
  q, k, queue = rng.normal(size=(3, 5)), rng.normal(size=(3, 5)), _normalize(rng.normal(size=(7, 5)))
  loss, accuracy = momentum_contrast.queue_info_nce(q, k, queue.astype(np.float32), 0.04)
  want_loss, want_accuracy = _numpy_queue_info_nce(q, k, queue, 0.04)
  assert float(loss) == pytest.approx(want_loss, rel=1e-4)
  assert float(accuracy) == pytest.approx(want_accuracy)


@pytest.fixture(scope="module")
def shared_tower():
  """(model, params, unboxed model state, batch) of a shared-tower model, K = 8."""
  model = MomentumContrast(TINY, temperature=0.1, queue_size=8)
  params = init_params(model)
  state = jax.device_get(nn.unbox(model.init_model_state(params, jax.random.key(3))))
  return model, params, state, random_batch()


def test_loss_is_both_directions_against_momentum_keys_and_the_other_queue(shared_tower):
  model, params, state, batch = shared_tower
  state = dict(state, momentum=init_params(model, seed=1))  # keys come from here, not `params`
  loss, (m, aux) = jax.jit(model.loss_fn_with_state)(params, state, batch, jax.random.key(0))
  encode = jax.jit(model.encode)  # TINY has dropout 0, so queries are deterministic too
  q = {s: encode(params, batch[f"tokens_{s}"], batch[f"mask_{s}"]) for s in "ab"}
  k = {s: encode(state["momentum"], batch[f"tokens_{s}"], batch[f"mask_{s}"]) for s in "ab"}
  ab, _ = _numpy_queue_info_nce(q["a"], k["b"], state["queue_b"], 0.1)
  ba, _ = _numpy_queue_info_nce(q["b"], k["a"], state["queue_a"], 0.1)
  assert float(loss) == pytest.approx(ab + ba, rel=1e-4)
  assert float(m["momentum_contrast_loss_ab"]) == pytest.approx(ab, rel=1e-4)
  np.testing.assert_allclose(aux["keys_b"], _normalize(k["b"]), rtol=1e-5, atol=1e-6)
  with pytest.raises(TypeError, match="loss_fn_with_state"):
    model.loss_fn(params, batch, jax.random.key(0))


@pytest.mark.slow
def test_no_gradient_reaches_momentum_encoders_or_queues(shared_tower):
  model, params, state, batch = shared_tower
  floats = {k: v for k, v in state.items() if k != "queue_pointer"}
  loss = lambda p, f: model.loss_fn_with_state(p, dict(state, **f), batch, jax.random.key(0))[0]
  grad_params, grad_state = jax.jit(jax.grad(loss, argnums=(0, 1)))(params, floats)
  assert all(not np.any(g) for g in jax.tree.leaves(grad_state))
  assert any(np.any(g) for g in jax.tree.leaves(grad_params))
  # Momentum weights and queues are no optimizer parameters.
  trainer = _trainer(model)
  adam = trainer.abstract_state.opt_state[0]
  assert jax.tree.structure(adam.mu) == jax.tree.structure(trainer.abstract_state.params)


@pytest.mark.slow
def test_ema_update_is_exact_and_zero_momentum_copies_the_base_encoder(shared_tower):
  np.testing.assert_array_equal(
      momentum_contrast.ema({"w": np.array([2.0, 4.0])}, {"w": np.array([0.0, 8.0])}, 0.75)["w"],
      [1.5, 5.0])
  _, old, state, _ = shared_tower
  model, new = MomentumContrast(TINY, momentum=0.9, queue_size=8), init_params(MomentumContrast(TINY), seed=1)
  keys = {"keys_a": np.zeros((4, 32), np.float32), "keys_b": np.zeros((4, 32), np.float32)}
  updated = jax.jit(model.update_model_state)(state, new, keys)
  jax.tree.map(lambda u, o, n: np.testing.assert_allclose(u, 0.9 * o + 0.1 * n, rtol=1e-6,
                                                          atol=1e-7),
               updated["momentum"], old, new)
  # m = 0, the paper's degenerate case, is a documented binding, not a code path.
  assert "momentum = 0.0" in (vmsst_testing.ROOT / "gin/models/momentum_contrast.gin").read_text()
  assert "degenerate" in MomentumContrast.__init__.__doc__
  with pytest.raises(ValueError, match="momentum"):
    MomentumContrast(TINY, momentum=1.5)
  trainer = _trainer(MomentumContrast(TINY, momentum=0.0, queue_size=8))
  state = trainer.initialize(jax.random.key(0))
  for seed in range(2):
    state, _ = trainer.step(state, random_batch(seed=seed), jax.random.key(1))
    host = jax.device_get(state)
    jax.tree.map(np.testing.assert_array_equal, host.model_state["momentum"], host.params)


@pytest.fixture(scope="module")
def separate_towers_run():
  """5 steps of B = 8 into queues of K = 32 (the ring wraps once), separate towers.

  B, K and the optimizer are those of the one-device run of
  test_data4_model2_equals_single_device_with_the_queue_split_over_data[True]: the same
  initialiser and step programs, which that test then loads from the session's compilation
  cache (tests/conftest.py) instead of compiling them again.

  Returns the trainer, the live final state, and host copies: the initial
  and after-3-steps model states and the keys [B, d] each step should enqueue.
  """
  model = MomentumContrast(TINY, momentum=0.9, queue_size=32, separate_towers=True)
  trainer = _trainer(model, 8)
  embed = jax.jit(model.embed_side, static_argnums=2)
  state = trainer.initialize(jax.random.key(0))
  run = {"trainer": trainer, "initial": jax.device_get(state.model_state), "keys": []}
  for step in range(5):
    batch = random_batch(batch_size=8, seed=step)
    momentum = jax.device_get(state.model_state["momentum"])
    run["keys"].append({s: _normalize(embed(momentum, batch, s)) for s in "ab"})
    state, _ = trainer.step(state, batch, jax.random.key(1))
    if step == 2:
      run["after_3"] = jax.device_get(state.model_state)
  run["final"], run["state"] = jax.device_get(state.model_state), state
  return run


def test_queues_hold_the_last_keys_in_order_oldest_overwritten_first(separate_towers_run):
  run = separate_towers_run
  after_3, final = run["after_3"], run["final"]
  assert int(after_3["queue_pointer"]) == 24 and int(final["queue_pointer"]) == 8
  for s in "ab":
    keys = np.concatenate([k[s] for k in run["keys"]])  # 40 keys, oldest first
    # N·B = 24 ≤ K: rows 0..23 are the keys in order, rows 24..31 untouched.
    np.testing.assert_allclose(after_3[f"queue_{s}"][:24], keys[:24], rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(after_3[f"queue_{s}"][24:], run["initial"][f"queue_{s}"][24:])
    # N·B = 40 > K: the last 32 keys, read from the pointer (the oldest) on.
    oldest_first = np.roll(final[f"queue_{s}"], -int(final["queue_pointer"]), axis=0)
    np.testing.assert_allclose(oldest_first, keys[-32:], rtol=1e-5, atol=1e-6)


@needs_8_devices
@pytest.mark.parametrize("separate_towers", [False, True])
@pytest.mark.slow
def test_data4_model2_equals_single_device_with_the_queue_split_over_data(separate_towers):
  batches = [random_batch(batch_size=8, seed=s) for s in range(3)]
  runs = []
  for mesh in (partitioning.make_mesh(1, 1, devices=jax.devices()[:1]),
               partitioning.make_mesh(4, 2, devices=jax.devices()[:8])):
    trainer = _trainer(MomentumContrast(TINY, momentum=0.9, queue_size=32,
                                        separate_towers=separate_towers), 8, mesh)
    state, losses = trainer.initialize(jax.random.key(0)), []
    for batch in batches:
      state, metrics = trainer.step(state, batch, jax.random.key(1))
      losses.append(float(metrics["loss"]))
    runs.append((trainer, losses, jax.device_get(state)))
  (_, losses_1, state_1), (trainer_8, losses_8, state_8) = runs
  np.testing.assert_allclose(losses_1, losses_8, rtol=1e-5)
  jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=2e-4, atol=2e-5),
               (state_1.params, state_1.model_state), (state_8.params, state_8.model_state))
  shardings = trainer_8.state_shardings.model_state
  assert tuple(shardings["queue_a"].spec) == ("data", None)
  momentum = shardings["momentum"]["tower_b"] if separate_towers else shardings["momentum"]
  assert tuple(momentum["token_embed"]["embedding"].spec) == ("model", None)


def test_checkpoint_round_trip_restores_the_model_state_and_resumes_identically(
    separate_towers_run, tmp_path):
  trainer, state = separate_towers_run["trainer"], separate_towers_run["state"]
  manager = checkpointing.make_manager(str(tmp_path))
  checkpointing.save(manager, 5, state, force=True)
  manager.wait_until_finished()
  restored = checkpointing.restore_latest(manager, trainer.abstract_state)
  jax.tree.map(np.testing.assert_array_equal, jax.device_get(restored), jax.device_get(state))
  assert restored.model_state["queue_a"].sharding == trainer.state_shardings.model_state["queue_a"]
  after = [jax.device_get(trainer.step(s, random_batch(batch_size=8, seed=7),
                                       jax.random.key(1))[0])
           for s in (restored, state)]  # `state` is donated last: nothing reads it afterwards
  jax.tree.map(np.testing.assert_array_equal, after[0], after[1])


@pytest.mark.slow
def test_short_run_on_real_data_learns_its_queue_contrast(data_dir, tiny_vocab_path, tmp_path):
  # K = 128 keys of B = 32: real keys fill the queues after 4 steps; before
  # that, random unit vectors are easy negatives and the loss is near 0. The
  # EMA is shortened (m = 0.9) so that 40 steps move the key encoders at all
  # (the last two logged losses are about 0.43 of the first full-queue one).
  vmsst_testing.configure_small_run(
      data_dir, tiny_vocab_path, tmp_path / "m", steps=40, objective="momentum_contrast",
      extra=["train.evaluator = None", "train.mixture_name = 'vmsst_multi30k'",
             "MomentumContrast.queue_size = 128", "MomentumContrast.momentum = 0.9",
             "train.log_every = 5"])
  result = vmsst.training.loop.train()
  full = [loss for step, loss in result["loss_history"] if step > 128 // 32]
  assert result["step"] == 40
  assert np.mean(full[-2:]) < 0.6 * full[0], result["loss_history"]
  # Positives above all 128 queued negatives (chance is well below 1 / 129 per side).
  assert result["final_metrics"]["queue_accuracy"] > 0.5, result["final_metrics"]


# ---------------------------------------------------------------- towers per side

def test_separate_towers_encode_each_side_through_its_own_tower():
  model = MomentumContrast(TINY, queue_size=8, separate_towers=True)
  params, batch = init_params(model), random_batch()
  one_tower = MomentumContrast(TINY, queue_size=8)
  tokens, mask = batch["tokens_a"], batch["mask_a"]
  for side in "ab":
    want = one_tower.encode(params[f"tower_{side}"], tokens, mask)
    np.testing.assert_array_equal(model.encode(params, tokens, mask, side=side), want)
    np.testing.assert_array_equal(model.encode_side(params, tokens, mask, side), want)
  assert not np.allclose(model.encode(params, tokens, mask, side="a"),
                         model.encode(params, tokens, mask, side="b"))
  np.testing.assert_array_equal(model.encode(params, tokens, mask),  # the default is side a
                                one_tower.encode(params["tower_a"], tokens, mask))
  # A shared tower ignores the side; the rule maps English to a, the rest to b.
  shared = init_params(one_tower)
  np.testing.assert_array_equal(one_tower.encode(shared, tokens, mask, side="b"),
                                one_tower.encode(shared, tokens, mask, side="a"))
  assert model.sides == ("a", "b") and one_tower.sides == ("a",)
  assert [model.side_of_language(c) for c in ("en", "eng", "deu", "zh")] == ["a", "a", "b", "b"]
  with pytest.raises(ValueError, match="side='c'"):
    model.encode(params, tokens, mask, side="c")


@pytest.fixture(scope="module")
def vocab_model(tiny_vocab_path):
  """(vocabulary, two-tower model over it, its params, 4 sentences)."""
  vocab = sentencepiece_vocabulary.get_vocabulary(str(tiny_vocab_path))
  model = MomentumContrast(dataclasses.replace(TINY, vocab_size=vocab.vocab_size),
                           queue_size=8, separate_towers=True)
  sentences = ["ein Haus am See", "a dog runs", "zwei Katzen schlafen", "the river bank"]
  return vocab, model, init_params(model), sentences


def _embed(model, params, vocab, sentences, side):
  tokens, mask = tokens_lib.tokenize_batch(vocab, sentences, 8)
  return np.asarray(model.encode(params, tokens, mask, side=side))


@pytest.mark.slow  # over ~7 s (docs/results/tests/)
def test_in_training_retrieval_embeds_sources_by_tower_a_and_targets_by_tower_b(vocab_model):
  vocab, model, params, sentences = vocab_model
  evaluator = RetrievalEvaluator({"same": (sentences, sentences)}, vocab, sequence_length=8,
                                 batch_size=4)
  trainer = _trainer(model)
  writer = metric_writers.LoggingWriter()
  results = vmsst.training.loop.evaluate(evaluator, trainer, params, 0, writer)
  src, trg = (_embed(model, params, vocab, sentences, side) for side in ("a", "b"))
  forward, backward = retrieval_accuracy(src, trg), retrieval_accuracy(trg, src)
  assert results["same"] == pytest.approx(50.0 * (forward + backward))
  # Both towers are used: with tower b made a copy of tower a, each sentence
  # finds itself (100%); the random tower b of `params` does not (it is not trained).
  twins = dict(params, tower_b=params["tower_a"])
  assert vmsst.training.loop.evaluate(evaluator, trainer, twins, 0, writer)["same"] == 100.0
  assert results["same"] < 100.0


def _restored(model, params, vocab):
  mesh = partitioning.make_mesh(1, 1, devices=jax.devices()[:1])
  return restore.RestoredModel(model=model, params=jax.device_put(params), vocabulary=vocab,
                               sequence_length=8, step=0, mesh=mesh)


@pytest.mark.slow  # over ~7 s (docs/results/tests/)
def test_checkpoint_encoder_and_export_pick_the_tower_of_the_side(vocab_model):
  vocab, model, params, sentences = vocab_model
  restored = _restored(model, params, vocab)
  for side in "ab":
    encoded = checkpoint.CheckpointEncoder(restored, batch_size=4, side=side).encode(sentences)
    np.testing.assert_allclose(encoded, _embed(model, params, vocab, sentences, side),
                               rtol=1e-5, atol=1e-6)
  # Export traces both sides: the SavedModel holds both towers' parameters.
  flat = traverse_util.flatten_dict(jax.device_get(params), sep="/")
  exported = export.semantic_params(model, flat, 8)
  assert {n.split("/")[0] for n in exported} == {"tower_a", "tower_b"}


@pytest.fixture(scope="module")
def two_tower_encoder(vocab_model):
  """vocab_model's model restored as `evaluate --model_dir` builds it (compiled once here)."""
  vocab, model, params, _ = vocab_model
  return checkpoint.CheckpointEncoder(_restored(model, params, vocab), batch_size=4)


@pytest.mark.slow  # over ~7 s (docs/results/tests/)
def test_outside_training_a_side_b_language_is_embedded_by_tower_b(vocab_model,
                                                                    two_tower_encoder):
  """vmsst.Encoder and the suites' UniqueSentences pick the tower by the sentences' language."""
  vocab, model, params, sentences = vocab_model
  backend = two_tower_encoder
  tower = {side: _embed(model, params, vocab, sentences, side) for side in "ab"}
  assert not np.allclose(tower["a"], tower["b"], atol=1e-3)  # two random towers
  assert [backend.tower_of(c) for c in (None, "en", "eng", "de", "zho", "ang")] == [
      "a", "a", "a", "b", "b", "b"]  # ang (Old English): no language id, not side a's
  encoder = vmsst.Encoder(backend)
  for language, side in ((None, "a"), ("en", "a"), ("de", "b"), ("zho", "b")):
    np.testing.assert_allclose(encoder.encode(sentences, language=language), tower[side],
                               rtol=1e-5, atol=1e-6, err_msg=str(language))
  np.testing.assert_allclose(
      encoder.pairwise_similarity(sentences, sentences, languages=("eng", "deu")),
      similarity.paired_cosine(tower["a"], tower["b"]), rtol=1e-5, atol=1e-6)
  # One cache per tower: the same sentences asked in two languages get both towers' vectors.
  unique = protocol.UniqueSentences(backend, progress=False)
  np.testing.assert_allclose(unique.encode(sentences, language="eng"), tower["a"], rtol=1e-5,
                             atol=1e-6)
  np.testing.assert_allclose(unique.encode(sentences, language="deu"), tower["b"], rtol=1e-5,
                             atol=1e-6)
  one_tower = MomentumContrast(model.network_config, queue_size=8)
  assert checkpoint.CheckpointEncoder(
      _restored(one_tower, params["tower_a"], vocab)).tower_of("deu") is None


def _tatoeba_average(backend, folder):
  return tatoeba.evaluate(protocol.UniqueSentences(backend, progress=False), folder)["deu"]["avg"]


def test_tatoeba_embed_and_mine_put_the_non_english_side_through_tower_b(vocab_model,
                                                                        two_tower_encoder,
                                                                        tmp_path):
  vocab, model, params, sentences = vocab_model
  backend = two_tower_encoder
  tower = {side: _embed(model, params, vocab, sentences, side) for side in "ab"}
  # Tatoeba: the same lines on both sides, so a tower shared by both sides finds every one.
  folder = tmp_path / "tatoeba"
  folder.mkdir()
  for side in ("deu", "eng"):
    (folder / f"tatoeba.deu-eng.{side}").write_text("\n".join(sentences) + "\n")
  got = _tatoeba_average(backend, folder)
  assert got == pytest.approx(50.0 * (retrieval_accuracy(tower["b"], tower["a"]) +
                                      retrieval_accuracy(tower["a"], tower["b"])))
  twins = checkpoint.CheckpointEncoder(
      _restored(model, dict(params, tower_b=params["tower_a"]), vocab), batch_size=4)
  assert _tatoeba_average(twins, folder) == 100.0 and got < 100.0
  # embed --language: the file's lines through its language's tower.
  (tmp_path / "in.txt").write_text("\n".join(sentences) + "\n")
  get_encoder = lambda: protocol.UniqueSentences(backend, progress=False)
  for language, side in (("zh", "b"), ("en", "a")):
    embed_files.embed_file(get_encoder, tmp_path / "in.txt", tmp_path / f"{language}.npy",
                     language=language)
    np.testing.assert_allclose(np.load(tmp_path / f"{language}.npy"), tower[side], rtol=1e-5,
                               atol=1e-6)
  # mine --src_language/--trg_language: what mining the two towers' vectors gives.
  np.save(tmp_path / "a.npy", tower["a"])
  np.save(tmp_path / "b.npy", tower["b"])
  run = lambda name, **options: (file_mining.mine_files(
      get_encoder, tmp_path / "in.txt", tmp_path / "in.txt", tmp_path / name, k=2,
      progress=False, **options), (tmp_path / name).read_text())[1]
  routed = _mined(run("routed.tsv", src_language="deu", trg_language="eng"))
  # The towers' vectors computed in other batches agree to float32 rounding, so
  # the scores are compared to 1e-5 and the pairs exactly.
  through_b = _mined(run("b_a.tsv", src_embeddings=str(tmp_path / "b.npy"),
                         trg_embeddings=str(tmp_path / "a.npy")))
  assert routed[0] == through_b[0]
  np.testing.assert_allclose(routed[1], through_b[1], atol=1e-5)
  assert routed != _mined(run("a_a.tsv", src_embeddings=str(tmp_path / "a.npy"),
                              trg_embeddings=str(tmp_path / "a.npy")))


def _mined(tsv: str) -> tuple[list[tuple[str, str]], list[float]]:
  """A mining output's (source, target) pairs and their scores."""
  rows = [line.split("\t") for line in tsv.splitlines()]
  return [(src, trg) for _, src, trg in rows], [float(score) for score, _, _ in rows]


def test_sts17_question_retrieval_and_parallel_embed_each_side_in_its_language(
    vocab_model, two_tower_encoder, tmp_path):
  vocab, model, params, sentences = vocab_model
  backend = two_tower_encoder
  unique = lambda: protocol.UniqueSentences(backend, progress=False)
  tower = {side: _embed(model, params, vocab, sentences, side) for side in "ab"}
  across = similarity.paired_cosine(tower["b"], tower["a"])  # column 1 (ar) by b, 2 (en) by a
  # STS17 ar-en: the same sentence in both columns, so only the towers make the cosines differ.
  (tmp_path / "sts17").mkdir()
  (tmp_path / "sts17" / "STS.input.track2.ar-en.txt").write_text(
      "".join(f"{x}\t{x}\n" for x in sentences))
  (tmp_path / "sts17" / "STS.gs.track2.ar-en.txt").write_text("1\n2\n3\n4\n")
  track = sts.evaluate_sts17(unique(), tmp_path / "sts17")["tracks"]["track2.ar-en"]
  assert track["pearson"] == pytest.approx(sts.correlations(across, [1, 2, 3, 4])["pearson"])
  # parallel --src_language=deu --trg_language=eng.
  for name in ("src.txt", "trg.txt"):
    (tmp_path / name).write_text("\n".join(sentences) + "\n")
  got = parallel.evaluate(unique(), tmp_path / "src.txt", tmp_path / "trg.txt",
                          languages=("deu", "eng"))
  assert got["src2trg"]["accuracy"] == pytest.approx(
      100 * retrieval_accuracy(tower["b"], tower["a"]))
  # Question retrieval: German queries by tower b against the English KB by tower a.
  folder = tmp_path / "question_retrieval" / "set"
  folder.mkdir(parents=True)
  (folder / "queries.tsv").write_text("".join(f"q{i}\tdeu\t{x}\n" for i, x in enumerate(sentences)))
  (folder / "kb.tsv").write_text("".join(f"k{i}\t{x}\n" for i, x in enumerate(sentences)))
  (folder / "gold.tsv").write_text("".join(f"q{i}\tk{i}\n" for i in range(len(sentences))))
  r_at_1 = question_retrieval.evaluate(unique(), folder.parent)["set"]["r@1"]
  hits = question_retrieval.nearest_is_gold(tower["b"], tower["a"], [{i} for i in range(4)])
  assert r_at_1 == pytest.approx(100 * np.mean(hits)) and r_at_1 < 100.0


# ---------------------------------------------------------------- the NLI term

def _write_nli(folder):
  folder.mkdir()
  (folder / "train.tsv").write_text(
      "a man sleeps\ta person rests\tentailment\n"
      "a dog runs\ta cat sleeps\tcontradiction\n"
      "no label here\tonly two fields\n", encoding="utf-8")
  (folder / "snli_train.jsonl").write_text("\n".join(json.dumps(r) for r in [
      {"sentence1": "kids play", "sentence2": "kids play outside", "gold_label": "neutral"},
      {"sentence1": "x", "sentence2": "y", "gold_label": "-"}]) + "\n", encoding="utf-8")
  return folder


def test_nli_reader_maps_labels_counts_skips_and_names_a_missing_directory(tmp_path):
  premises, hypotheses, labels, skipped = nli_head.read_nli(str(_write_nli(tmp_path / "nli")))
  # Files in name order: snli_train.jsonl, then train.tsv.
  assert premises == ["kids play", "a man sleeps", "a dog runs"]
  assert hypotheses[0] == "kids play outside"
  assert labels.tolist() == [1, 0, 2] and skipped == 2
  missing = tmp_path / "no_nli_here"
  with pytest.raises(FileNotFoundError, match=str(missing)):
    nli_head.read_nli(str(missing))
  with pytest.raises(ValueError, match="nli_examples"):
    MomentumContrast(TINY, nli_weight=0.1)


@pytest.mark.slow  # over ~7 s (docs/results/tests/)
def test_nli_term_is_alpha_times_the_cross_entropy_of_the_head_by_hand(tmp_path, tiny_vocab_path):
  vocab = sentencepiece_vocabulary.get_vocabulary(str(tiny_vocab_path))
  examples = nli_head.nli_examples(path=str(_write_nli(tmp_path / "nli")), vocabulary=vocab,
                                   sequence_length=12)
  config = dataclasses.replace(TINY, vocab_size=vocab.vocab_size)
  model = MomentumContrast(config, temperature=0.1, queue_size=8, separate_towers=True,
                           nli_weight=0.1, nli_examples=examples, nli_batch_size=4)
  model.nli_head = nli_head.NliHead(dropout_rate=0.0)  # deterministic, to compute by hand
  plain = MomentumContrast(config, temperature=0.1, queue_size=8, separate_towers=True)
  params = init_params(model)
  assert set(params) == {"tower_a", "tower_b", "nli_head"}
  state = jax.device_get(nn.unbox(model.init_model_state(params, jax.random.key(3))))
  assert set(state["momentum"]) == {"tower_a", "tower_b"}  # the head has no momentum copy
  batch, rng = random_batch(), jax.random.key(0)
  loss, (metrics, _) = jax.jit(model.loss_fn_with_state)(params, state, batch, rng)
  moco, _ = jax.jit(plain.loss_fn_with_state)(params, state, batch, rng)
  # The rows the step drew (a pure function of its key) and tower a's vectors.
  sample_rng, _ = jax.random.split(jax.random.fold_in(rng, momentum_contrast.NLI_STREAM))
  drawn = jax.device_get(nli_head.sample(examples, sample_rng, 4))
  u, v = (_normalize(plain.encode(params, t, (t != 0).astype(np.int32), side="a"))
          for t in (drawn.premise, drawn.hypothesis))
  x, head = np.concatenate([u, v, np.abs(u - v)], -1), jax.device_get(params["nli_head"])
  for layer in ("hidden_0", "hidden_1"):
    x = np.maximum(x @ np.asarray(head[layer]["kernel"], np.float64) + head[layer]["bias"], 0)
  logits = x @ np.asarray(head["logits"]["kernel"], np.float64) + head["logits"]["bias"]
  log_p = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
  cross_entropy = -np.mean(log_p[np.arange(4), drawn.label])
  assert float(metrics["nli_loss"]) == pytest.approx(cross_entropy, rel=1e-4)
  assert float(loss) == pytest.approx(float(moco) + 0.1 * cross_entropy, rel=1e-4)
  assert set(drawn.label.tolist()) <= {0, 1, 2}


@pytest.mark.slow
def test_two_tower_export_serves_each_tower_and_scores_a_against_b(data_dir, tiny_vocab_path,
                                                                    tmp_path):
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  import tensorflow_text  # pylint: disable=g-import-not-at-top,unused-import  # SentencePiece ops
  # The run only has to leave two towers to export: one layer, eight pairs a step.
  vmsst_testing.configure_small_run(
      data_dir, tiny_vocab_path, tmp_path / "m", steps=2, objective="momentum_contrast",
      extra=["train.evaluator = None", "train.mixture_name = 'vmsst_multi30k'",
             "MomentumContrast.queue_size = 64", "MomentumContrast.separate_towers = True",
             "NetworkConfig.num_encoder_layers = 1", "BATCH_SIZE = 8"])
  vmsst.training.loop.train()
  gin.clear_config()
  metadata = export.export(str(tmp_path / "m"), str(tmp_path / "export"))
  assert metadata["sides"] == ["a", "b"] and "serving_b" in metadata["signatures"]
  assert metadata["side_a_languages"] == list(saved_model.DEFAULT_SIDE_A) == ["eng"]
  assert saved_model.EXPORT_SIDE_B == export.SIDE_B_SIGNATURE
  restored = restore.restore(str(tmp_path / "m"))
  english = ["A man rides a bicycle.", "Two dogs play."]
  german = ["Ein Mann fährt Rad.", "Zwei Hunde."]
  encoder = lambda side: checkpoint.CheckpointEncoder(restored, batch_size=2, side=side)
  want = {"a": encoder("a").encode(english), "b": encoder("b").encode(german)}
  assert not np.allclose(want["a"], encoder("b").encode(english), atol=1e-3)  # towers differ
  loaded = tf.saved_model.load(str(tmp_path / "export"))
  got_a = loaded.signatures["serving_default"](text=tf.constant(english))["embeddings"].numpy()
  got_b = loaded.signatures["serving_b"](text=tf.constant(german))["embeddings"].numpy()
  np.testing.assert_allclose(got_a, want["a"], rtol=1e-4, atol=1e-5)
  np.testing.assert_allclose(got_b, want["b"], rtol=1e-4, atol=1e-5)
  scores = loaded.signatures["score"](text_a=tf.constant(english),
                                      text_b=tf.constant(german))["scores"].numpy()
  np.testing.assert_allclose(scores, np.sum(_normalize(want["a"]) * _normalize(want["b"]), -1),
                             rtol=1e-4, atol=1e-5)
  # What evaluate, embed and mine read (--saved_model, --model_dir) picks the tower by language.
  saved = protocol.UniqueSentences(saved_model.SavedModelEncoder(str(tmp_path / "export")),
                                   progress=False)
  np.testing.assert_allclose(saved.encode(german, language="de"), want["b"], rtol=1e-4, atol=1e-5)
  np.testing.assert_allclose(saved.encode(english, language="en"), want["a"], rtol=1e-4,
                             atol=1e-5)
  from_dir = vmsst.Encoder.from_checkpoint(str(tmp_path / "m"))
  np.testing.assert_allclose(from_dir.encode(german, language="deu"), want["b"], rtol=1e-4,
                             atol=1e-5)
