"""`python -m vmsst.train` with every path in a bucket, as a pod runs it, on the GCS emulator.

MODEL_DIR, VOCAB_PATH, the data (NTREX-128 and Multi30k folders, an OPUS directory) and
`init_params` are gs:// paths on the emulator (tests/gcs_emulator.py); the commands run from an
empty working directory, so a path that lost its scheme (`gs:/bucket/...`) would show up there
as a local `gs:` folder. One uninterrupted run serves the checks of what lands where; a run
killed with SIGKILL and rerun must resume from the bucket, with its data position, to the
same model. The early-stopping run trains on the bucket's OPUS directory, so it also serves
the check of that stream (its stopping does not depend on the data). The commands that end
before their first step (a refused resume, an unknown mixture) run `main` in this process
(`vmsst_testing.command_here`): a process would add only its seconds of imports.
"""

import json
import os
import pathlib
import re
import signal
import subprocess
import sys
import tempfile
import time
import uuid

import jax
import numpy as np
import orbax.checkpoint as ocp
import pytest

import vmsst_testing
from vmsst.base import files
from vmsst.base import run_directory
from vmsst.model import param_files
from vmsst.base import sentencepiece_vocabulary
from vmsst import train
from vmsst_tasks.sources import heldout

pytestmark = pytest.mark.slow

STEPS = 6
TIMEOUT_S = 600  # per command: well under a minute alone, more on a loaded machine
STEP_LINE = re.compile(r"\] \[(\d+)\] .*loss=")
EXTRA = ["train.evaluator = None", "train.log_every = 1", "BATCH_SIZE = 8",
         "train.mixture_name = 'vmsst_multi30k'", "SEQUENCE_LENGTH = 16",
         "NetworkConfig.emb_dim = 32", "NetworkConfig.mlp_dim = 64"]


# The corpora's files in the bucket: Multi30k's heads, NTREX in the languages of its held-out
# retrieval sets (and its pivots and Multi30k's), Tatoeba in Multi30k's. Every run reads each
# NTREX file twice (each split's counts) and each Tatoeba file (the filter of its test
# sentences), a fifth of a second a file through the emulator: all of them cost each run about
# a minute, and no check here depends on how many languages there are.
BUCKET_FILES = {
    "ntrex128": ("DOCUMENT_IDS.tsv", "newstest2019-src.eng.txt.gz",
                 *(f"newstest2019-ref.{code}.txt.gz"
                   for code in sorted({"spa", "ces", *heldout.NTREX_TARGETS}))),
    "tatoeba": tuple(f"v1/tatoeba.{code}-eng.{side}" for code in ("deu", "fra", "ces")
                     for side in (code, "eng")),
}


def upload_data(gcs, small_data_dir: pathlib.Path, root: str, staging: pathlib.Path) -> str:
  """The tiny run's corpora in the bucket (Multi30k heads, BUCKET_FILES), an OPUS folder.

  Uploaded as `gsutil cp -r` does (objects, no directory markers), the way a user fills a
  bucket; the OPUS files are written through vmsst.base.files. `staging` holds the links uploaded.
  """
  prefix = root[len(f"gs://{gcs.bucket}/"):]
  assert gcs.upload_tree(small_data_dir / "multi30k", f"{prefix}/data/multi30k")
  for corpus, names in BUCKET_FILES.items():
    for name in names:
      (staging / corpus / name).parent.mkdir(parents=True, exist_ok=True)
      (staging / corpus / name).symlink_to(small_data_dir / corpus / name)
    assert gcs.upload_tree(staging / corpus, f"{prefix}/data/{corpus}") == len(names)
  opus = files.join(root, "opus")
  files.write_text(files.join(opus, "Europarl.de-en.de"), "".join(f"das Haus {i}\n"
                                                                   for i in range(30)))
  files.write_text(files.join(opus, "Europarl.de-en.en"), "".join(f"the house {i}\n"
                                                                   for i in range(30)))
  return files.join(root, "data")


def bindings(bucket_data: str, vocab: str, model_dir: str, init: str | None = None,
             steps: int = STEPS, opus: str | None = None, extra=()) -> list[str]:
  """The tiny run's bindings; with `opus`, that directory is registered too (every file's
  lines counted at registration), while the run trains on Multi30k."""
  if opus:
    extra = ["register_families.families = [@pair_tasks, @opus_tasks]",
             f"opus_tasks.opus_dir = '{opus}'", *extra]
  out = vmsst_testing.small_run_bindings(bucket_data, vocab, model_dir, steps,
                                         extra=[*EXTRA, *extra])
  return out + ([f"train.init_params = '{init}'"] if init else [])


