"""`python -m vmsst.train`'s mistakes as a user meets them: one `error:` line, exit 2.

Each is found before any training data loads (vmsst/training/preflight.py); a
failed start leaves no MODEL_DIR. Most cases run train's `main` in this
process, the way the command runs it once its imports are done: absl parses
the command line (`cli.parse_flags`, as `cli.run` does) and `cli.user_errors`
turns the mistake into the `error:` line and exit 2. Only the check made before
the imports runs the real command (a subprocess: only `python -m vmsst.train`
runs its `__main__`); a mistake found after them ends the command the way
tests/commands/test_user_errors.py checks end to end (--distributed there).
The resume checks train a directory first and are in the slow tier.
"""

import dataclasses
import json
import subprocess
import sys

import pytest

from vmsst.base import cli
from vmsst.base import gin_utils
from vmsst.training import configurables
from vmsst import train
from vmsst.training import preflight
from vmsst.encoding import restore
import vmsst_testing

# Registering imports TensorFlow, whose import starts a process (h5py asks `uname -p`): done
# once here, while the module loads, so the in-process cases stay in the unit tier.
configurables.register()

RUN = "--gin_file=gin/runs/vmsst_cpu.gin"


def _train(*args: str) -> subprocess.CompletedProcess:
  """The command itself, from the repository root."""
  return subprocess.run([sys.executable, "-m", "vmsst.train", *args], cwd=vmsst_testing.ROOT,
                        capture_output=True, text=True, timeout=600, check=False)


@pytest.fixture
def train_here(monkeypatch, capfd):
  """`train_here(*args)`: `python -m vmsst.train ARGS` past its imports, in this process
  (`vmsst_testing.command_here`), from the repository root as `_train` runs it."""
  monkeypatch.chdir(vmsst_testing.ROOT)
  return lambda *args: vmsst_testing.command_here(train.main, "vmsst.train", args, capfd)


def _one_error_line(done: vmsst_testing.Ended) -> str:
  """The last stderr line, checked to be the only `error:` line, with exit 2 and no traceback.

  `done`: an Ended, or a finished subprocess (the same fields)."""
  assert done.returncode == 2, done.stderr[-3000:]
  assert "Traceback" not in done.stderr, done.stderr[-3000:]
  lines = done.stderr.splitlines()
  assert [line for line in lines if line.startswith("error:")] == lines[-1:], lines[-5:]
  return lines[-1]


def _names_all(line: str, named: list[str]) -> None:
  for text in named:
    assert text in line, line
  assert "quotes" not in line or "MODEL_DIR" in line  # a number is not steered to a string


NO_RUN_FILE = ((), ["--gin_file=gin/runs/"])
UNKNOWN_PARAMETER = ((RUN, "--gin.train.eval_evry=3"),
                     ["--gin.train.eval_evry=3", "did you mean eval_every?"])
WRONG_TYPE = ((RUN, "--gin.TRAIN_STEPS='30'"),
              ["TRAIN_STEPS takes an integer", "--gin.TRAIN_STEPS=30"])
NOT_A_RUN_FILE = (("--gin_file=gin/models/contrastive.gin", "--gin.TRAIN_STEPS=3"),
                  ["--gin_file=gin/models/contrastive.gin is not a run file",
                   "--gin_file=gin/runs/contrastive_cpu.gin"])


@pytest.mark.parametrize("args, named", [
    NO_RUN_FILE, UNKNOWN_PARAMETER, WRONG_TYPE, NOT_A_RUN_FILE,
    ((RUN, "--gin.train.lerning_rate=3"), ["lerning_rate", "train takes:", "seed"]),
    ((RUN, "--gin.trian.seed=1"), ["--gin.trian.seed=1", "did you mean train?"]),
    ((RUN, "--gin.RetrievalEvaluatr.batch_size=1"), ["did you mean RetrievalEvaluator?"]),
    ((RUN, "--gin.TRAIN_STEPS=abc"), ["TRAIN_STEPS takes an integer", "--gin.TRAIN_STEPS=1600"]),
    ((RUN, "--gin.MODEL_DIR=7"), ["MODEL_DIR takes a string", "--gin.MODEL_DIR=\"'7'\""]),
    ((RUN, "--gin.TRAIN_STEP=3"), ["TRAIN_STEP", "did you mean TRAIN_STEPS?"]),
])
def test_a_gin_mistake_is_one_line_naming_the_binding_and_the_fix(train_here, args, named):
  _names_all(_one_error_line(train_here(*args)), named)


