"""bench/cpu_recipe.py: candidates' held-out retrieval curves gathered into one CSV and plot."""

import csv
import pathlib
import subprocess
import sys

from clu import metric_writers

SCRIPT = pathlib.Path(__file__).resolve().parents[2] / "bench" / "cpu_recipe.py"


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


def test_a_recorded_candidate_joins_from_its_csv(tmp_path):
  _write_run(tmp_path / "a", [(100, 1.5), (200, 3.0)])
  _write_run(tmp_path / "b", [(100, 2.0)])
  first = _run(f"--runs=base={tmp_path / 'a'},other={tmp_path / 'b'}", f"--output={tmp_path / 'one'}")
  assert first.returncode == 0, first.stderr
  # The run directories are gone; `base` comes back from the CSV beside a new run.
  _write_run(tmp_path / "c", [(100, 4.0)])
  done = _run(f"--recorded=base={tmp_path / 'one.csv'}", f"--runs=new={tmp_path / 'c'}",
              f"--output={tmp_path / 'two'}")
  assert done.returncode == 0, done.stderr
  with open(tmp_path / "two.csv") as f:
    rows = list(csv.DictReader(f))
  assert [(r["candidate"], r["step"], r["mean"], r["ntrex_val.eng-fra"]) for r in rows] == [
      ("base", "100", "1.5", "3.0"), ("base", "200", "3.0", "6.0"), ("new", "100", "4.0", "8.0")]
  missing = _run(f"--recorded=nope={tmp_path / 'one.csv'}", f"--runs=new={tmp_path / 'c'}",
                 f"--output={tmp_path / 'three'}")
  assert missing.returncode != 0
  assert "has no rows for candidate 'nope' (it has: base, other)" in missing.stderr


def test_a_run_item_without_its_directory_is_one_clear_error(tmp_path):
  done = _run("--runs=base", f"--output={tmp_path / 'x'}")
  assert done.returncode != 0
  assert "--runs: 'base' is not name=MODEL_DIR" in done.stderr


def test_heldout_lengths_counts_sentences_longer_than_the_input_holds(tiny_vocab_path):
  sys.path.insert(0, str(SCRIPT.parent))
  import heldout_lengths  # pylint: disable=import-outside-toplevel
  import sentencepiece as spm  # pylint: disable=import-outside-toplevel

  # A length-n input holds n - 1 pieces plus EOS: 3 pieces fit in 4, not in 3.
  counts = heldout_lengths.np.array([2, 3, 5])
  assert round(heldout_lengths.cut_share(counts, 4), 6) == round(100 / 3, 6)
  assert round(heldout_lengths.cut_share(counts, 3), 6) == round(200 / 3, 6)
  processor = spm.SentencePieceProcessor(model_file=tiny_vocab_path)
  short, long = "a house", " ".join(["the small house by the river"] * 8)
  lines = heldout_lengths.report(processor, {"toy.eng-deu": ([short, long], [short, short])},
                                 [8, 1000])
  assert lines[1].startswith("toy.eng-deu")
  assert "src   50.0%     0.0%  |  tgt    0.0%     0.0%" in lines[1]