def command(gin_bindings: list[str], *flags: str) -> list[str]:
  return ([sys.executable, "-m", "vmsst.train",
           f"--gin_file={vmsst_testing.ROOT / 'gin/runs/vmsst_cpu.gin'}",
           f"--gin_search_path={vmsst_testing.ROOT}"]
          + [f"--gin_bindings={b}" for b in gin_bindings] + list(flags))


def run_env(workdir: pathlib.Path, devices: int = 1) -> dict[str, str]:
  """The emulator's variables (os.environ, set by the gcs fixture), one CPU device, a shared
  compilation cache and a temporary directory of the test's own (checked for `gs:` folders)."""
  (workdir / "tmp").mkdir(parents=True, exist_ok=True)
  return dict(os.environ, XLA_FLAGS=f"--xla_force_host_platform_device_count={devices}",
              JAX_PLATFORMS="cpu", TF_CPP_MIN_LOG_LEVEL="2", TMPDIR=str(workdir / "tmp"),
              JAX_COMPILATION_CACHE_DIR=str(workdir.parent / "jax_cache"),
              JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS="0",
              JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES="0")


def start(cmd: list[str], workdir: pathlib.Path, log: pathlib.Path,
          env: dict[str, str] | None = None) -> subprocess.Popen:
  with open(log, "w") as out:
    return subprocess.Popen(cmd, cwd=workdir, env=env or run_env(workdir), stdout=out,
                            stderr=subprocess.STDOUT, start_new_session=True)


def finish(process: subprocess.Popen, log: pathlib.Path) -> str:
  try:
    process.wait(timeout=TIMEOUT_S)
  finally:
    if process.poll() is None:
      os.killpg(process.pid, signal.SIGKILL)
      process.wait()
  return log.read_text()


def run(cmd: list[str], workdir: pathlib.Path, log: pathlib.Path) -> tuple[int, str]:
  process = start(cmd, workdir, log)
  text = finish(process, log)
  return process.returncode, text


def train_here(gin_bindings: list[str], workdir: pathlib.Path, capfd,
               monkeypatch) -> vmsst_testing.Ended:
  """`command(gin_bindings)` past its imports, in this process
  (`vmsst_testing.command_here`), from `workdir` with a temporary directory of its own (both
  checked for `gs:` folders), as `run_env` gives a process."""
  (workdir / "tmp").mkdir(parents=True, exist_ok=True)
  monkeypatch.chdir(workdir)
  monkeypatch.setenv("TMPDIR", str(workdir / "tmp"))
  monkeypatch.setattr(tempfile, "tempdir", str(workdir / "tmp"))
  return vmsst_testing.command_here(train.main, "vmsst.train",
                                    command(gin_bindings)[3:], capfd)


def local_gs_folders(*roots: pathlib.Path) -> list[str]:
  """Any local folder named like a bucket path that lost its scheme (`gs:`)."""
  return [str(p) for root in roots for p in root.rglob("gs:*")]


def final_state(model_dir: str, step: int = STEPS):
  path = files.join(model_dir, "checkpoints", str(step), "default")
  return jax.device_get(ocp.StandardCheckpointer().restore(path))


def assert_equal_trees(a, b) -> None:
  flat_a = jax.tree_util.tree_flatten_with_path(a)[0]
  flat_b = jax.tree_util.tree_flatten_with_path(b)[0]
  assert [p for p, _ in flat_a] == [p for p, _ in flat_b] and len(flat_a) > 10
  unequal = [jax.tree_util.keystr(p) for (p, x), (_, y) in zip(flat_a, flat_b)
             if not np.array_equal(x, y)]
  assert not unequal, unequal


@pytest.fixture(name="bucket", scope="module")
def _bucket(gcs, small_data_dir, tiny_vocab_path, tmp_path_factory):
  """(data, vocabulary, init_params) in a fresh prefix of the bucket."""
  root = gcs.path(f"train-{uuid.uuid4().hex[:8]}")
  bucket_data = upload_data(gcs, small_data_dir, root, tmp_path_factory.mktemp("bucket_data"))
  vocab = files.join(root, "spm", "tiny.model")
  files.copy(tiny_vocab_path, vocab)
  size = sentencepiece_vocabulary.get_vocabulary(tiny_vocab_path).vocab_size
  init = files.join(root, "init", "embed.safetensors")
  param_files.save_params(init, {"token_embed/embedding": np.full((size, 32), 0.25, np.float32)})
  return {"root": root, "data": bucket_data, "vocab": vocab, "init": init}


