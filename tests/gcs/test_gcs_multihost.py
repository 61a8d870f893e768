"""Two `python -m vmsst.train` processes (one job over localhost, as `PROCESSES=2 bash
launch/local.sh` starts them) train into a bucket and resume from it, on the GCS emulator.

Each process writes its own share of every checkpoint (orbax's `ocdbt.process_<i>`), and
both must find the same latest step in the bucket when restarted. Each of the 2 processes sees
1 CPU device and the 1-process run beside them 2, so all build the same ("data" 2, "model" 1)
mesh; with two addends a cross-device sum cannot be reordered, and the two runs' train states
are expected bitwise equal (the same check on local disk is tests/training/test_multihost.py's,
after a process is killed). The 1-process run is the command's `main` in this process
(`vmsst_testing.command_here`) on 2 of its 8 devices: the same mesh and programs, from the same
bucket, without a process's seconds of imports.

The model is test_multihost.py's (one encoder layer), and the processes compile through the
session's persistent cache (JAX_COMPILATION_CACHE_DIR, tests/conftest.py): whichever of the two
files runs second in a session loads what the first compiled, for process 0 and for the
1-process run (process 1 compiles every time: test_multihost.py's `_spawn` says why).
"""

import os
import re
import socket
import tempfile
import time

import jax
import numpy as np
import pytest

import test_gcs_train as gcs_train
from test_gcs_train import _bucket  # pylint: disable=unused-import  (the `bucket` fixture)
import vmsst_testing
from vmsst import files
from vmsst import train
from vmsst.encoding import restore

pytestmark = pytest.mark.slow

# Each host reads its block of the global batch ('slice'), so 2 processes train as 1 does.
HOST_BINDINGS = ["train_iterator.host_data = 'slice'", "make_manager.save_interval_steps = 2",
                 "NetworkConfig.num_encoder_layers = 1"]  # test_multihost.py's model (docstring)
STEPS = 4


def _free_port() -> int:
  with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    return s.getsockname()[1]


def _command(bucket, model_dir: str, steps: int, *flags: str) -> list[str]:
  return gcs_train.command(gcs_train.bindings(bucket["data"], bucket["vocab"], model_dir,
                                              bucket["init"], steps=steps, extra=HOST_BINDINGS),
                           *flags)


def _env(workdir) -> dict[str, str]:
  """gcs_train.run_env's, compiling through the session's persistent cache (docstring)."""
  return dict(gcs_train.run_env(workdir),
              JAX_COMPILATION_CACHE_DIR=os.environ["JAX_COMPILATION_CACHE_DIR"])


def _one_process(bucket, model_dir: str, workdir, capfd, monkeypatch) -> None:
  """The 1-process run of STEPS steps into `model_dir`: the command on 2 devices of this
  process, from an empty working directory with a temporary directory of its own (under the
  test's, checked for `gs:` folders), as gcs_train.run_env gives a process."""
  (workdir / "tmp").mkdir(parents=True)
  monkeypatch.chdir(workdir)
  monkeypatch.setenv("TMPDIR", str(workdir / "tmp"))
  monkeypatch.setattr(tempfile, "tempdir", str(workdir / "tmp"))
  done = vmsst_testing.command_here(
      train.main, "vmsst.train",
      _command(bucket, model_dir, STEPS, "--gin_bindings=make_mesh.devices_per_process = 2")[3:],
      capfd)
  assert done.returncode == 0, done.stderr[-4000:]


def _two_processes(bucket, model_dir: str, steps: int, workdir, phase: str,
                   meanwhile=None) -> list[str]:
  """Starts both processes and calls `meanwhile()` while they go, then waits for them (a
  crash of either fails at once); their logs."""
  port = _free_port()
  cmd = _command(bucket, model_dir, steps, f"--coordinator_address=127.0.0.1:{port}",
                 "--num_processes=2")
  logs = [workdir / f"{phase}_process{i}.txt" for i in range(2)]
  env = _env(workdir)
  processes = [gcs_train.start(cmd + [f"--process_id={i}"], workdir, logs[i], env)
               for i in range(2)]
  try:
    if meanwhile:
      meanwhile()
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
  return texts


def _params(model_dir: str, step: int | None = None):
  return jax.device_get(restore.restore(model_dir, step=step).params)


def test_two_processes_train_into_and_resume_from_the_bucket_as_one_process_trains(
    gcs, bucket, tmp_path, capfd, monkeypatch):
  model_dir = files.join(bucket["root"], "runs", "two_processes")
  one_process_dir = files.join(bucket["root"], "runs", "one_process")
  # Phase 1: the 2-process run stops at step 2 (a cooperative save) while the 1-process
  # reference trains straight to step STEPS; phase 2: both processes restore step 2 together.
  _two_processes(bucket, model_dir, 2, tmp_path, "first", meanwhile=lambda: _one_process(
      bucket, one_process_dir, tmp_path / "one_process", capfd, monkeypatch))
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