def test_the_command_itself_ends_a_missing_run_file_so_before_its_imports():
  """Under a second: the check in the command's `__main__`, before TensorFlow and JAX load.

  The mistakes found after the imports (UNKNOWN_PARAMETER, WRONG_TYPE, NOT_A_RUN_FILE, the
  paths) end in train's `main`, which the in-process cases run through the same parsing."""
  args, named = NO_RUN_FILE
  _names_all(_one_error_line(_train(*args)), named)


PATH_CASES = [
    ("vmsst_cpu", ["MODEL_DIR='{tmp}/a_file'"], ["--gin.MODEL_DIR={tmp}/a_file is a file"]),
    ("query_tower_cpu", ["MODEL_DIR='{tmp}/q'"],
     ["INIT_MODEL_DIR = 'runs/contrastive_cpu'", "--gin_file=gin/runs/contrastive_cpu.gin"]),
    ("entity_contrastive_cpu", ["MODEL_DIR='{tmp}/e'", "ENTITY_DIR='{tmp}/nowhere'"],
     ["ENTITY_DIR = '{tmp}/nowhere' has no meta.json", "vmsst_tasks.wiki_entities"]),
    ("vmsst_cpu", ["MODEL_DIR='{tmp}/m'", "VOCAB_PATH='{tmp}/nowhere.model'"],
     ["VOCAB_PATH = '{tmp}/nowhere.model' is not a file", "python -m vmsst.vocabulary"]),
]


def _path_args(tmp_path, vocab_path, run: str, bindings: list[str]) -> list[str]:
  (tmp_path / "a_file").write_text("")
  return [f"--gin_file=gin/runs/{run}.gin", f"--gin.VOCAB_PATH='{vocab_path}'",
          *(f"--gin.{b.format(tmp=tmp_path)}" for b in bindings)]


def _names_the_path(line: str, tmp_path, named: list[str]) -> None:
  for text in named:
    assert text.format(tmp=tmp_path) in line, line
  assert sorted(p.name for p in tmp_path.iterdir()) == ["a_file"]  # no MODEL_DIR made


@pytest.mark.parametrize("run, bindings, named", PATH_CASES)
def test_a_missing_or_wrong_path_is_named_before_data_loads(train_here, tmp_path,
                                                            tiny_vocab_path, run, bindings,
                                                            named):
  line = _one_error_line(train_here(*_path_args(tmp_path, tiny_vocab_path, run, bindings)))
  _names_the_path(line, tmp_path, named)


def _start_args(tmp_path, vocab_path, bindings: list[str]) -> list[str]:
  return [RUN, f"--gin.VOCAB_PATH='{vocab_path}'", f"--gin.MODEL_DIR='{tmp_path}/m'",
          "--gin.retrieval_sets.max_pairs=20", *(f"--gin.{b}" for b in bindings)]


def test_the_vocabulary_is_checked_before_any_state_or_data(train_here, tmp_path,
                                                            tiny_vocab_path):
  """Inside `train`, with the model built (gin's "In call to configurable" note left out)."""
  line = _one_error_line(train_here(*_start_args(tmp_path, tiny_vocab_path, ["VOCAB_SIZE=5000"])))
  for text in ["has 2000 pieces", "NetworkConfig.vocab_size is 5000", "--gin.VOCAB_SIZE=2000"]:
    assert text in line, line
  assert not (tmp_path / "m").exists()


def test_microbatches_of_an_in_batch_objective_are_one_line_naming_gradient_caching(
    train_here, tmp_path, tiny_vocab_path):
  """Contrastive's negatives are the rest of its batch: microbatches would shrink them."""
  line = _one_error_line(train_here(
      "--gin_file=gin/runs/contrastive_cpu.gin", *_start_args(tmp_path, tiny_vocab_path, [
          "VOCAB_SIZE=2000", "train.microbatches=2"])[1:]))
  for text in ["train.microbatches = 2", "Contrastive", "Contrastive.gradient_cache_chunk"]:
    assert text in line, line
  assert not (tmp_path / "m").exists()


@pytest.mark.parametrize("name", ["vmsst_contrastive", "entity_contrastive", "momentum_contrast",
                                  "query_tower"])
