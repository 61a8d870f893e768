"""`train` end to end with TensorFlow and seqio blocked, on a pre-tokenized stream (gin present).

The stream is written here (seqio) by the writer command's function; the
same run trained through seqio in this process and on the stream in a
subprocess that blocks TensorFlow, tensorflow-text and seqio (as an
accelerator image lacks them) gives the same losses step by step, also
across a resume from the position saved with the checkpoint.
"""

import json
import os
import subprocess
import sys

import gin
import pytest

from vmsst import vocabulary
from vmsst_testing import ROOT

STEPS, BATCH = 4, 16
FILES = ["gin/models/vmsst.gin", "gin/models/sizes/tiny.gin"]


def _bindings(model_dir, vocab_size, steps=STEPS):
  """A tiny VMSST run; the data bindings are added per path."""
  return [f"VOCAB_SIZE = {vocab_size}", f"train.model_dir = '{model_dir}'",
          "train.mixture_name = 'vmsst_ntrex_multi30k'", f"train.train_steps = {steps}",
          f"train.batch_size = {BATCH}", "train.sequence_length = 16", "train.seed = 3",
          "train.log_every = 1", "train.optimizer = @adamw()", "adamw.learning_rate = 1e-3",
          "NetworkConfig.emb_dim = 32", "NetworkConfig.mlp_dim = 64",
          "NetworkConfig.head_dim = 16", "NetworkConfig.max_length = 16",
          "make_manager.save_interval_steps = 2"]


def _seqio_bindings(data_dir, vocab_path):
  return ["train.register_tasks = @register_families", f"register_families.data_dir = '{data_dir}'",
          f"register_families.vocabulary_path = '{vocab_path}'",
          "register_families.families = [@pair_tasks]"]


_CHILD = r"""
import importlib.machinery, json, sys
BLOCKED = ("tensorflow", "tensorflow_text", "seqio")

class Absent(importlib.machinery.PathFinder):
  # Not installed, as on an accelerator image: `import` raises ModuleNotFoundError
  # and importlib.util.find_spec answers None (etils.epath probes TensorFlow so).
  @classmethod
  def find_spec(cls, name, path=None, target=None):
    if name.split(".")[0] in BLOCKED:
      return None
    return importlib.machinery.PathFinder.find_spec(name, path, target)

sys.meta_path[:] = [Absent if f is importlib.machinery.PathFinder else f for f in sys.meta_path]
import gin
from vmsst import files, learning_curves
from vmsst.train import loop

config = json.loads(sys.argv[1])
histories = []
for steps in (config["steps"] // 2, config["steps"]):  # a run stopped at its checkpoint, resumed
  gin.clear_config()
  gin.add_config_file_search_path(".")
  gin.parse_config_files_and_bindings(config["files"], config["bindings"] + [
      f"train.train_steps = {steps}", f"train.pretokenized = '{config['stream']}'"])
  result = loop.train()
  histories.append({"start": result["start_step"], "loss": result["loss_history"]})
model_dir = config["model_dir"]
assert files.exists(files.join(model_dir, "spm.model"))
assert files.exists(files.join(model_dir, "data_counts.json"))
curve = learning_curves.read_curve(model_dir, "loss")
leaked = sorted(m for m in sys.modules if m.split(".")[0] in BLOCKED)
assert not leaked, leaked
positions = files.join(model_dir, "data_position")
saved = {step: files.listdir(files.join(positions, step)) for step in files.listdir(positions)}
print("RESULT " + json.dumps({"histories": histories, "curve_steps": curve["step"],
                              "positions": saved}))
"""


@pytest.mark.slow
def test_train_on_a_pretokenized_stream_without_tensorflow_equals_the_seqio_run(
    small_data_dir, tiny_vocab_path, tmp_path):
  from vmsst.train import loop  # pylint: disable=import-outside-toplevel
  from vmsst_tasks import pretokenized  # pylint: disable=import-outside-toplevel
  vocab_size = vocabulary.get_vocabulary(tiny_vocab_path).vocab_size
  data = _seqio_bindings(small_data_dir, tiny_vocab_path)
  stream = str(tmp_path / "stream")
  pretokenized.write_run_stream(FILES, _bindings(tmp_path / "unused", vocab_size) + data,
                                [str(ROOT)], output=stream)
  gin.clear_config()
  gin.add_config_file_search_path(str(ROOT))
  gin.parse_config_files_and_bindings(FILES, _bindings(tmp_path / "seqio", vocab_size) + data)
  want = loop.train()["loss_history"]
  gin.clear_config()

  model_dir = str(tmp_path / "pretokenized")
  config = {"files": FILES, "bindings": _bindings(model_dir, vocab_size), "stream": stream,
            "steps": STEPS, "model_dir": model_dir}
  done = subprocess.run([sys.executable, "-c", _CHILD, json.dumps(config)], cwd=ROOT,
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
  assert all(names == ["stream.pretokenized.json"] for names in result["positions"].values())
