#!/usr/bin/env bash
# Cloud TPU VM pod launcher: the same `python -m vmsst.train --distributed`
# command, same gin file and bindings, on every worker of the slice
# (gcloud ... ssh --worker=all); jax.distributed.initialize() finds the peers
# from the TPU metadata, so no coordinator flags are needed.
#
#   TPU_NAME=vmsst-v4 ZONE=us-central2-b bash launch/tpu.sh [create] [train] [delete] \
#       --gin_file=gin/runs/vmsst_6l_paper.gin --gin.MODEL_DIR="'gs://bucket/vmsst_6l'" \
#       --gin.OPUS_DIR="'/data/opus'" --gin.VOCAB_PATH="'/data/spm/mt5_langs.model'"
#
# Actions run in the order given (default: train). Every argument starting
# with -- goes to vmsst.train unchanged (quoted for the workers' shell).
# Environment:
#   TPU_NAME, ZONE      required: the TPU VM and its zone
#   PROJECT             gcloud project (default: gcloud's configured one)
#   ACCELERATOR_TYPE    for create (default v4-32: 4 hosts x 4 chips)
#   RUNTIME_VERSION     for create (default tpu-ubuntu2204-base)
#   REPO_DIR            the checkout on every worker, relative to its home
#                       (default vmsst; install it first, e.g. with
#                       `gcloud compute tpus tpu-vm ssh --worker=all`)
#   PY                  the workers' python (default python3)
#   DRY_RUN=1           prints the gcloud commands instead of running them
set -euo pipefail
cd "$(dirname "$0")/.."

ACCELERATOR_TYPE=${ACCELERATOR_TYPE:-v4-32}
RUNTIME_VERSION=${RUNTIME_VERSION:-tpu-ubuntu2204-base}
REPO_DIR=${REPO_DIR:-vmsst}
PY=${PY:-python3}

actions=()
gin_file=gin/runs/vmsst_6l_paper.gin
train_args=()
for arg in "$@"; do
  case "$arg" in
    create|train|delete) actions+=("$arg") ;;
    --gin_file=*) gin_file=${arg#--gin_file=} ;;
    --*) train_args+=("$arg") ;;
    *) echo "error: unknown action '$arg' (create, train or delete)" >&2; exit 2 ;;
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

where=(--zone="$ZONE")
[[ -z "${PROJECT:-}" ]] || where+=(--project="$PROJECT")

run() {
  if [[ "${DRY_RUN:-0}" == 1 ]]; then printf '%q ' "$@"; echo; else "$@"; fi
}

# The workers' shell parses --command once: each word is quoted for it.
printf -v remote '%q ' cd "$REPO_DIR"
printf -v train_cmd '%q ' "$PY" -m vmsst.train --distributed --gin_file="$gin_file" \
    ${train_args[@]+"${train_args[@]}"}
remote="${remote}&& ${train_cmd% }"

for action in "${actions[@]}"; do
  case "$action" in
    create) run gcloud compute tpus tpu-vm create "$TPU_NAME" "${where[@]}" \
                --accelerator-type="$ACCELERATOR_TYPE" --version="$RUNTIME_VERSION" ;;
    train) run gcloud compute tpus tpu-vm ssh "$TPU_NAME" "${where[@]}" --worker=all \
               --command="$remote" ;;
    delete) run gcloud compute tpus tpu-vm delete "$TPU_NAME" "${where[@]}" --quiet ;;
  esac
done