def test_every_in_batch_objective_refuses_microbatches(name):
  from vmsst.objectives import MODELS  # pylint: disable=import-outside-toplevel
  args = {"entity_contrastive": dict(num_entities=7)}.get(name, {})
  model = MODELS[name](dataclasses.replace(vmsst_testing.TINY, dropout_rate=0.1), **args)
  with pytest.raises(cli.UserError, match="train.microbatches = 4.*gradient_cache_chunk"):
    preflight.check_microbatches(model, 8, 4)


@pytest.mark.parametrize("batch, microbatches, data, named", [
    (8, 3, 1, ["train.microbatches = 3 does not divide the batch size 8", "2, 4, 8"]),
    (8, 4, 4, ["leaves 2 pairs per microbatch", "4 devices", "multiple of 16"]),
    (8, 0, 1, ["train.microbatches = 0"])])
def test_microbatches_must_split_the_batch_and_its_shards(batch, microbatches, data, named):
  from vmsst.objectives import MODELS  # pylint: disable=import-outside-toplevel
  with pytest.raises(cli.UserError) as raised:
    preflight.check_microbatches(MODELS["vmsst"](vmsst_testing.TINY), batch, microbatches, data)
  _names_all(str(raised.value), named)
  preflight.check_microbatches(MODELS["vmsst"](vmsst_testing.TINY), 8, 2, 4)  # 4 pairs, 4 shards


def test_the_command_checks_the_batch_over_the_devices_before_any_state_or_data(
    train_here, tmp_path, tiny_vocab_path):
  """A mesh of 2 devices: the first 2 of this process's (make_mesh.devices_per_process), as a
  command on a machine of 2 would have; the model and the held-out sets are built first."""
  line = _one_error_line(train_here(*_start_args(tmp_path, tiny_vocab_path, [
      "VOCAB_SIZE=2000", "BATCH_SIZE=33", "make_mesh.devices_per_process=2"])))
  for text in ["BATCH_SIZE = 33 does not divide over the 2 devices", "--gin.BATCH_SIZE=32 or 34"]:
    assert text in line, line
  assert not (tmp_path / "m").exists()


@pytest.mark.integration  # trains 2 steps, then resumes 2 more (train's main, in this process)
@pytest.mark.slow
def test_a_resume_names_another_objective_and_refuses_changed_settings_unless_asked(
    train_here, tmp_path, small_data_dir, tiny_vocab_path):
  model_dir = tmp_path / "run"
  small = [f"--gin.{b}" for b in vmsst_testing.small_run_bindings(
      small_data_dir, tiny_vocab_path, model_dir, steps=2,
      extra=["BATCH_SIZE = 8", "train.evaluator = None", "NetworkConfig.num_encoder_layers = 1"])]
  contrastive = "--gin_file=gin/runs/contrastive_cpu.gin"
  first = train_here(contrastive, *small)
  assert first.returncode == 0, first.stderr[-3000:]
  config = (model_dir / "config.gin").read_text()

  line = _one_error_line(train_here(RUN, *small, "--gin.TRAIN_STEPS=4"))
  assert "holds a contrastive model" in line and "trains vmsst" in line, line
  assert "predates" not in line and "init_params" not in line

  changed = [*small, "--gin.TRAIN_STEPS=4", "--gin.SEQUENCE_LENGTH=16",
             "--gin.inverse_sqrt_schedule.peak_learning_rate=0.001"]
  line = _one_error_line(train_here(contrastive, *changed))
  assert "SEQUENCE_LENGTH: 32 -> 16" in line and "peak_learning_rate: 0.003 -> 0.001" in line
  assert "--resume_with_changes" in line and "TRAIN_STEPS" not in line
  assert (model_dir / "config.gin").read_text() == config  # refused: nothing rewritten

  resumed = train_here(contrastive, *changed, "--resume_with_changes")
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


def test_a_resume_may_change_its_microbatches_but_not_its_batch():
  """train.microbatches gives the same update whatever N: a run resumes on fewer chips."""
  gin_lib = gin_utils.gin  # `train` is registered by the command's module imported above
  config = "train.batch_size = 8\ntrain.microbatches = 1\n"  # the directory's config.gin
  gin_lib.clear_config()
  try:
    gin_lib.parse_config(["train.batch_size = 8", "train.microbatches = 4"])
    assert preflight.changed_bindings(config) == []
    gin_lib.parse_config(["train.batch_size = 16"])
    assert preflight.changed_bindings(config) == ["train.batch_size: 8 -> 16"]
  finally:
    gin_lib.clear_config()
