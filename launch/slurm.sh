#!/usr/bin/env bash
# Multi-node GPU launcher (SLURM): writes an sbatch script that starts one
# `python -m vmsst.train --distributed` process per GPU on every node (srun),
# all with the same gin file and bindings, and submits it.
# jax.distributed.initialize() reads the job from the SLURM variables
# (coordinator = first node, process id = SLURM_PROCID, GPU = SLURM_LOCALID),
# so no coordinator flags are needed.
#
#   NODES=4 GPUS_PER_NODE=8 PARTITION=gpu bash launch/slurm.sh \
#       --gin_file=gin/runs/vmsst_6l_paper.gin --gin.MODEL_DIR="'/shared/runs/vmsst_6l'" \
#       --gin.OPUS_DIR="'/shared/opus'" --gin.VOCAB_PATH="'/shared/spm/mt5_langs.model'"
#
# Every argument goes to vmsst.train unchanged. BATCH_SIZE must divide over
# NODES x GPUS_PER_NODE processes, and make_mesh.model_parallelism must be 1
# here (one GPU per process; a model axis cannot span processes).
# Environment:
#   NODES (default 2), GPUS_PER_NODE (default 8), CPUS_PER_GPU (default 8)
#   PARTITION, ACCOUNT  passed to sbatch when set
#   TIME                wall-clock limit (default 72:00:00)
#   JOB_NAME            default: the gin file's name
#   REPO_DIR            the checkout on the shared filesystem (default: this one)
#   PY                  python with vmsst installed (default REPO_DIR/.venv/bin/python)
#   SCRIPT              where the sbatch script goes (default runs/slurm/JOB_NAME.sbatch)
#   DRY_RUN=1           prints the script and the sbatch command, writes and submits nothing
set -euo pipefail
cd "$(dirname "$0")/.."

NODES=${NODES:-2}
GPUS_PER_NODE=${GPUS_PER_NODE:-8}
CPUS_PER_GPU=${CPUS_PER_GPU:-8}
TIME=${TIME:-72:00:00}
REPO_DIR=${REPO_DIR:-$(pwd)}
PY=${PY:-$REPO_DIR/.venv/bin/python}

gin_file=gin/runs/vmsst_6l_paper.gin
train_args=()
for arg in "$@"; do
  case "$arg" in
    --gin_file=*) gin_file=${arg#--gin_file=} ;;
    *) train_args+=("$arg") ;;
  esac
done
for n in "$NODES" "$GPUS_PER_NODE" "$CPUS_PER_GPU"; do
  if [[ ! "$n" =~ ^[1-9][0-9]*$ ]]; then
    echo "error: NODES, GPUS_PER_NODE and CPUS_PER_GPU must be positive integers, got '$n'." >&2
    exit 2
  fi
done
if [[ ! -f "$gin_file" ]]; then
  echo "error: $gin_file not found (the nodes run the same path inside $REPO_DIR)." >&2
  exit 2
fi
JOB_NAME=${JOB_NAME:-$(basename "$gin_file" .gin)}
SCRIPT=${SCRIPT:-runs/slurm/$JOB_NAME.sbatch}

printf -v train_cmd '%q ' srun --kill-on-bad-exit=1 "$PY" -m vmsst.train --distributed \
    --gin_file="$gin_file" ${train_args[@]+"${train_args[@]}"}

script() {
  echo "#!/usr/bin/env bash"
  echo "#SBATCH --job-name=$JOB_NAME"
  echo "#SBATCH --nodes=$NODES"
  echo "#SBATCH --ntasks-per-node=$GPUS_PER_NODE"
  echo "#SBATCH --gpus-per-node=$GPUS_PER_NODE"
  echo "#SBATCH --cpus-per-task=$CPUS_PER_GPU"
  echo "#SBATCH --time=$TIME"
  echo "#SBATCH --output=$REPO_DIR/runs/slurm/%x-%j.out"
  [[ -z "${PARTITION:-}" ]] || echo "#SBATCH --partition=$PARTITION"
  [[ -z "${ACCOUNT:-}" ]] || echo "#SBATCH --account=$ACCOUNT"
  echo "set -euo pipefail"
  printf 'cd %q\n' "$REPO_DIR"
  echo "${train_cmd% }"
}

if [[ "${DRY_RUN:-0}" == 1 ]]; then
  script
  printf '%q ' sbatch "$SCRIPT"; echo
else
  mkdir -p "$(dirname "$SCRIPT")" "$REPO_DIR/runs/slurm"  # sbatch --output needs it
  script > "$SCRIPT"
  sbatch "$SCRIPT"
fi
