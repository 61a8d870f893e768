"""`python -m vmsst.train`'s mistakes, run as a user runs them: one `error:` line, exit 2.

Each is found before any training data loads (vmsst/training/preflight.py), so
each subprocess ends in seconds; a failed start leaves no MODEL_DIR. The
resume checks (another objective, changed settings) need a trained directory
and are in the slow tier.
"""

import json
import os
import subprocess
import sys

import pytest

import vmsst_testing
from vmsst.encoding import restore

RUN = "--gin_file=gin/runs/vmsst_cpu.gin"


def _train(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
  return subprocess.run([sys.executable, "-m", "vmsst.train", *args], cwd=vmsst_testing.ROOT,
                        capture_output=True, text=True, timeout=600, check=False,
                        env={**os.environ, **(env or {})})


def _one_error_line(done: subprocess.CompletedProcess) -> str:
  """The last stderr line, checked to be the only `error:` line, with exit 2 and no traceback."""
  assert done.returncode == 2, done.stderr[-3000:]
  assert "Traceback" not in done.stderr, done.stderr[-3000:]
  lines = done.stderr.splitlines()
  assert [line for line in lines if line.startswith("error:")] == lines[-1:], lines[-5:]
  return lines[-1]


SLOW = pytest.mark.slow  # each subprocess imports TensorFlow, JAX and seqio first: 5-13 s


@pytest.mark.parametrize("args, named", [
    ((), ["--gin_file=gin/runs/"]),  # found before those imports: under a second
    ((RUN, "--gin.train.eval_evry=3"), ["--gin.train.eval_evry=3", "did you mean eval_every?"]),
    pytest.param((RUN, "--gin.train.lerning_rate=3"), ["lerning_rate", "train takes:", "seed"],
                 marks=SLOW),
    pytest.param((RUN, "--gin.trian.seed=1"), ["--gin.trian.seed=1", "did you mean train?"],
                 marks=SLOW),
    pytest.param((RUN, "--gin.RetrievalEvaluatr.batch_size=1"),
                 ["did you mean RetrievalEvaluator?"], marks=SLOW),
    pytest.param((RUN, "--gin.TRAIN_STEPS=abc"),
                 ["TRAIN_STEPS takes an integer", "--gin.TRAIN_STEPS=1600"], marks=SLOW),
    ((RUN, "--gin.TRAIN_STEPS='30'"), ["TRAIN_STEPS takes an integer", "--gin.TRAIN_STEPS=30"]),
    pytest.param((RUN, "--gin.MODEL_DIR=7"),
                 ["MODEL_DIR takes a string", "--gin.MODEL_DIR=\"'7'\""], marks=SLOW),
    pytest.param((RUN, "--gin.TRAIN_STEP=3"), ["TRAIN_STEP", "did you mean TRAIN_STEPS?"],
                 marks=SLOW),
    (("--gin_file=gin/models/contrastive.gin", "--gin.TRAIN_STEPS=3"),
     ["--gin_file=gin/models/contrastive.gin is not a run file",
      "--gin_file=gin/runs/contrastive_cpu.gin"]),
])
def test_a_gin_mistake_is_one_line_naming_the_binding_and_the_fix(args, named):
  line = _one_error_line(_train(*args))
  for text in named:
    assert text in line, line
  assert "quotes" not in line or "MODEL_DIR" in line  # a number is not steered to a string


@pytest.mark.parametrize("run, bindings, named", [
    ("vmsst_cpu", ["MODEL_DIR='{tmp}/a_file'"], ["--gin.MODEL_DIR={tmp}/a_file is a file"]),
    ("query_tower_cpu", ["MODEL_DIR='{tmp}/q'"],
     ["INIT_MODEL_DIR = 'runs/contrastive_cpu'", "--gin_file=gin/runs/contrastive_cpu.gin"]),
    pytest.param("entity_contrastive_cpu", ["MODEL_DIR='{tmp}/e'", "ENTITY_DIR='{tmp}/nowhere'"],
                 ["ENTITY_DIR = '{tmp}/nowhere' has no meta.json", "vmsst_tasks.wiki_entities"],
                 marks=SLOW),
    pytest.param("vmsst_cpu", ["MODEL_DIR='{tmp}/m'", "VOCAB_PATH='{tmp}/nowhere.model'"],
                 ["VOCAB_PATH = '{tmp}/nowhere.model' is not a file",
                  "python -m vmsst.vocabulary"], marks=SLOW),
])
def test_a_missing_or_wrong_path_is_named_before_data_loads(tmp_path, tiny_vocab_path, run,
                                                            bindings, named):
  (tmp_path / "a_file").write_text("")
  args = [f"--gin_file=gin/runs/{run}.gin", f"--gin.VOCAB_PATH='{tiny_vocab_path}'",
          *(f"--gin.{b.format(tmp=tmp_path)}" for b in bindings)]
  line = _one_error_line(_train(*args))
  for text in named:
    assert text.format(tmp=tmp_path) in line, line
  assert sorted(p.name for p in tmp_path.iterdir()) == ["a_file"]  # no MODEL_DIR made


@pytest.mark.slow  # 8-12 s each: the model and the held-out sets are built first
@pytest.mark.parametrize("bindings, env, named", [
    (["VOCAB_SIZE=5000"], {}, ["has 2000 pieces", "NetworkConfig.vocab_size is 5000",
                               "--gin.VOCAB_SIZE=2000"]),
    (["VOCAB_SIZE=2000", "BATCH_SIZE=33"],
     {"XLA_FLAGS": "--xla_force_host_platform_device_count=2"},
     ["BATCH_SIZE = 33 does not divide over the 2 devices", "--gin.BATCH_SIZE=32 or 34"]),
])
def test_the_vocabulary_and_the_batch_are_checked_before_any_state_or_data(
    tmp_path, tiny_vocab_path, bindings, env, named):
  args = [RUN, f"--gin.VOCAB_PATH='{tiny_vocab_path}'", f"--gin.MODEL_DIR='{tmp_path}/m'",
          "--gin.retrieval_sets.max_pairs=20", *(f"--gin.{b}" for b in bindings)]
  line = _one_error_line(_train(*args, env=env))
  for text in named:
    assert text in line, line
  assert not (tmp_path / "m").exists()


@pytest.mark.slow  # trains 2 steps, then resumes 2 more
def test_a_resume_names_another_objective_and_refuses_changed_settings_unless_asked(
    tmp_path, data_dir, tiny_vocab_path):
  model_dir = tmp_path / "run"
  small = [f"--gin.{b}" for b in vmsst_testing.small_run_bindings(
      data_dir, tiny_vocab_path, model_dir, steps=2,
      extra=["retrieval_sets.max_pairs = 20", "BATCH_SIZE = 8"])]
  contrastive = "--gin_file=gin/runs/contrastive_cpu.gin"
  first = _train(contrastive, *small)
  assert first.returncode == 0, first.stderr[-3000:]
  config = (model_dir / "config.gin").read_text()

  line = _one_error_line(_train(RUN, *small, "--gin.TRAIN_STEPS=4"))
  assert "holds a contrastive model" in line and "trains vmsst" in line, line
  assert "predates" not in line and "init_params" not in line

  changed = [*small, "--gin.TRAIN_STEPS=4", "--gin.SEQUENCE_LENGTH=16",
             "--gin.inverse_sqrt_schedule.peak_learning_rate=0.001"]
  line = _one_error_line(_train(contrastive, *changed))
  assert "SEQUENCE_LENGTH: 32 -> 16" in line and "peak_learning_rate: 0.003 -> 0.001" in line
  assert "--resume_with_changes" in line and "TRAIN_STEPS" not in line
  assert (model_dir / "config.gin").read_text() == config  # refused: nothing rewritten

  resumed = _train(contrastive, *changed, "--resume_with_changes")
  assert resumed.returncode == 0, resumed.stderr[-3000:]
  assert (model_dir / "config-2.gin").read_text() == config
  assert "SEQUENCE_LENGTH = 16" in (model_dir / "config.gin").read_text()
  spec = json.loads((model_dir / "model.json").read_text())
  assert spec["sequence_length"] == 16
  assert spec["step_ranges"] == [
      {"first_step": 1, "last_step": 2, "sequence_length": 32, "config": "config-2.gin"},
      {"first_step": 3, "last_step": None, "sequence_length": 16, "config": "config.gin"}]
  assert restore.read_model_json(str(model_dir), step=2)[1] == 32
  assert restore.read_model_json(str(model_dir), step=4)[1] == 16
  assert restore.read_model_json(str(model_dir))[1] == 16