@pytest.fixture(name="straight", scope="module")
def _straight(gcs, bucket, tmp_path_factory):
  """One uninterrupted run into the bucket: (model_dir, its log, the working directory)."""
  workdir = tmp_path_factory.mktemp("gcs_straight")
  model_dir = files.join(bucket["root"], "runs", "straight")
  status, log = run(command(bindings(bucket["data"], bucket["vocab"], model_dir, bucket["init"],
                                     extra=["make_manager.save_interval_steps = 3"])),
                    workdir, workdir / "log.txt")
  assert status == 0, log[-4000:]
  return model_dir, log, workdir


def test_every_file_of_a_run_lands_in_the_bucket(gcs, straight):
  model_dir, log, workdir = straight
  prefix = model_dir[len(f"gs://{gcs.bucket}/"):] + "/"
  written = {name[len(prefix):] for name in gcs.objects(prefix)}
  for expected in ("config.gin", "model.json", "spm.model", "data_counts.json"):
    assert expected in written, sorted(written)
  assert {f"checkpoints/{step}" for step in (3, STEPS)} <= {"/".join(n.split("/")[:2])
                                                           for n in written}
  assert any(n.startswith(f"checkpoints/{STEPS}/data_position/") for n in written), sorted(
      written)
  assert any("tfevents" in n for n in written), sorted(written)
  assert not local_gs_folders(workdir, vmsst_testing.ROOT), local_gs_folders(workdir)
  init = files.join(files.parent(files.parent(model_dir)), "init", "embed.safetensors")
  assert f"starting from the parameters in {init}" in log, log[-4000:]


def test_a_changed_setting_is_refused_without_resume_with_changes(bucket, straight, tmp_path,
                                                                  capfd, monkeypatch):
  model_dir, _, _ = straight
  changed = bindings(bucket["data"], bucket["vocab"], model_dir, bucket["init"],
                     extra=["make_manager.save_interval_steps = 3", "inverse_sqrt_schedule.peak_learning_rate = 1e-2"])
  done = train_here(changed, tmp_path, capfd, monkeypatch)
  vmsst_testing.assert_user_error(done, "--resume_with_changes")
  assert not local_gs_folders(tmp_path)


def test_kill_9_then_the_same_command_resumes_from_the_bucket_to_the_same_model(
    bucket, straight, tmp_path):
  # Also the SIGKILL test of tests/training/test_preemption.py: the same run killed and resumed,
  # its files in the bucket.
  model_dir = files.join(bucket["root"], "runs", "killed")
  cmd = command(bindings(bucket["data"], bucket["vocab"], model_dir, bucket["init"],
                         extra=["make_manager.save_interval_steps = 2"]))
  log = tmp_path / "killed.txt"
  process = start(cmd, tmp_path, log)
  try:
    deadline = time.monotonic() + TIMEOUT_S
    while not any(int(s) >= 4 for s in STEP_LINE.findall(log.read_text())):
      assert process.poll() is None, log.read_text()[-4000:]
      assert time.monotonic() < deadline, log.read_text()[-4000:]
      time.sleep(0.05)
    reached = max(int(s) for s in STEP_LINE.findall(log.read_text()))
    os.killpg(process.pid, signal.SIGKILL)
    process.wait(timeout=60)
  finally:
    finish(process, log)
  # Whatever was complete survives; a save cut short is only a temporary dir.
  saved = ocp.CheckpointManager(files.join(model_dir, "checkpoints")).all_steps()
  assert saved and max(saved) <= reached and STEPS not in saved, (saved, reached)
  # The data position is an item of its checkpoint.
  assert files.glob(files.join(model_dir, "checkpoints", str(max(saved)), "data_position",
                               "*.position.json"))
  # Goodput: the killed run's progress (logged every step here) is in MODEL_DIR.
  progress = json.loads(files.read_text(files.join(model_dir, "progress.json")))["step"]
  assert max(saved) <= progress <= reached + 1, (saved, progress, reached)
  status, resumed = run(cmd, tmp_path, tmp_path / "resumed.txt")
  assert status == 0, resumed[-4000:]
  assert f"Restoring checkpoint at step {max(saved)}" in resumed, resumed[-4000:]
  assert f"data position of step {max(saved)} restored" in resumed, resumed[-4000:]
  first_step = min(int(s) for s in STEP_LINE.findall(resumed))
  assert first_step == max(saved) + 1
  # The exit line counts the steps done again between the checkpoint and that progress.
  line = re.search(r"goodput <?\d+%: .*", resumed).group(0)  # <1%: mostly start-up
  assert ("redone steps" in line) == (progress > first_step), (line, progress, first_step)
  assert not [n for n in files.listdir(files.join(model_dir, "checkpoints")) if "tmp" in n]
  assert_equal_trees(final_state(model_dir), final_state(straight[0]))
  assert not local_gs_folders(tmp_path)


