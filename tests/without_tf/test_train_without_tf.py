"""`train` end to end with TensorFlow and seqio blocked, on a pre-tokenized stream (gin present).

The stream is written here (seqio) by the writer command's function; the
same run (gin/runs/vmsst_cpu.gin, shrunk) trained through seqio in this
process and on the stream in a subprocess where TensorFlow, tensorflow-text
and seqio cannot be imported (as on an accelerator image; the run file parses
unchanged, its task families bound to vmsst_tasks.registry_stand_ins) gives
the same losses step by step, also across a resume from the position saved
with the checkpoint.
"""

import json
import os
import subprocess
import sys

import gin
import pytest

import vmsst_testing
from vmsst_testing import ROOT

STEPS = 4
RUN_FILE = "gin/runs/vmsst_cpu.gin"


EXTRA = ["train.evaluator = None", "train.log_every = 1", "train.seed = 3",
         "make_manager.save_interval_steps = 2"]


def _bindings(data_dir, vocab_path, model_dir):
  """gin/runs/vmsst_cpu.gin shrunk to seconds, a step logged each step and saved every two."""
  return vmsst_testing.small_run_bindings(data_dir, vocab_path, model_dir, STEPS, extra=EXTRA)


_CHILD = r"""
import json, sys
import gin
from vmsst.base import files
from vmsst.training import configurables
from vmsst.evaluation import logged_curves
from vmsst.training import loop

config = json.loads(sys.argv[1])
histories = []
for steps in (config["steps"] // 2, config["steps"]):  # a run stopped at its checkpoint, resumed
  gin.clear_config()  # the run file as it is: its task families bind stand-ins here
  configurables.parse_gin([config["run_file"]], config["bindings"] + [
      f"TRAIN_STEPS = {steps}", f"train.pretokenized = '{config['stream']}'"])
  result = loop.train()
  histories.append({"start": result["start_step"], "loss": result["loss_history"]})
model_dir = config["model_dir"]
assert files.exists(files.join(model_dir, "spm.model"))
assert files.exists(files.join(model_dir, "data_counts.json"))
curve = logged_curves.read_curve(model_dir, "loss")
leaked = sorted(m for m in sys.modules if m.split(".")[0] in BLOCKED)
assert not leaked, leaked
checkpoints = files.join(model_dir, "checkpoints")
saved = {step: files.listdir(files.join(checkpoints, step, "data_position"))
         for step in files.listdir(checkpoints) if step.isdigit()}
print("RESULT " + json.dumps({"histories": histories, "curve_steps": curve["step"],
                              "positions": saved}))
"""


@pytest.mark.slow
def test_train_on_a_pretokenized_stream_without_tensorflow_equals_the_seqio_run(
    small_data_dir, tiny_vocab_path, tmp_path):
  from vmsst.training import loop  # pylint: disable=import-outside-toplevel
  from vmsst import pretokenize  # pylint: disable=import-outside-toplevel
  stream = str(tmp_path / "stream")
  pretokenize.write_run_stream([RUN_FILE], _bindings(small_data_dir, tiny_vocab_path,
                                                     tmp_path / "unused"),
                               [str(ROOT)], output=stream)
  vmsst_testing.configure_small_run(small_data_dir, tiny_vocab_path, tmp_path / "seqio", STEPS,
                                    extra=EXTRA)
  want = loop.train()["loss_history"]
  gin.clear_config()

  model_dir = str(tmp_path / "pretokenized")
  config = {"run_file": RUN_FILE, "stream": stream, "steps": STEPS, "model_dir": model_dir,
            "bindings": _bindings(small_data_dir, tiny_vocab_path, model_dir)}
  done = subprocess.run([sys.executable, "-c",
                         vmsst_testing.WITHOUT_TENSORFLOW + _CHILD, json.dumps(config)], cwd=ROOT,
                        capture_output=True, text=True, timeout=600, check=False,
                        env={**os.environ, "PYTHONPATH": str(ROOT / "tests")})
  assert done.returncode == 0, done.stderr[-3000:]
  result = json.loads(done.stdout.split("RESULT ", 1)[1])
  first, resumed = result["histories"]
  assert (first["start"], resumed["start"]) == (0, STEPS // 2)
  got = first["loss"] + resumed["loss"]
  assert [s for s, _ in got] == [s for s, _ in want] == list(range(1, STEPS + 1))
  assert [l for _, l in got] == pytest.approx([l for _, l in want], rel=1e-5)
  assert result["curve_steps"] == list(range(1, STEPS + 1))
  # The position saved with each checkpoint, as a seqio run saves its own.
  assert {"2", "4"} <= result["positions"].keys()
  assert all("stream.pretokenized.json" in names for names in result["positions"].values())
