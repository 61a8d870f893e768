"""The launchers in dry-run mode: the exact commands they would run.

Each script is run with DRY_RUN=1 (nothing is created, submitted or
trained); its printed lines are split as the shell would split them, so a
quoting mistake shows up as a wrong argument.
"""

import os
import shlex
import subprocess
import sys

import pytest

from vmsst.training import slices as tpu_slices

import vmsst_testing

ROOT = vmsst_testing.ROOT
PAPER_GIN = "gin/runs/vmsst_6l_paper.gin"
# Bindings whose values hold quotes and a space: they must reach vmsst.train intact.
BINDINGS = ["--gin.MODEL_DIR='gs://bucket/vmsst 6l'", "--gin.OPUS_DIR='/data/opus'",
            "--gin.TRAIN_STEPS=10"]


def dry_run(script: str, args: list[str], **env: str) -> list[list[str]]:
  """The command lines `script` prints with DRY_RUN=1, each split into words.

  Without the TPU launcher's preflight compile (SKIP_PREFLIGHT=1) unless `env`
  asks for it: its own tests are in the `tpu` tier below.
  """
  env = {"SKIP_PREFLIGHT": "1", **env}
  result = subprocess.run(["bash", f"launch/{script}", *args], cwd=ROOT, capture_output=True,
                          text=True, timeout=900, env=dict(os.environ, DRY_RUN="1", **env),
                          check=False)
  assert result.returncode == 0, result.stderr
  return [shlex.split(line) for line in result.stdout.splitlines() if line.strip()]


def failure(script: str, args: list[str], **env: str) -> str:
  result = subprocess.run(["bash", f"launch/{script}", *args], cwd=ROOT, capture_output=True,
                          text=True, timeout=120,
                          env=dict(os.environ, DRY_RUN="1", SKIP_PREFLIGHT="1", **env),
                          check=False)
  assert result.returncode == 2, result
  return result.stderr


def option(words: list[str], name: str) -> str:
  values = [w[len(name) + 1:] for w in words if w.startswith(name + "=")]
  assert len(values) == 1, (name, words)
  return values[0]


def test_tpu_runs_the_same_gin_with_distributed_on_every_worker():
  lines = dry_run("tpu.sh", ["create", "train", "delete", f"--gin_file={PAPER_GIN}", *BINDINGS],
                  TPU_NAME="vmsst-v4", ZONE="us-central2-b", PROJECT="my-proj",
                  ACCELERATOR_TYPE="v4-64")
  create, train, delete = lines
  assert create[:6] == ["gcloud", "compute", "tpus", "tpu-vm", "create", "vmsst-v4"]
  assert option(create, "--accelerator-type") == "v4-64"
  assert option(create, "--zone") == "us-central2-b"
  assert train[:6] == ["gcloud", "compute", "tpus", "tpu-vm", "ssh", "vmsst-v4"]
  assert option(train, "--worker") == "all"
  assert option(train, "--project") == "my-proj"
  # What each worker's shell runs: one command for all, --distributed, the gin
  # file and the bindings exactly as given here.
  remote = shlex.split(option(train, "--command"))
  assert remote == ["cd", "vmsst", "&&", "python3", "-m", "vmsst.train", "--distributed",
                    f"--gin_file={PAPER_GIN}", *BINDINGS]
  assert delete[:6] == ["gcloud", "compute", "tpus", "tpu-vm", "delete", "vmsst-v4"]
  assert "--quiet" in delete


def test_tpu_defaults_to_train_and_checks_its_settings():
  (train,) = dry_run("tpu.sh", BINDINGS, TPU_NAME="t", ZONE="z")
  assert train[4] == "ssh" and not any(w.startswith("--project") for w in train)
  assert "--gin_file=gin/runs/vmsst_6l_paper.gin" in shlex.split(option(train, "--command"))
  env = {k: v for k, v in os.environ.items() if k not in ("TPU_NAME", "ZONE")}
  result = subprocess.run(["bash", "launch/tpu.sh"], cwd=ROOT, capture_output=True, text=True,
                          timeout=60, env=dict(env, DRY_RUN="1"), check=False)
  assert result.returncode == 2 and "set TPU_NAME and ZONE" in result.stderr
  assert "not found" in failure("tpu.sh", ["--gin_file=gin/runs/nope.gin"], TPU_NAME="t", ZONE="z")
  assert "unknown action 'start'" in failure("tpu.sh", ["start"], TPU_NAME="t", ZONE="z")


