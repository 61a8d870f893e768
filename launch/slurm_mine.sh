#!/usr/bin/env bash
# Bitext mining on a SLURM cluster: `python -m vmsst.mine_beam` on Beam's Dask runner, over a
# Dask cluster whose workers are Slurm jobs (dask-jobqueue's SLURMCluster). Three lines:
#   1. start the cluster (launch/slurm_dask_cluster.py): its scheduler in a process here,
#      WORKERS sbatch jobs of one Dask worker each; its address goes to SCHEDULER_FILE;
#   2. once that file is there, run the pipeline on it (--runner=DaskRunner
#      --dask_scheduler_file, Beam's own flags);
#   3. stop the cluster (dask-jobqueue cancels its jobs).
# Run it where a process may stay up for the whole mining (a login node in tmux, or a small
# job): the scheduler lives in line 1's process. Rerunning resumes from --output's stages.
#
#   WORKERS=32 CORES=8 MEMORY=64GB PARTITION=cpu bash launch/slurm_mine.sh \
#       --src='/shared/crawl/de/*.gz' --trg='/shared/crawl/en/*.gz' \
#       --saved_model=/shared/export --output=/shared/mined --index=ivf --sq8 --shards=256
#
# Every argument goes to vmsst.mine_beam unchanged (paths on the shared filesystem, or gs://).
# Needs dask[distributed] (the `cache` extra) and `pip install dask-jobqueue` in PY.
# Environment:
#   WORKERS (default 4)   worker jobs; CORES (default 8) threads and CPUs of each
#   MEMORY (default 32GB) each worker job's memory
#   PARTITION, ACCOUNT    the worker jobs' sbatch -p / -A, when set
#   TIME                  the worker jobs' wall-clock limit (default 24:00:00)
#   REPO_DIR              the checkout on the shared filesystem (default: this one)
#   PY                    python with vmsst installed (default REPO_DIR/.venv/bin/python)
#   SCHEDULER_FILE        default REPO_DIR/runs/slurm/dask-scheduler.json
#   DRY_RUN=1             prints the three lines, starts and submits nothing
set -euo pipefail
cd "$(dirname "$0")/.."

WORKERS=${WORKERS:-4}
CORES=${CORES:-8}
MEMORY=${MEMORY:-32GB}
TIME=${TIME:-24:00:00}
REPO_DIR=${REPO_DIR:-$(pwd)}
PY=${PY:-$REPO_DIR/.venv/bin/python}
SCHEDULER_FILE=${SCHEDULER_FILE:-$REPO_DIR/runs/slurm/dask-scheduler.json}

for n in "$WORKERS" "$CORES"; do
  if [[ ! "$n" =~ ^[1-9][0-9]*$ ]]; then
    echo "error: WORKERS and CORES must be positive integers, got '$n'." >&2
    exit 2
  fi
done

cluster_args=(--workers="$WORKERS" --cores="$CORES" --memory="$MEMORY" --walltime="$TIME"
              --python="$PY" --scheduler_file="$SCHEDULER_FILE")
[[ -z "${PARTITION:-}" ]] || cluster_args+=(--partition="$PARTITION")
[[ -z "${ACCOUNT:-}" ]] || cluster_args+=(--account="$ACCOUNT")
printf -v start_cluster '%q ' "$PY" launch/slurm_dask_cluster.py "${cluster_args[@]}"
printf -v mine '%q ' "$PY" -m vmsst.mine_beam "$@" --runner=DaskRunner \
    --dask_scheduler_file="$SCHEDULER_FILE"
printf -v wait_file '%q' "$SCHEDULER_FILE"

if [[ "${DRY_RUN:-0}" == 1 ]]; then
  echo "${start_cluster% } &"
  echo "until [[ -s $wait_file ]]; do sleep 5; done; ${mine% }"
  echo "kill %1"
  exit 0
fi
mkdir -p "$(dirname "$SCHEDULER_FILE")"
rm -f "$SCHEDULER_FILE"  # a file left by an earlier cluster names a scheduler that is gone
eval "${start_cluster% } &"
trap 'kill %1' EXIT
until [[ -s "$SCHEDULER_FILE" ]]; do sleep 5; done; eval "${mine% }"
