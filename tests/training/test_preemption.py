"""`python -m vmsst.train` killed (SIGKILL) or preempted (SIGTERM) resumes bit-for-bit.

Each run is a real subprocess on the first lines of the real data (`small_data_dir`: no run
here needs whole corpora read and counted at start-up) with a tiny model; the final
train state (step, parameters, optimizer state) of an interrupted-and-resumed
run must equal, bit for bit, that of one uninterrupted run of the same steps. A run killed
between saves and rerun is tests/gcs/test_gcs_train.py's check (its files in a bucket, as a pod
keeps them); here a kill lands during a save, and SIGTERM and Ctrl-C stop a run.
"""

import json
import os
import pathlib
import re
import shutil
import signal
import subprocess
import sys
import time

import jax
import numpy as np
import orbax.checkpoint as ocp
import pytest

import vmsst_testing
from vmsst.base import cli
from vmsst.training import checkpointing

# Training runs and subprocesses: the slow tier (`make test-fast` skips them).
pytestmark = pytest.mark.slow

# The SIGTERM run resumes from the killed run's complete step (3 at most, 6 or 9 if the kill
# missed a save) and must be stopped before the last step: steps are cheap, margin is not.
STEPS = 16
TIMEOUT_S = 900  # per subprocess: ~80 s alone, minutes on a shared, loaded machine
# Tiny and short, so one run takes seconds (test_multihost.py's model: its size is not what is
# tested); logging every step shows progress.
EXTRA = ["train.evaluator = None", "train.log_every = 1", "BATCH_SIZE = 8",
         "train.mixture_name = 'vmsst_multi30k'", "SEQUENCE_LENGTH = 16",
         "NetworkConfig.emb_dim = 32", "NetworkConfig.mlp_dim = 64",
         "NetworkConfig.num_encoder_layers = 1"]
STEP_LINE = re.compile(r"\] \[(\d+)\] .*loss=")


def _command(data_dir, vocab_path, model_dir, save_every: int) -> list[str]:
  bindings = vmsst_testing.small_run_bindings(
      data_dir, vocab_path, model_dir, STEPS,
      extra=EXTRA + [f"make_manager.save_interval_steps = {save_every}"])
  return ([sys.executable, "-m", "vmsst.train", "--gin_file=gin/runs/vmsst_cpu.gin",
           f"--gin_search_path={vmsst_testing.ROOT}"]
          + [f"--gin_bindings={b}" for b in bindings])


@pytest.fixture(name="run_env", scope="module")
def _run_env(tmp_path_factory) -> dict[str, str]:
  """The runs' environment: one device, and one persistent compilation cache for
  all runs of this module, so only the first compiles (about 8 s saved per run)."""
  return dict(os.environ, XLA_FLAGS="--xla_force_host_platform_device_count=1",
              TF_CPP_MIN_LOG_LEVEL="2",
              JAX_COMPILATION_CACHE_DIR=str(tmp_path_factory.mktemp("jax_cache")),
              JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS="0",
              JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES="0")


def _start(command, log: pathlib.Path, env: dict[str, str]) -> subprocess.Popen:
  with open(log, "w") as out:
    return subprocess.Popen(command, cwd=vmsst_testing.ROOT, env=env, stdout=out,
                            stderr=subprocess.STDOUT)


def _run(command, log: pathlib.Path, env: dict[str, str]) -> int:
  process = _start(command, log, env)
  try:
    return process.wait(timeout=TIMEOUT_S)
  finally:
    _kill(process)


def _kill(process: subprocess.Popen) -> None:
  if process.poll() is None:
    process.kill()
    process.wait()


def _wait_for_step(process, log: pathlib.Path, step: int) -> int:
  """Polls the log until a step >= `step` is logged; returns the step seen."""
  deadline = time.time() + TIMEOUT_S
  while time.time() < deadline:
    seen = [int(s) for s in STEP_LINE.findall(log.read_text())]
    if seen and max(seen) >= step:
      return max(seen)
    if process.poll() is not None:
      raise AssertionError(f"run ended ({process.returncode}) before step {step}:\n"
                           + log.read_text()[-3000:])
    time.sleep(0.05)
  raise AssertionError(f"no step {step} within {TIMEOUT_S} s:\n" + log.read_text()[-3000:])


def _final_state(model_dir: pathlib.Path):
  """The saved TrainState tree (numpy) of step STEPS."""
  path = model_dir / "checkpoints" / str(STEPS) / "default"
  return jax.device_get(ocp.StandardCheckpointer().restore(path))


def _assert_bitwise_equal(a, b) -> None:
  paths_a = jax.tree_util.tree_flatten_with_path(a)[0]
  paths_b = jax.tree_util.tree_flatten_with_path(b)[0]
  assert [p for p, _ in paths_a] == [p for p, _ in paths_b]
  unequal = [jax.tree_util.keystr(p) for (p, x), (_, y) in zip(paths_a, paths_b)
             if not np.array_equal(x, y)]
  assert not unequal, unequal


@pytest.fixture(scope="module")
def uninterrupted(small_data_dir, tiny_vocab_path, tmp_path_factory, run_env):
  model_dir = tmp_path_factory.mktemp("straight") / "run"
  log = model_dir.parent / "log.txt"
  status = _run(_command(small_data_dir, tiny_vocab_path, model_dir, save_every=100), log,
                run_env)
  assert status == 0, log.read_text()[-3000:]
  return _final_state(model_dir)


