"""vmsst/training/scalar_writer.py: where TensorFlow is absent, events TensorBoard reads as clu's.

Run in a process where TensorFlow cannot be imported (as on an accelerator
image: the tensorboard package then writes through its own file layer).
"""

import json
import subprocess
import sys

import vmsst_testing
from vmsst_testing import ROOT

_SCRIPT = r"""
import json, os, sys
from vmsst.evaluation import logged_curves
from vmsst.training import scalar_writer

root = sys.argv[1]
writer = scalar_writer.create_writer(os.path.join(root, "tensorboard"), just_logging=False)
writer.write_scalars(5, {"loss": 2.5, "retrieval/mean": 10.0})
writer.write_scalars(10, {"loss": 1.25, "retrieval/mean": 40.0})
writer.close()
quiet = scalar_writer.create_writer(os.path.join(root, "quiet"), just_logging=True)
quiet.write_scalars(1, {"loss": 1.0})
quiet.flush()
print(json.dumps({"kind": type(writer).__name__, "loss": logged_curves.read_curve(root, "loss"),
                  "final": logged_curves.final_values(logged_curves.read_curves(root)),
                  "quiet_wrote": os.path.exists(os.path.join(root, "quiet"))}))
"""


def test_scalars_written_without_tensorflow_are_read_back_by_step(tmp_path):
  done = subprocess.run([sys.executable, "-c",
                         vmsst_testing.WITHOUT_TENSORFLOW + _SCRIPT, str(tmp_path)], cwd=ROOT,
                        capture_output=True, text=True, timeout=300, check=False)
  assert done.returncode == 0, done.stderr[-3000:]
  result = json.loads(done.stdout.strip().splitlines()[-1])
  assert result["kind"] == "EventWriter"
  assert result["loss"]["step"] == [5, 10] and result["loss"]["value"] == [2.5, 1.25]
  assert result["final"] == {"mean": 40.0}
  assert result["quiet_wrote"] is False  # a process other than 0 only logs
