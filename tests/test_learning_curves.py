"""learning_curves: the training loop's TensorBoard events read back and plotted."""

import subprocess
import sys
import time

import matplotlib.image
import pytest
from clu import metric_writers

from vmsst.comparison import curves as learning_curves
from vmsst.evaluation import logged_curves


def _write_run(model_dir, points, extra_tag=None):
  """Events as vmsst.train writes them (clu's default writer under MODEL_DIR/tensorboard)."""
  writer = metric_writers.create_default_writer(str(model_dir / "tensorboard"))
  writer.write_scalars(1, {"loss": 9.0})  # the run's first event: its start
  for step, value in points:
    time.sleep(0.01)
    scalars = {"retrieval/mean": value, "retrieval/multi30k_eng-fra": value + 1}
    if extra_tag:
      scalars[extra_tag] = 0.5
    writer.write_scalars(step, scalars)
  writer.flush()
  writer.close()


def test_curves_read_back_by_step_with_increasing_wall_clock(tmp_path):
  _write_run(tmp_path, [(10, 1.5), (20, 3.0), (30, 4.25)], extra_tag="retrieval/chance")
  curve = logged_curves.read_curve(tmp_path)
  assert curve["step"] == [10, 20, 30]
  assert curve["value"] == pytest.approx([1.5, 3.0, 4.25])
  assert 0 < curve["seconds"][0] < curve["seconds"][1] < curve["seconds"][2] < 60
  curves = logged_curves.read_curves(tmp_path)
  assert set(curves) == {"retrieval/mean", "retrieval/multi30k_eng-fra", "retrieval/chance"}
  assert logged_curves.final_values(curves) == pytest.approx(
      {"mean": 4.25, "multi30k_eng-fra": 5.25, "chance": 0.5})


def test_a_run_without_events_names_its_folder(tmp_path):
  with pytest.raises(FileNotFoundError, match=str(tmp_path / "tensorboard")):
    logged_curves.read_curve(tmp_path)


def test_plot_has_one_line_per_objective_on_the_steps_all_seeds_share(tmp_path):
  curves = {}
  for name, offset in (("vmsst", 0.0), ("contrastive", 2.0)):
    for seed in (0, 1):
      _write_run(tmp_path / name / str(seed),
                 [(10, 1.0 + offset + seed), (20, 2.0 + offset + seed)] + [(30, 9.0)] * seed)
      curves.setdefault(name, {})[seed] = logged_curves.read_curve(tmp_path / name / str(seed))
  steps, values, seconds = learning_curves._aligned(curves["vmsst"])  # pylint: disable=protected-access
  assert steps == [10, 20]  # step 30 only in seed 1
  assert values.tolist() == [[1.0, 2.0], [2.0, 3.0]] and seconds.shape == (2, 2)
  path = tmp_path / "curves.png"
  learning_curves.plot(curves, path)
  image = matplotlib.image.imread(path)
  assert image.shape[0] > 300 and image.shape[1] > 900  # two panels side by side
  assert path.stat().st_size > 20_000


def test_command_draws_one_runs_curve_next_to_its_report(tmp_path):
  _write_run(tmp_path, [(10, 1.5), (20, 3.0)])
  done = subprocess.run([sys.executable, "-m", "vmsst.learning_curves", f"--model_dir={tmp_path}"],
                        capture_output=True, text=True, check=True)
  assert "3.00% at step 20" in done.stdout
  assert matplotlib.image.imread(tmp_path / "eval" / "learning_curve.png").shape[1] > 900
