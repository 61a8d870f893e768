"""Two `python -m vmsst.train` processes (one job over localhost, as `PROCESSES=2 bash
launch/local.sh` starts them) train into a bucket and resume from it, on the GCS emulator.

Each process writes its own share of every checkpoint (orbax's `ocdbt.process_<i>`), and
both must find the same latest step in the bucket when restarted.
"""

import re
import socket
import time

import pytest

import test_gcs_train as gcs_train
from test_gcs_train import _bucket  # pylint: disable=unused-import  (the `bucket` fixture)
from vmsst import files

pytestmark = pytest.mark.slow

HOST_BINDINGS = ["train_iterator.host_data = 'slice'", "make_manager.save_interval_steps = 2"]


def _free_port() -> int:
  with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    return s.getsockname()[1]


def _two_processes(bucket, model_dir: str, steps: int, workdir, phase: str) -> list[str]:
  """Starts both processes, waits for both (a crash of either fails at once); their logs."""
  port = _free_port()
  cmd = gcs_train.command(gcs_train.bindings(bucket["data"], bucket["vocab"], model_dir,
                                             bucket["init"], steps=steps, extra=HOST_BINDINGS),
                          f"--coordinator_address=127.0.0.1:{port}", "--num_processes=2")
  logs = [workdir / f"{phase}_process{i}.txt" for i in range(2)]
  env = gcs_train.run_env(workdir)
  processes = [gcs_train.start(cmd + [f"--process_id={i}"], workdir, logs[i], env)
               for i in range(2)]
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
  return texts


def test_two_processes_train_into_and_resume_from_the_bucket(gcs, bucket, tmp_path):
  model_dir = files.join(bucket["root"], "runs", "two_processes")
  _two_processes(bucket, model_dir, 2, tmp_path, "first")
  _two_processes(bucket, model_dir, 4, tmp_path, "second")
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
    assert i or steps == [3, 4], log[-4000:]  # process 0 logs the resumed steps only
  assert not gcs_train.local_gs_folders(tmp_path)
  assert re.search(r"data position of step 2 restored",
                   (tmp_path / "second_process0.txt").read_text())
