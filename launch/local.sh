#!/usr/bin/env bash
# Local CPU launcher: trains the vocabulary once, then runs one gin config.
#
#   bash launch/local.sh [--gin_file=gin/runs/X.gin] [--gin.TRAIN_STEPS=2000] ...
#
# Defaults: gin/runs/vmsst_cpu.gin, data from ../shared/data, vocabulary in
# runs/vocab/. Environment: DATA_DIR, VOCAB_SIZE, DRY_RUN=1 prints the commands
# instead of running them. For longer runs raise --gin.TRAIN_STEPS; for pods
# see launch/README.md (the same gin files run there).
set -euo pipefail
cd "$(dirname "$0")/.."

PY=${PY:-.venv/bin/python}
DATA_DIR=${DATA_DIR:-../shared/data}
VOCAB_DIR=${VOCAB_DIR:-runs/vocab}
VOCAB_SIZE=${VOCAB_SIZE:-8000}

gin_file=gin/runs/vmsst_cpu.gin
extra=()
for arg in "$@"; do
  case "$arg" in
    --gin_file=*) gin_file=${arg#--gin_file=} ;;
    *) extra+=("$arg") ;;
  esac
done

run() {
  if [[ "${DRY_RUN:-0}" == 1 ]]; then printf '%q ' "$@"; echo; else "$@"; fi
}

if [[ ! -d "$DATA_DIR/ntrex128" || ! -d "$DATA_DIR/multi30k" ]]; then
  echo "error: $DATA_DIR/ntrex128 and $DATA_DIR/multi30k are needed (set DATA_DIR)." >&2
  exit 2
fi

if [[ ! -f "$VOCAB_DIR/spm.model" ]]; then
  run "$PY" -m vmsst.vocabulary --data_dir="$DATA_DIR" --output="$VOCAB_DIR/spm" \
      --vocab_size="$VOCAB_SIZE"
fi

run "$PY" -m vmsst.train --gin_file="$gin_file" \
    --gin.DATA_DIR="'$DATA_DIR'" --gin.VOCAB_PATH="'$VOCAB_DIR/spm.model'" \
    --gin.VOCAB_SIZE="$VOCAB_SIZE" ${extra[@]+"${extra[@]}"}
