#!/usr/bin/env bash
# Local CPU launcher: trains the vocabulary once, runs one gin config, then
# evaluates the trained model on the benchmark suites.
#
#   bash launch/local.sh [--gin_file=gin/runs/X.gin] [--gin.TRAIN_STEPS=2000] ...
#
# Defaults: gin/runs/vmsst_cpu.gin, data from ../shared/data, vocabulary in
# runs/vocab/, model in runs/X (or --gin.MODEL_DIR), evaluation in MODEL_DIR/eval
# with the built BUCC-format, question-retrieval and clustering tasks in
# runs/eval_tasks.
# Environment: DATA_DIR, VOCAB_SIZE, SUITE (default: score, the suites of the
# paper's Score; all adds XNLI and clustering), EVAL=0 skips the
# evaluation, DRY_RUN=1 prints the commands instead of running them. For longer
# runs raise --gin.TRAIN_STEPS; for pods see launch/README.md.
# PROCESSES=N (default 1) trains with N local processes of one CPU device each,
# joined by --coordinator_address=localhost:PORT (default 12355): a rehearsal of
# a multi-host run (BATCH_SIZE must divide by N).
set -euo pipefail
cd "$(dirname "$0")/.."

PY=${PY:-.venv/bin/python}
DATA_DIR=${DATA_DIR:-../shared/data}

TASKS_DIR=${TASKS_DIR:-runs/eval_tasks}
SUITE=${SUITE:-score}

gin_file=gin/runs/vmsst_cpu.gin
model_dir=
extra=()
for arg in "$@"; do
  case "$arg" in
    --gin_file=*) gin_file=${arg#--gin_file=} ;;
    --gin.MODEL_DIR=*) model_dir=${arg#--gin.MODEL_DIR=}; model_dir=${model_dir//[\'\"]/};
                       extra+=("$arg") ;;
    *) extra+=("$arg") ;;
  esac
done
# The CPU run files name their directory after themselves (gin/runs/X.gin -> runs/X).
model_dir=${model_dir:-runs/$(basename "$gin_file" .gin)}
# The vocabulary size is the run file's own `VOCAB_SIZE = N` line when it has
# one (gin/runs/contrastive_cpu_20min.gin: 32,000), else base_cpu.gin's 8,000;
# each size has its own directory, so runs of either size share what was trained.
if [[ -z "${VOCAB_SIZE:-}" && -f "$gin_file" ]]; then
  VOCAB_SIZE=$(sed -n 's/^VOCAB_SIZE *= *\([0-9][0-9]*\).*/\1/p' "$gin_file" | tail -n 1)
fi
VOCAB_SIZE=${VOCAB_SIZE:-8000}
if [[ "$VOCAB_SIZE" == 8000 ]]; then VOCAB_DIR=${VOCAB_DIR:-runs/vocab};
else VOCAB_DIR=${VOCAB_DIR:-runs/vocab$VOCAB_SIZE}; fi

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

train=("$PY" -m vmsst.train --gin_file="$gin_file"
    --gin.DATA_DIR="'$DATA_DIR'" --gin.VOCAB_PATH="'$VOCAB_DIR/spm.model'"
    --gin.VOCAB_SIZE="$VOCAB_SIZE" ${extra[@]+"${extra[@]}"})
PROCESSES=${PROCESSES:-1}
if [[ ! "$PROCESSES" =~ ^[1-9][0-9]*$ ]]; then
  echo "error: PROCESSES must be a positive integer, got '$PROCESSES'." >&2
  exit 2
fi
if [[ "$PROCESSES" == 1 ]]; then
  run "${train[@]}"
else
  pids=()
  # Stops the processes started here if this script exits early.
  trap 'for pid in ${pids[@]+"${pids[@]}"}; do kill "$pid" 2>/dev/null || true; done' EXIT
  for ((i = 0; i < PROCESSES; i++)); do
    command=(env XLA_FLAGS=--xla_force_host_platform_device_count=1 "${train[@]}"
             --coordinator_address="localhost:${PORT:-12355}" --num_processes="$PROCESSES"
             --process_id="$i")
    if [[ "${DRY_RUN:-0}" == 1 ]]; then printf '%q ' "${command[@]}"; echo "&";
    else "${command[@]}" & pids+=($!); fi
  done
  for pid in ${pids[@]+"${pids[@]}"}; do wait "$pid"; done
  pids=()
fi

if [[ "${EVAL:-1}" == 1 ]]; then
  if [[ ! -d "$TASKS_DIR/bucc2018" ]]; then
    run "$PY" -m vmsst.build_bucc --data_dir="$DATA_DIR" --output="$TASKS_DIR"
  fi
  if [[ ! -d "$TASKS_DIR/question_retrieval" ]]; then
    run "$PY" -m vmsst.build_question_retrieval --data_dir="$DATA_DIR" --output="$TASKS_DIR"
  fi
  if [[ "$SUITE" == all && ! -d "$TASKS_DIR/mewsc16" ]]; then
    run "$PY" -m vmsst.build_clustering --data_dir="$DATA_DIR" --output="$TASKS_DIR"
  fi
  # The held-out retrieval curve (train.eval_every) next to the evaluation report.
  run "$PY" -m vmsst.learning_curves --model_dir="$model_dir" \
      --output="$model_dir/eval/learning_curve.png"
  run "$PY" -m vmsst.evaluate --model_dir="$model_dir" --data_dir="$DATA_DIR,$TASKS_DIR" \
      --suite="$SUITE" --training_languages=ntrex128 --output="$model_dir/eval"
fi
