"""Every paper run compiles, by the TPU compiler, for the slice it names, and fits its HBM.

Through `bench/tpu_compile.py`, the harness that writes
docs/results/tpu_compile/ (with its stand-ins for values a run leaves to its
user). A 6-layer, a 24-layer and a pretrained run are compiled by `make test`
(CI); `make test-tpu` compiles them all (marker `tpu_all_runs`).
"""

import json
import subprocess
import sys

import pytest

import vmsst_testing
from vmsst import tpu_slices

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
                         f"--output={tmp_path}", "--jobs=1"], cwd=vmsst_testing.ROOT,
                        capture_output=True, text=True, timeout=3000, check=False)
  assert (tmp_path / f"{run}.json").exists(), done.stdout[-3000:]
  report = json.loads((tmp_path / f"{run}.json").read_text())
  assert done.returncode == 0, (report.get("oom_message") or done.stdout)[-3000:]
  assert report["fits"] and report["peak_bytes_per_chip"] <= report["hbm_bytes_per_chip"]
  assert report["model_flops_per_chip"] > 0