@pytest.fixture(name="stopped", scope="module")
def _stopped(bucket, tmp_path_factory):
  """The early-stopping run, trained on the bucket's OPUS directory: (model_dir, its
  bindings, its log, the working directory)."""
  # The retrieval evaluator's "chance" never falls, whatever the training data: step 1 is the
  # last improvement, steps 2 and 3 are idle, patience 2 stops at step 3, whose checkpoint
  # holds step 1's parameters. One device, as run_env gives the process, named so that the
  # same command in this process (eight devices) uses one too.
  workdir = tmp_path_factory.mktemp("gcs_stopped")
  model_dir = files.join(bucket["root"], "runs", "stopped")
  gin_bindings = bindings(bucket["data"], bucket["vocab"], model_dir, bucket["init"], steps=20,
                          opus=files.join(bucket["root"], "opus"),
                          extra=[vmsst_testing.ONE_DEVICE, "train.mixture_name = 'vmsst_opus'",
                                 "train.evaluator = @RetrievalEvaluator()", "train.eval_every = 1",
                                 "train.early_stopping = @EarlyStopping()",
                                 "EarlyStopping.metrics = ['chance']", "EarlyStopping.patience = 2",
                                 "EarlyStopping.directory = %MODEL_DIR",
                                 "retrieval_sets.max_pairs = 16",
                                 "make_manager.save_interval_steps = 1",
                                 "make_manager.max_to_keep = 5"])
  status, log = run(command(gin_bindings), workdir, workdir / "stopped.txt")
  assert status == 0, log[-4000:]
  return model_dir, gin_bindings, log, workdir


def test_early_stopping_keeps_its_state_and_best_checkpoint_in_the_bucket(
    stopped, tmp_path, capfd, caplog, monkeypatch):
  model_dir, gin_bindings, _, workdir = stopped
  state = json.loads(files.read_text(run_directory.of(model_dir).early_stopping))
  assert state["best_step"] == 1 and state["stopped"], state
  saved = ocp.CheckpointManager(files.join(model_dir, "checkpoints")).all_steps()
  assert saved[-1] == 3 and 1 in saved, saved
  best, stopped_at = final_state(model_dir, 1)["params"], final_state(model_dir, 3)["params"]
  assert_equal_trees(stopped_at, best)
  assert not local_gs_folders(workdir)
  # The same command finds the run stopped in the bucket and trains nothing: it ends before
  # its data, so it runs in this process (its warnings are caplog's records here).
  done = train_here(gin_bindings, tmp_path, capfd, monkeypatch)
  assert done.returncode == 0, done.stderr[-4000:]
  assert "stopped early at an earlier run" in caplog.text, caplog.text[-4000:]
  assert "nothing to do" in caplog.text, caplog.text[-4000:]
  # A step trained would have saved (save_interval_steps = 1).
  assert ocp.CheckpointManager(files.join(model_dir, "checkpoints")).all_steps() == saved
  assert not local_gs_folders(tmp_path)


def test_train_streams_an_opus_directory_from_the_bucket(stopped):
  # The paper runs' input: OPUS Moses files read by tf.data straight from gs://.
  model_dir, _, log, workdir = stopped
  assert sorted(int(s) for s in STEP_LINE.findall(log)) == [1, 2, 3], log[-4000:]
  counts = json.loads(files.read_text(files.join(model_dir, "data_counts.json")))
  assert counts["mixture"] == "vmsst_opus", counts
  assert counts["total"]["train"]["read"] == 30, counts["total"]  # the 30 pairs in the bucket
  assert not local_gs_folders(workdir)


def test_a_run_that_fails_before_its_first_checkpoint_leaves_no_bucket_model_dir(
    bucket, tmp_path, capfd, monkeypatch):
  model_dir = files.join(bucket["root"], "failed_run")
  failing = bindings(bucket["data"], bucket["vocab"], model_dir,
                     extra=[vmsst_testing.ONE_DEVICE, "train.mixture_name = 'no_such_mixture'"])
  with pytest.raises(ValueError, match="no_such_mixture"):  # the command's traceback, exit 1
    train_here(failing, tmp_path, capfd, monkeypatch)
  assert not files.exists(files.join(model_dir, "config.gin")), files.glob(f"{model_dir}/*")
  assert not local_gs_folders(tmp_path)