def test_tpu_creates_the_slice_the_run_file_names():
  for run, accelerator in (("vmsst_24l_paper", "v4-128"), ("query_tower_paper", "v5litepod-1")):
    (create,) = dry_run("tpu.sh", ["create", f"--gin_file=gin/runs/{run}.gin"],
                        TPU_NAME="t", ZONE="z")
    assert option(create, "--accelerator-type") == accelerator
  assert "names no slice" in failure("tpu.sh", ["create", "--gin_file=gin/runs/vmsst_cpu.gin"],
                                     TPU_NAME="t", ZONE="z")


@pytest.mark.tpu
@pytest.mark.slow
def test_tpu_preflight_compiles_for_the_slice_before_creating_it():
  """A step that fits: the compile's report, then the gcloud lines. One that does not:
  exit 3 before any gcloud line, so nothing would be created."""
  if not tpu_slices.has_libtpu():
    pytest.skip(f"libtpu is not installed: {tpu_slices.INSTALL_COMMAND}")
  run = ["create", "train", "--gin_file=gin/runs/vmsst_cpu.gin"]
  env = dict(os.environ, DRY_RUN="1", TPU_NAME="t", ZONE="z", ACCELERATOR_TYPE="v4-8",
             LOCAL_PY=sys.executable)
  env.pop("SKIP_PREFLIGHT", None)
  fits = subprocess.run(["bash", "launch/tpu.sh", *run], cwd=ROOT, capture_output=True,
                        text=True, timeout=900, env=env, check=False)
  assert fits.returncode == 0, fits.stderr[-2000:]
  assert "preflight" in fits.stderr and "HBM" in fits.stderr
  assert [shlex.split(line)[4] for line in fits.stdout.splitlines()] == ["create", "ssh"]
  too_big = subprocess.run(["bash", "launch/tpu.sh", *run, "--gin.BATCH_SIZE=262144"],
                           cwd=ROOT, capture_output=True, text=True, timeout=900,
                           env=dict(env, ACCELERATOR_TYPE="v5e-1"), check=False)
  assert too_big.returncode == 3 and "preflight failed" in too_big.stderr
  assert not too_big.stdout.strip()


def test_slurm_script_starts_one_process_per_gpu_on_every_node():
  lines = dry_run("slurm.sh", [f"--gin_file={PAPER_GIN}", *BINDINGS], NODES="4",
                  GPUS_PER_NODE="8", PARTITION="gpu", JOB_NAME="vmsst6l", REPO_DIR="/shared/vmsst",
                  PY="/shared/venv/bin/python")
  directives = {w[0].split("=")[0]: w[0].split("=", 1)[1] for w in
                (line[1:] for line in lines if line[0] == "#SBATCH")}
  assert directives["--nodes"] == "4"
  assert directives["--ntasks-per-node"] == "8"  # 4 x 8 = 32 processes, one per GPU
  assert directives["--gpus-per-node"] == "8"
  assert directives["--partition"] == "gpu" and "--account" not in directives
  srun = next(line for line in lines if line[0] == "srun")
  assert srun == ["srun", "--kill-on-bad-exit=1", "/shared/venv/bin/python", "-m", "vmsst.train",
                  "--distributed", f"--gin_file={PAPER_GIN}", *BINDINGS]
  assert ["cd", "/shared/vmsst"] in lines
  assert lines[-1] == ["sbatch", "runs/slurm/vmsst6l.sbatch"]
  assert not (ROOT / "runs/slurm/vmsst6l.sbatch").exists()  # a dry run writes nothing


def test_slurm_rejects_bad_node_counts():
  assert "positive integers" in failure("slurm.sh", [], NODES="0")
  assert "positive integers" in failure("slurm.sh", [], GPUS_PER_NODE="eight")


def test_local_dry_run_prints_vocabulary_train_and_evaluation(data_dir, tmp_path):
  lines = dry_run("local.sh", ["--gin_file=gin/runs/vmsst_cpu.gin", "--gin.TRAIN_STEPS=5"],
                  DATA_DIR=str(data_dir), VOCAB_DIR=str(tmp_path / "vocab"),
                  TASKS_DIR=str(tmp_path / "tasks"), PY="python")
  modules = [line[2] for line in lines]
  assert modules[:2] == ["vmsst.vocabulary", "vmsst.train"]
  assert modules[-2:] == ["vmsst.learning_curves", "vmsst.evaluate"]
  train = lines[1]
  assert "--gin.TRAIN_STEPS=5" in train and "--gin_file=gin/runs/vmsst_cpu.gin" in train
  assert f"--gin.VOCAB_PATH='{tmp_path}/vocab/spm.model'" in train
  assert not (tmp_path / "vocab").exists()


