"""Multi-controller training: 2 processes on localhost train exactly like 1.

The processes are real `python -m vmsst.train --coordinator_address=...`
runs (CPU, gloo collectives) on a slice of the real corpora; each is started
in its own session and killed with its process group in `finally`, so a
failing or hanging run leaves nothing behind.

Device counts: each of the 2 processes sees 1 CPU device
(XLA_FLAGS=--xla_force_host_platform_device_count=1) and the 1-process run
sees 2, so both build the same ("data" 2, "model" 1) mesh; with two
addends a cross-device sum cannot be reordered, and the parameters are
expected bitwise equal. Two processes stopping at a checkpoint and resuming together to the
1-process run's state is tests/gcs/test_gcs_multihost.py's check, into a bucket as a pod runs;
here they resume after one of them was killed.
"""

import os
import pathlib
import re
import signal
import socket
import subprocess
import sys
import time

import jax
import numpy as np
import pytest
from flax import traverse_util
import seqio

import vmsst_testing
from vmsst_tasks import registry
from vmsst_tasks.pipeline.input_pipeline import train_iterator
from vmsst.training import distributed
from vmsst.encoding import restore

# Training runs and subprocesses: the slow tier (`make test-fast` skips them).
pytestmark = pytest.mark.slow

ROOT = vmsst_testing.ROOT
GLOBAL_BATCH = 8
TIMEOUT_S = 400  # per phase; a healthy phase takes well under a minute on 2 idle cores


def _bindings(data_dir, vocab_path, model_dir, steps: int) -> list[str]:
  return vmsst_testing.small_run_bindings(
      data_dir, vocab_path, model_dir, steps,
      extra=[f"BATCH_SIZE = {GLOBAL_BATCH}", "train.evaluator = None",
             "make_manager.save_interval_steps = 2", "train.log_every = 1",
             "train_iterator.host_data = 'slice'",  # the 2-process run equals the 1-process one
             "SEQUENCE_LENGTH = 16", "NetworkConfig.emb_dim = 32", "NetworkConfig.mlp_dim = 64",
             "NetworkConfig.num_encoder_layers = 1"])