def _kill_when_a_save_starts(process, model_dir: pathlib.Path, after_step: int) -> int:
  """SIGKILLs `process` as soon as orbax's temporary directory of a step > `after_step`
  appears (the asynchronous write has begun); returns that step."""
  deadline = time.time() + TIMEOUT_S
  while time.time() < deadline:
    if (model_dir / "checkpoints").is_dir():
      for name in os.listdir(model_dir / "checkpoints"):
        step = name.split(".")[0]
        if "tmp" in name and step.isdigit() and int(step) > after_step:
          process.send_signal(signal.SIGKILL)
          return int(step)
    assert process.poll() is None, f"run ended ({process.returncode}) before a save"
    time.sleep(0.002)
  raise AssertionError(f"no save began within {TIMEOUT_S} s")


def test_sigkill_during_a_save_then_sigterm_each_resume_to_the_uninterrupted_state(
    uninterrupted, small_data_dir, tiny_vocab_path, tmp_path, run_env):
  """One directory through both stops: killed as an asynchronous save begins, rerun from the
  last complete step and stopped by SIGTERM, rerun again to the end (the resumes that two
  separate tests made; each stop's own checks are unchanged)."""
  model_dir = tmp_path / "run"
  command = _command(small_data_dir, tiny_vocab_path, model_dir, save_every=3)
  complete = _sigkill_during_a_save(command, model_dir, tmp_path / "killed.txt", run_env)
  terminated = _sigterm_after_resuming(command, model_dir, tmp_path / "terminated.txt", run_env)
  assert f"Restoring checkpoint at step {max(complete)} " in terminated
  assert "does not restore" not in terminated  # nothing corrupt was met
  # A checkpoint written before data positions were saved resumes the old way, by skipping.
  saved = max(checkpointing.make_manager(str(model_dir)).all_steps())
  for step in checkpointing.make_manager(str(model_dir)).all_steps():
    shutil.rmtree(model_dir / "checkpoints" / str(step) / "data_position")
  status = _run(command, tmp_path / "resumed.txt", run_env)
  resumed_log = (tmp_path / "resumed.txt").read_text()
  assert status == 0, resumed_log[-3000:]
  assert f"skipping {saved} batches through the pipeline" in resumed_log
  _assert_bitwise_equal(_final_state(model_dir), uninterrupted)
  # The resumed run's data counts are the whole source's, exact: read = kept + skipped.
  total = json.loads((model_dir / "data_counts.json").read_text())["total"]["train"]
  assert total["read"] == total["kept"] + total["skipped"] == 600  # Multi30k's heads: 100 x 6


def _sigkill_during_a_save(command, model_dir: pathlib.Path, log: pathlib.Path,
                           run_env) -> list[int]:
  """Starts a fresh run and SIGKILLs it as a save after step 1 begins; returns the complete
  steps, after checking that the step being written is complete or absent, never listed
  half-written."""
  process = _start(command, log, run_env)
  try:
    # No save after step 1 begins before step 1 is logged: the 2-ms watch starts there, not
    # through the seconds of start-up.
    _wait_for_step(process, log, 1)
    saving = _kill_when_a_save_starts(process, model_dir, after_step=1)
    assert process.wait(timeout=60) == -signal.SIGKILL
  finally:
    _kill(process)
  complete = checkpointing.make_manager(str(model_dir)).all_steps()
  assert complete and max(complete) <= saving, (complete, saving)
  return complete


def _sigterm_after_resuming(command, model_dir: pathlib.Path, log: pathlib.Path,
                            run_env) -> str:
  """Reruns `command`, sends SIGTERM once step 4 is logged and checks the stop: exit 75, the
  current step saved (on top of the interval's saves) with its data position, no step after
  it. Returns the log."""
  process = _start(command, log, run_env)
  try:
    reached = _wait_for_step(process, log, 4)
    process.send_signal(signal.SIGTERM)
    status = process.wait(timeout=TIMEOUT_S)
  finally:
    _kill(process)
  text = log.read_text()
  assert status == checkpointing.PREEMPTED_EXIT_CODE == 75, text[-3000:]
  saved = checkpointing.make_manager(str(model_dir)).all_steps()
  # Orbax saves step 1 of a fresh directory; the interval (3) saves its multiples.
  assert all(step == 1 or step % 3 == 0 for step in saved[:-1]), saved
  assert 1 < reached <= saved[-1] < STEPS, (saved, reached)
  assert f"preempted (SIGTERM): saved step {saved[-1]} in {model_dir / 'checkpoints'}" in text
  assert max(int(s) for s in STEP_LINE.findall(text)) == saved[-1]  # no step after the save
  assert list((model_dir / "checkpoints" / str(saved[-1]) / "data_position").glob(
      "*.position.json"))
  return text


def test_ctrl_c_finishes_the_step_saves_it_and_exits_130(small_data_dir, tiny_vocab_path,
                                                          tmp_path, run_env):
  model_dir = tmp_path / "run"
  log = tmp_path / "interrupted.txt"
  process = _start(_command(small_data_dir, tiny_vocab_path, model_dir, save_every=100), log,
                   run_env)
  try:
    reached = _wait_for_step(process, log, 4)
    process.send_signal(signal.SIGINT)
    status = process.wait(timeout=TIMEOUT_S)
  finally:
    _kill(process)
  text = log.read_text()
  assert status == cli.INTERRUPTED_EXIT_CODE == 130, text[-3000:]
  assert "KeyboardInterrupt" not in text and "Traceback" not in text
  saved = checkpointing.make_manager(str(model_dir)).all_steps()
  assert 1 < reached <= saved[-1] < STEPS, (saved, reached)
  assert (f"interrupted (Ctrl-C): saved step {saved[-1]} in {model_dir / 'checkpoints'}; "
          "exit status 130, rerun the same command to resume") in text
  assert max(int(s) for s in STEP_LINE.findall(text)) == saved[-1]  # no step after the save
