"""Every paper run compiles, by the TPU compiler, for the slice it names, and fits its HBM.

Through `bench/tpu_compile.py`, the harness that writes
docs/results/tpu_compile/ (with its stand-ins for values a run leaves to its
user). A 6-layer, a 24-layer and a pretrained run are checked by `make test`
(CI); `make test-tpu` checks them all (marker `tpu_all_runs`). A run whose step
lowers to the program its record there was compiled from (the record's
`program` fingerprint) takes that record: the same program, chips, JAX and
libtpu compile to the same executable, and lowering takes seconds where
compiling takes minutes. Any change to the step compiles it again.
"""

import json
import subprocess
import sys

import pytest

import vmsst_testing
from vmsst.training import slices as tpu_slices

BENCH = vmsst_testing.ROOT / "bench"
sys.path.insert(0, str(BENCH))
import tpu_compile  # pylint: disable=wrong-import-position

REPRESENTATIVE = ("vmsst_6l_paper", "vmsst_24l_paper", "vmsst_24l_pretrained")


def test_the_representative_runs_and_the_table_7_runs_name_slices():
  runs = tpu_compile.paper_runs()
  assert set(REPRESENTATIVE) <= set(runs)
  assert {"vmsst_6l_batch8192_paper", "contrastive_24l_batch8192_paper"} <= set(runs)


@pytest.mark.tpu
@pytest.mark.slow
@pytest.mark.parametrize("run", [
    pytest.param(run, marks=() if run in REPRESENTATIVE else pytest.mark.tpu_all_runs)
    for run in tpu_compile.paper_runs()])
def test_paper_run_compiles_for_its_slice_and_fits(run, tmp_path):
  if not tpu_slices.has_libtpu():
    pytest.skip(f"libtpu is not installed: {tpu_slices.INSTALL_COMMAND}")
  done = subprocess.run([sys.executable, str(BENCH / "tpu_compile.py"), f"--runs={run}",
                         f"--output={tmp_path}", "--jobs=1",
                         "--reuse_records=docs/results/tpu_compile"], cwd=vmsst_testing.ROOT,
                        capture_output=True, text=True, timeout=3000, check=False)
  assert (tmp_path / f"{run}.json").exists(), done.stdout[-3000:]
  report = json.loads((tmp_path / f"{run}.json").read_text())
  assert done.returncode == 0, (report.get("oom_message") or done.stdout)[-3000:]
  assert report["fits"] and report["peak_bytes_per_chip"] <= report["hbm_bytes_per_chip"]
  assert report["model_flops_per_chip"] > 0


def _record(run: str, **extra) -> dict:
  return {"run_file": f"gin/runs/{run}.gin", "slice": "v4-128", "chips": 64,
          "batch_size": 2048, "fits": True, "peak_bytes_per_chip": 2 ** 34,
          "hbm_bytes_per_chip": 2 ** 35, "model_flops_per_chip": 1e13,
          "lower_bound_step_seconds": 0.04, "estimated_days_100k_steps_at_40pct": 0.1, **extra}


def test_the_readme_marks_the_records_their_json_calls_stale_and_says_how_to_rerun():
  reports = [_record("vmsst_24l_paper"),
             _record("vmsst_24l_pretrained", stale="compiled with unrolled layers"),
             _record("contrastive_24l_pretrained", stale="compiled with unrolled layers")]
  rows = tpu_compile.table(reports).splitlines()[2:]
  assert rows[0].startswith("| `vmsst_24l_paper.gin` | v4-128 (batch 2048) | 16.0 of 32 GiB")
  assert rows[1].startswith("| `vmsst_24l_pretrained.gin` (stale†) |")
  footnote = tpu_compile.stale_runs(reports)
  assert "† Stale, compiled with unrolled layers." in footnote
  assert ("--runs=vmsst_24l_pretrained,contrastive_24l_pretrained --jobs=1" in footnote)
  assert tpu_compile.stale_runs(reports[:1]) == ""
  two = tpu_compile.stale_runs(reports + [_record("query_tower_paper", stale="before T5.1.1")])
  assert "† Stale, before T5.1.1: `query_tower_paper.gin`." in two


def test_the_results_page_is_the_table_of_its_records():
  """docs/results/tpu_compile/README.md's lines come from the JSON records beside it."""
  folder = vmsst_testing.ROOT / "docs" / "results" / "tpu_compile"
  reports = [json.loads((folder / f"{run}.json").read_text())
             for run in tpu_compile.paper_runs() if (folder / f"{run}.json").exists()]
  page = (folder / "README.md").read_text()
  assert tpu_compile.table(reports) in page
  assert tpu_compile.stale_runs(reports) in page
