"""bench/cpu_recipe.py: candidates' held-out retrieval curves gathered into one CSV and plot."""

import csv
import pathlib
import subprocess
import sys

from clu import metric_writers

SCRIPT = pathlib.Path(__file__).resolve().parents[1] / "bench" / "cpu_recipe.py"


def _write_run(model_dir, points):
  """Events as vmsst.train writes them: a mean and a per-set retrieval tag per evaluation."""
  writer = metric_writers.create_default_writer(str(model_dir / "tensorboard"))
  for step, value in points:
    writer.write_scalars(step, {"retrieval/mean": value, "retrieval/ntrex_val.eng-fra": 2 * value})
  writer.close()


def _run(*args):
  return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True)


def test_one_row_per_candidate_and_evaluation_with_every_set(tmp_path):
  _write_run(tmp_path / "a", [(100, 1.5), (200, 3.0)])
  _write_run(tmp_path / "b", [(100, 2.0)])
  done = _run(f"--runs=base={tmp_path / 'a'},lr1e-2={tmp_path / 'b'}",
              f"--output={tmp_path / 'out' / 'vmsst'}")
  assert done.returncode == 0, done.stderr
  with open(tmp_path / "out" / "vmsst.csv") as f:
    rows = list(csv.DictReader(f))
  assert [(r["candidate"], r["step"], r["mean"], r["ntrex_val.eng-fra"]) for r in rows] == [
      ("base", "100", "1.5", "3.0"), ("base", "200", "3.0", "6.0"), ("lr1e-2", "100", "2.0", "4.0")]
  assert (tmp_path / "out" / "vmsst.png").stat().st_size > 10_000


def test_a_run_item_without_its_directory_is_one_clear_error(tmp_path):
  done = _run("--runs=base", f"--output={tmp_path / 'x'}")
  assert done.returncode != 0
  assert "--runs: 'base' is not name=MODEL_DIR" in done.stderr
