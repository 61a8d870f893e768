"""vmsst/training/flags.py: train's own flags, without the loop's imports (the run-file flags: gin_utils).

A subprocess: what an import pulls in shows only in a fresh interpreter.
"""

import json
import subprocess
import sys

import vmsst_testing

TRAIN_FLAGS = {"distributed", "coordinator_address", "num_processes", "process_id",
               "peer_timeout_seconds", "resume_with_changes"}


def test_the_flags_are_defined_without_tensorflow_jax_or_the_loop():
  listing = ("import json, sys; from absl import flags; import vmsst.training.flags; "
             "print(json.dumps({'flags': sorted(f.name for f in "
             "flags.FLAGS.get_key_flags_for_module('vmsst.training.flags')), 'heavy': sorted("
             "m for m in ('tensorflow', 'jax', 'seqio', 'vmsst.training.loop') if m in sys.modules)}))")
  done = subprocess.run([sys.executable, "-c", listing], cwd=vmsst_testing.ROOT,
                        capture_output=True, text=True, timeout=300, check=True)
  found = json.loads(done.stdout.strip().splitlines()[-1])
  assert set(found["flags"]) == TRAIN_FLAGS
  assert found["heavy"] == []