def test_local_processes_join_one_job_on_localhost(data_dir, tmp_path):
  lines = dry_run("local.sh", ["--gin.TRAIN_STEPS=5"], DATA_DIR=str(data_dir), EVAL="0",
                  VOCAB_DIR=str(tmp_path / "vocab"), PY="python", PROCESSES="3", PORT="4567")
  trains = lines[1:]
  assert len(trains) == 3
  for i, words in enumerate(trains):
    assert words[:2] == ["env", "XLA_FLAGS=--xla_force_host_platform_device_count=1"]
    assert words[2:5] == ["python", "-m", "vmsst.train"] and words[-1] == "&"
    assert option(words, "--coordinator_address") == "localhost:4567"
    assert option(words, "--num_processes") == "3"
    assert option(words, "--process_id") == str(i)
  # The same training arguments in every process.
  assert len({tuple(w for w in words if not w.startswith("--process_id")) for words in trains}) == 1
  assert "positive integer" in failure("local.sh", [], DATA_DIR=str(data_dir), PROCESSES="two")


def test_local_takes_the_vocabulary_size_from_the_run_file(data_dir, tmp_path):
  lines = dry_run("local.sh", ["--gin_file=gin/runs/contrastive_cpu_20min.gin"],
                  DATA_DIR=str(data_dir), TASKS_DIR=str(tmp_path / "tasks"), PY="python")
  train = next(line for line in lines if line[2] == "vmsst.train")
  if not (ROOT / "runs/vocab32000/spm.model").exists():  # else trained once already
    assert option(lines[0], "--vocab_size") == "32000"
    assert option(lines[0], "--output") == "runs/vocab32000/spm"
  assert "--gin.VOCAB_SIZE=32000" in train
  assert "--gin.VOCAB_PATH='runs/vocab32000/spm.model'" in train
  # The main job keeps base_cpu.gin's 8,000 pieces in runs/vocab.
  main = dry_run("local.sh", [], DATA_DIR=str(data_dir), EVAL="0", PY="python")
  assert "--gin.VOCAB_SIZE=8000" in main[-1] and "--gin.VOCAB_PATH='runs/vocab/spm.model'" in main[-1]


def test_slurm_mine_starts_a_dask_cluster_and_mines_on_it(tmp_path):
  args = ["--src=/shared/de/*.gz", "--trg=/shared/en/*.gz", "--output=/shared/mined",
          "--index=ivf", "--threshold=1.06"]
  schedule = str(tmp_path / "dask scheduler.json")  # a space: quoted through every line
  start, mine, stop = dry_run("slurm_mine.sh", args, WORKERS="3", CORES="4", PARTITION="cpu",
                              SCHEDULER_FILE=schedule, PY=sys.executable)
  assert start[:2] == [sys.executable, "launch/slurm_dask_cluster.py"] and start[-1] == "&"
  assert option(start, "--workers") == "3" and option(start, "--scheduler_file") == schedule
  waits, run = mine[:mine.index("done;") + 1], mine[mine.index("done;") + 1:]
  assert waits[:3] == ["until", "[[", "-s"] and waits[3] == schedule
  assert run == [sys.executable, "-m", "vmsst.mine_beam", *args, "--runner=DaskRunner",
                 f"--dask_scheduler_file={schedule}"]
  assert stop == ["kill", "%1"]
  # Line 1 for real up to the submission: dask-jobqueue's worker job script.
  script = subprocess.run([*start[:-1], "--job_script"], cwd=ROOT, capture_output=True,
                          text=True, timeout=120, check=True).stdout
  assert "#SBATCH -p cpu" in script and "#SBATCH --cpus-per-task=4" in script
  assert f"{sys.executable} -m distributed.cli.dask_worker" in script
  assert "--nthreads 4" in script and not (tmp_path / "dask scheduler.json").exists()


def test_slurm_mine_rejects_bad_worker_counts():
  assert "positive integers" in failure("slurm_mine.sh", [], WORKERS="0")
  assert "positive integers" in failure("slurm_mine.sh", [], CORES="many")
