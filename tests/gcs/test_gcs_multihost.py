"""Two `python -m vmsst.train` processes (one job over localhost, as `PROCESSES=2 bash
launch/local.sh` starts them) train into a bucket and resume from it, on the GCS emulator.

Each process writes its own share of every checkpoint (orbax's `ocdbt.process_<i>`), and
both must find the same latest step in the bucket when restarted. Each of the 2 processes sees
1 CPU device and the 1-process run beside them 2, so all build the same ("data" 2, "model" 1)
mesh; with two addends a cross-device sum cannot be reordered, and the two runs' train states
are expected bitwise equal (the same check on local disk is tests/training/test_multihost.py's,
after a process is killed).
"""

import re
import socket
import time

import jax
import numpy as np
import pytest

import test_gcs_train as gcs_train
from test_gcs_train import _bucket  # pylint: disable=unused-import  (the `bucket` fixture)
from vmsst.base import files
from vmsst.encoding import restore

pytestmark = pytest.mark.slow

# Each host reads its block of the global batch ('slice'), so 2 processes train as 1 does.
HOST_BINDINGS = ["train_iterator.host_data = 'slice'", "make_manager.save_interval_steps = 2"]
STEPS = 4


def _free_port() -> int:
  with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    return s.getsockname()[1]


def _command(bucket, model_dir: str, steps: int, *flags: str) -> list[str]:
  return gcs_train.command(gcs_train.bindings(bucket["data"], bucket["vocab"], model_dir,
                                              bucket["init"], steps=steps, extra=HOST_BINDINGS),
                           *flags)


def _two_processes(bucket, model_dir: str, steps: int, workdir, phase: str,
                   one_process_dir: str | None = None) -> list[str]:
  """Starts both processes (and, with `one_process_dir`, a 1-process run of STEPS steps into
  it beside them), waits for all (a crash of any fails at once); the two processes' logs."""
  port = _free_port()
  cmd = _command(bucket, model_dir, steps, f"--coordinator_address=127.0.0.1:{port}",
                 "--num_processes=2")
  logs = [workdir / f"{phase}_process{i}.txt" for i in range(2)]
  env = gcs_train.run_env(workdir)
  processes = [gcs_train.start(cmd + [f"--process_id={i}"], workdir, logs[i], env)
               for i in range(2)]
  if one_process_dir:
    logs.append(workdir / "one_process.txt")
    processes.append(gcs_train.start(_command(bucket, one_process_dir, STEPS), workdir, logs[2],
                                     gcs_train.run_env(workdir, devices=2)))
  try:
    deadline = time.monotonic() + gcs_train.TIMEOUT_S
    while any(p.poll() is None for p in processes):
      for process, log in zip(processes, logs):
        assert process.poll() in (None, 0), log.read_text()[-4000:]
      assert time.monotonic() < deadline, [log.read_text()[-2000:] for log in logs]
      time.sleep(0.5)
  finally:
    texts = [gcs_train.finish(p, log) for p, log in zip(processes, logs)]
  for process, text in zip(processes, texts):
    assert process.returncode == 0, text[-4000:]
  return texts[:2]


def _params(model_dir: str, step: int | None = None):
  return jax.device_get(restore.restore(model_dir, step=step).params)


def test_two_processes_train_into_and_resume_from_the_bucket_as_one_process_trains(
    gcs, bucket, tmp_path):
  model_dir = files.join(bucket["root"], "runs", "two_processes")
  one_process_dir = files.join(bucket["root"], "runs", "one_process")
  # Phase 1: the 2-process run stops at step 2 (a cooperative save) while the 1-process
  # reference trains straight to step STEPS; phase 2: both processes restore step 2 together.
  _two_processes(bucket, model_dir, 2, tmp_path, "first", one_process_dir)
  _two_processes(bucket, model_dir, STEPS, tmp_path, "second")
  checkpoints = files.join(model_dir, "checkpoints")
  assert [s for s in (2, 4) if files.exists(files.join(checkpoints, str(s)))] == [2, 4]
  for step in (2, 4):  # each process wrote its share of the arrays into the bucket
    shares = {n for n in files.listdir(files.join(checkpoints, str(step), "default"))
              if n.startswith("ocdbt.process_")}
    assert shares == {"ocdbt.process_0", "ocdbt.process_1"}, shares
  for i in range(2):
    log = (tmp_path / f"second_process{i}.txt").read_text()
    assert f"process {i} of 2" in log
    assert "Restoring checkpoint at step 2" in log, log[-4000:]
    steps = sorted({int(s) for s in gcs_train.STEP_LINE.findall(log)})
    assert steps == [3, 4], log[-4000:]  # resumed, not restarted: steps 3 and 4 only
  assert not gcs_train.local_gs_folders(tmp_path)
  assert re.search(r"data position of step 2 restored",
                   (tmp_path / "second_process0.txt").read_text())
  # Two processes, stopped and resumed, end in the 1-process run's parameters, bit for bit;
  # steps 3-4 moved them (the equality is not that of two copies of step 2).
  final = _params(model_dir)
  gcs_train.assert_equal_trees(final, _params(one_process_dir))
  assert any(not np.array_equal(a, b) for a, b in zip(jax.tree.leaves(_params(model_dir, 2)),
                                                      jax.tree.leaves(final)))
