#!/usr/bin/env bash
# Cloud TPU VM pod launcher: the same `python -m vmsst.train --distributed`
# command, same gin file and bindings, on every worker of the slice
# (gcloud ... ssh --worker=all); jax.distributed.initialize() finds the peers
# from the TPU metadata, so no coordinator flags are needed.
#
#   TPU_NAME=vmsst-v4 ZONE=us-central2-b bash launch/tpu.sh [create] [install] [train] [delete] \
#       --gin_file=gin/runs/vmsst_6l_paper.gin --gin.MODEL_DIR="'gs://bucket/vmsst_6l'" \
#       --gin.OPUS_DIR="'/data/opus'" --gin.VOCAB_PATH="'/data/spm/mt5_langs.model'"
#
# Actions run in the order given (default: train); `install` runs
# `pip install -e '.[tpu]'` in the checkout on every worker (the stack, libtpu, and
# google-cloud-storage, which orbax needs for a gs:// MODEL_DIR). Every argument starting
# with -- goes to vmsst.train unchanged (quoted for the workers' shell).
# Environment:
#   TPU_NAME, ZONE      required: the TPU VM and its zone
#   PROJECT             gcloud project (default: gcloud's configured one)
#   ACCELERATOR_TYPE    the slice (default: the run file's target_slice, which
#                       `python -m vmsst.compile --print_slice` reads)
#   SKIP_PREFLIGHT=1    skips the preflight: before create or train, the train
#                       step is compiled here by the TPU compiler for that slice
#                       (python -m vmsst.compile, needs pip install -e '.[tpu]'),
#                       so an out-of-memory or sharding error costs minutes on
#                       this machine, not an hour on the pod
#   LOCAL_PY            this machine's python for the preflight (default
#                       .venv/bin/python if present, else python3)
#   RUNTIME_VERSION     for create (default tpu-ubuntu2204-base)
#   REPO_DIR            the checkout on every worker, relative to its home
#                       (default vmsst; install it first, e.g. with
#                       `gcloud compute tpus tpu-vm ssh --worker=all`)
#   PY                  the workers' python (default python3)
#   DRY_RUN=1           prints the gcloud commands instead of running them
set -euo pipefail
cd "$(dirname "$0")/.."

RUNTIME_VERSION=${RUNTIME_VERSION:-tpu-ubuntu2204-base}
REPO_DIR=${REPO_DIR:-vmsst}
PY=${PY:-python3}
if [[ -z "${LOCAL_PY:-}" ]]; then
  if [[ -x .venv/bin/python ]]; then LOCAL_PY=.venv/bin/python; else LOCAL_PY=python3; fi
fi

actions=()
gin_file=gin/runs/vmsst_6l_paper.gin
train_args=()
for arg in "$@"; do
  case "$arg" in
    create|install|train|delete) actions+=("$arg") ;;
    --gin_file=*) gin_file=${arg#--gin_file=} ;;
    --*) train_args+=("$arg") ;;
    *) echo "error: unknown action '$arg' (create, install, train or delete)" >&2; exit 2 ;;
  esac
done
[[ ${#actions[@]} -gt 0 ]] || actions=(train)

if [[ -z "${TPU_NAME:-}" || -z "${ZONE:-}" ]]; then
  echo "error: set TPU_NAME and ZONE (e.g. TPU_NAME=vmsst-v4 ZONE=us-central2-b)." >&2
  exit 2
fi
if [[ ! -f "$gin_file" ]]; then
  echo "error: $gin_file not found (the workers run the same path inside \$HOME/$REPO_DIR)." >&2
  exit 2
fi

# The slice: ACCELERATOR_TYPE, else the one the run file names.
num_slices=1
if [[ -z "${ACCELERATOR_TYPE:-}" ]]; then
  read -r ACCELERATOR_TYPE num_slices < <("$LOCAL_PY" -m vmsst.compile --gin_file="$gin_file" \
      --print_slice ${train_args[@]+"${train_args[@]}"}) || {
    echo "error: $gin_file names no slice (target_slice.accelerator_type); set ACCELERATOR_TYPE" >&2
    exit 2; }
fi

# Preflight: compile the step for the slice here before it is created or used.
if [[ "${SKIP_PREFLIGHT:-0}" != 1 ]] && [[ " ${actions[*]} " =~ " create " || " ${actions[*]} " =~ " train " ]]; then
  echo "preflight: compiling $gin_file for $ACCELERATOR_TYPE x $num_slices (SKIP_PREFLIGHT=1 skips)" >&2
  if ! "$LOCAL_PY" -m vmsst.compile --gin_file="$gin_file" --topology="$ACCELERATOR_TYPE" \
      --num_slices="$num_slices" ${train_args[@]+"${train_args[@]}"} >&2; then
    echo "error: preflight failed: the train step does not compile or fit on $ACCELERATOR_TYPE (above); nothing was created" >&2
    exit 3
  fi
fi

if [[ "$num_slices" != 1 && " ${actions[*]} " =~ " create " ]]; then
  echo "error: the run is written for $num_slices slices of $ACCELERATOR_TYPE; create them as one" \
       "multislice (gcloud compute tpus queued-resources create --node-count=$num_slices), then train" >&2
  exit 2
fi

where=(--zone="$ZONE")
[[ -z "${PROJECT:-}" ]] || where+=(--project="$PROJECT")

run() {
  if [[ "${DRY_RUN:-0}" == 1 ]]; then printf '%q ' "$@"; echo; else "$@"; fi
}

# The workers' shell parses --command once: each word is quoted for it.
printf -v remote '%q ' cd "$REPO_DIR"
printf -v train_cmd '%q ' "$PY" -m vmsst.train --distributed --gin_file="$gin_file" \
    ${train_args[@]+"${train_args[@]}"}
printf -v install_cmd '%q ' "$PY" -m pip install -e ".[tpu]"
install="${remote}&& ${install_cmd% }"
remote="${remote}&& ${train_cmd% }"

for action in "${actions[@]}"; do
  case "$action" in
    create) run gcloud compute tpus tpu-vm create "$TPU_NAME" "${where[@]}" \
                --accelerator-type="$ACCELERATOR_TYPE" --version="$RUNTIME_VERSION" ;;
    install) run gcloud compute tpus tpu-vm ssh "$TPU_NAME" "${where[@]}" --worker=all \
                 --command="$install" ;;
    train) run gcloud compute tpus tpu-vm ssh "$TPU_NAME" "${where[@]}" --worker=all \
               --command="$remote" ;;
    delete) run gcloud compute tpus tpu-vm delete "$TPU_NAME" "${where[@]}" --quiet ;;
  esac
done