def test_host_slices_are_blocks_of_the_one_process_batch(small_data_dir, tiny_vocab_path):
  registry.register_tasks(str(small_data_dir), tiny_vocab_path)
  common = dict(batch_size=GLOBAL_BATCH, sequence_length=16, seed=3)

  def batches(index, count, start_step=0, n=3):
    it = train_iterator("vmsst_ntrex_multi30k", start_step=start_step, host_data="slice",
                        process_index=index, process_count=count, **common)
    return [next(it) for _ in range(n)]

  one = batches(0, 1)
  hosts = [batches(0, 2), batches(1, 2)]
  for step in range(3):
    for key, rows in one[step].items():
      assert rows.shape[0] == GLOBAL_BATCH
      np.testing.assert_array_equal(hosts[0][step][key], rows[:GLOBAL_BATCH // 2])
      np.testing.assert_array_equal(hosts[1][step][key], rows[GLOBAL_BATCH // 2:])
  # Resuming at step 2 on host 1 continues the same blocks.
  resumed = batches(1, 2, start_step=2, n=1)[0]
  np.testing.assert_array_equal(resumed["tokens_a"], one[2]["tokens_a"][GLOBAL_BATCH // 2:])
  # The batches are not all alike (the comparison above could fail).
  assert not np.array_equal(one[0]["tokens_a"], one[1]["tokens_a"])
  # host_data="shard_info": the same batch shape per host, but each host draws
  # from its own 1/P of the examples, so the global batch is another one.
  shards = [next(train_iterator(
      "vmsst_ntrex_multi30k", start_step=0, host_data="shard_info", process_index=i,
      process_count=2, **common)) for i in range(2)]
  assert shards[0]["tokens_a"].shape == (GLOBAL_BATCH // 2, 16)
  assert not np.array_equal(np.concatenate([s["tokens_a"] for s in shards]), one[0]["tokens_a"])
  with pytest.raises(ValueError, match="does not divide over 3 hosts"):
    train_iterator("vmsst_ntrex_multi30k", start_step=0, host_data="slice", process_index=0,
                   process_count=3, **common)
  with pytest.raises(ValueError, match="host_data"):
    train_iterator("vmsst_ntrex_multi30k", start_step=0, host_data="rows", **common)


def _free_port() -> int:
  with socket.socket() as s:
    s.bind(("localhost", 0))
    return s.getsockname()[1]


@pytest.fixture(name="jax_cache", scope="module")
def _jax_cache(tmp_path_factory) -> pathlib.Path:
  """One persistent compilation cache for every run of this module: the runs build the
  same programs, so only the first 2-process phase compiles them (the 1-process
  reference, on 2 devices, compiles its own once)."""
  return tmp_path_factory.mktemp("jax_cache")


def _spawn(args: list[str], devices: int, log: pathlib.Path,
           cache: pathlib.Path) -> subprocess.Popen:
  """`python -m vmsst.train ARGS` in its own session (killable as a group), compiling
  through the persistent cache `cache`."""
  env = dict(os.environ, XLA_FLAGS=f"--xla_force_host_platform_device_count={devices}",
             JAX_PLATFORMS="cpu", TF_CPP_MIN_LOG_LEVEL="2",
             JAX_COMPILATION_CACHE_DIR=str(cache),
             JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS="0",
             JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES="0")
  with open(log, "w") as out:
    return subprocess.Popen([sys.executable, "-m", "vmsst.train", *args], cwd=ROOT, env=env,
                            stdout=out, stderr=subprocess.STDOUT, start_new_session=True)


def _run_all(runs: list[tuple[list[str], int, pathlib.Path]], cache: pathlib.Path) -> None:
  """Starts every run, waits for all; kills every process group on any exit."""
  procs = []
  try:
    for args, devices, log in runs:
      procs.append(_spawn(args, devices, log, cache))
    deadline = time.monotonic() + TIMEOUT_S
    while any(proc.poll() is None for proc in procs):
      # A crashed process fails the test at once (its peers would wait for it).
      for proc, (_, _, log) in zip(procs, runs):
        assert proc.poll() in (None, 0), (
            f"{proc.args} exited {proc.returncode}:\n{log.read_text()[-3000:]}")
      assert time.monotonic() < deadline, f"runs still going after {TIMEOUT_S} s"
      time.sleep(0.5)
    for proc, (_, _, log) in zip(procs, runs):
      assert proc.returncode == 0, (
          f"{proc.args} exited {proc.returncode}:\n{log.read_text()[-3000:]}")
  finally:
    for proc in procs:
      if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGKILL)
      proc.wait(timeout=30)


def _train_args(bindings: list[str]) -> list[str]:
  return ["--gin_file=gin/runs/vmsst_cpu.gin", *[f"--gin_bindings={b}" for b in bindings]]


def _saved_steps(model_dir: pathlib.Path) -> list[int]:
  return sorted(int(p.name) for p in (model_dir / "checkpoints").iterdir() if p.name.isdigit())


def test_partial_coordinator_flags_are_refused_before_joining():
  with pytest.raises(ValueError, match="give all of --coordinator_address"):
    distributed.initialize_distributed(coordinator_address="localhost:1234", num_processes=2)


def _wait_for_step(procs, log: pathlib.Path, step: int) -> None:
  """Polls `log` until it shows step `step`; fails if a process ends first."""
  deadline = time.monotonic() + TIMEOUT_S
  while not re.search(rf"\[{step}\] .*loss=", log.read_text()):
    for proc in procs:
      assert proc.poll() is None, f"{proc.args} exited {proc.returncode} before step {step}"
    assert time.monotonic() < deadline, f"no step {step} after {TIMEOUT_S} s"
    time.sleep(0.2)


def _exit_status(proc: subprocess.Popen, limit_s: float) -> int:
  """The process's exit status; fails (a hang) if it runs past `limit_s`."""
  try:
    return proc.wait(timeout=limit_s)
  except subprocess.TimeoutExpired:
    raise AssertionError(f"{proc.args} still running {limit_s} s later (hung?)") from None


def _two_processes(small_data_dir, tiny_vocab_path, model_dir, steps, tmp_path, phase,
                   extra=()) -> list[tuple[list[str], int, pathlib.Path]]:
  port = _free_port()
  return [(_train_args(_bindings(small_data_dir, tiny_vocab_path, model_dir, steps))
           + [f"--coordinator_address=localhost:{port}", "--num_processes=2",
              f"--process_id={i}", *extra], 1, tmp_path / f"{phase}_process{i}.log")
          for i in range(2)]


def _what_happened(log: str) -> str:
  """A survivor's warnings, errors and abort (a fatal signal's dump ends in a module list)."""
  keys = ("error", "Fatal", "Check failure", "Terminating", "distributed.py", "File \"")
  return "\n".join(line[:300] for line in log.splitlines() if any(k in line for k in keys))[-6000:]


def _kill_process_1(small_data_dir, tiny_vocab_path, tmp_path, jax_cache, model_dir, *,
                    steps: int, after_step: int, timeout: int = 5) -> None:
  """Two processes train into `model_dir`; process 1 is killed once it logged `after_step`. The
  survivor must stop on its own, well before JAX's backstop would abort it,
  with exit status 69 and one line naming process 1."""
  runs = _two_processes(small_data_dir, tiny_vocab_path, model_dir, steps, tmp_path, "killed",
                        extra=[f"--peer_timeout_seconds={timeout}"])
  procs = []
  try:
    procs = [_spawn(*run, jax_cache) for run in runs]
    _wait_for_step(procs, runs[1][2], after_step)
    procs[1].send_signal(signal.SIGKILL)
    status = _exit_status(procs[0], timeout + 60)
  finally:
    for proc in procs:
      if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGKILL)
      proc.wait(timeout=30)
  survivor = runs[0][2].read_text()
  assert status == distributed.HOST_LOST_EXIT_CODE == 69, _what_happened(survivor)
  lines = [line for line in survivor.splitlines() if line.startswith("error: lost process")]
  assert len(lines) == 1, survivor[-3000:]
  assert lines[0].startswith(f"error: lost process 1 of 2 (host {socket.gethostname()}, "
                             f"pid {procs[1].pid}): silent for {timeout} s;"), lines
  assert "Check failure stack trace" not in survivor  # JAX's own abort did not come first


def test_a_process_killed_stops_its_peer_with_one_line_and_a_restart_resumes(
    small_data_dir, tiny_vocab_path, tmp_path, jax_cache):
  steps = 8
  model_dir = tmp_path / "two"
  _kill_process_1(small_data_dir, tiny_vocab_path, tmp_path, jax_cache, model_dir, steps=steps,
                  after_step=5)
  # Both restarted: they resume from the last complete checkpoint to the
  # model of one uninterrupted run.
  _run_all(_two_processes(small_data_dir, tiny_vocab_path, model_dir, steps, tmp_path, "again")
           + [(_train_args(_bindings(small_data_dir, tiny_vocab_path, tmp_path / "one", steps)),
               2, tmp_path / "one.log")], jax_cache)
  resumed = (tmp_path / "again_process0.log").read_text()
  assert re.search(r"Restoring checkpoint at step [2-6] ", resumed), resumed[-3000:]
  one = traverse_util.flatten_dict(jax.device_get(restore.restore(str(tmp_path / "one")).params))
  two = traverse_util.flatten_dict(jax.device_get(restore.restore(str(model_dir)).params))
  assert one.keys() == two.keys() and len(one) > 10
  for name, value in one.items():
    np.testing.assert_array_equal(two[name], value, err_msg=str(name))


def test_a_process_killed_as_a_checkpoint_save_begins_stops_its_peer_with_one_line(
    small_data_dir, tiny_vocab_path, tmp_path, jax_cache):
  # Step 6 is logged just before its save: the survivor fails in orbax's
  # cross-process sync (a ValueError or a JaxRuntimeError), not in a train step.
  _kill_process_1(small_data_dir, tiny_vocab_path, tmp_path, jax_cache, tmp_path / "two",
                  steps=8, after_step=6)


def test_sigterm_to_both_processes_saves_one_step_and_exits_75(small_data_dir, tiny_vocab_path,
                                                               tmp_path, jax_cache):
  model_dir = tmp_path / "two"
  runs = _two_processes(small_data_dir, tiny_vocab_path, model_dir, 400, tmp_path, "term")
  procs = []
  try:
    procs = [_spawn(*run, jax_cache) for run in runs]
    _wait_for_step(procs, runs[0][2], 3)
    for proc in procs:
      proc.send_signal(signal.SIGTERM)
    statuses = [_exit_status(proc, TIMEOUT_S) for proc in procs]
  finally:
    for proc in procs:
      if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGKILL)
      proc.wait(timeout=30)
  logs = [run[2].read_text() for run in runs]
  assert statuses == [75, 75], [log[-3000:] for log in logs]
  saved = [re.findall(r"preempted \(SIGTERM\): saved step (\d+) ", log) for log in logs]
  assert saved[0] == saved[1] and len(saved[0]) == 1, saved
  assert int(saved[0][0]) in _saved_steps(model_dir)
  assert int(saved[0][0]) < 400


def test_losing_process_0_stops_the_other_with_jax_naming_the_leader(small_data_dir,
                                                                      tiny_vocab_path, tmp_path,
                                                                      jax_cache):
  # Process 0 holds the coordination service: its loss is JAX's to report (within seconds).
  runs = _two_processes(small_data_dir, tiny_vocab_path, tmp_path / "two", 400, tmp_path,
                        "leader", extra=["--peer_timeout_seconds=5"])
  procs = []
  try:
    procs = [_spawn(*run, jax_cache) for run in runs]
    _wait_for_step(procs, runs[1][2], 3)
    procs[0].send_signal(signal.SIGKILL)
    status = _exit_status(procs[1], 60)
  finally:
    for proc in procs:
      if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGKILL)
      proc.wait(timeout=30)
  survivor = runs[1][2].read_text()
  assert status != 0, survivor[-3000:]
  assert "the leader task was preempted/died/restarted" in survivor or (
      "error: lost process 0 of 2" in survivor), survivor[-3000:]
