r"""Nested (Matryoshka) dimensions on CPU: held-out retrieval at each prefix size.

For each objective, trains its CPU run file (gin/runs/<objective>_cpu.gin) and
the same with nested sizes (gin/runs/<objective>_cpu_matryoshka.gin), same
steps, batch and seed, then embeds the held-out retrieval sets (NTREX
validation and Multi30k test 2016, as the in-training evaluation,
tasks/sources/heldout.py) and scores retrieval (×100, mean of both directions, mean
over the sets) with every embedding cut to each size by
`Encoder.encode(..., truncate_dim=k)`. Writes OUTPUT/results.json and
OUTPUT/README.md (the table, the budget and this command).

  .venv/bin/python bench/matryoshka.py --vocab=runs/vocab/spm.model \
      --work=runs/matryoshka --output=docs/results/matryoshka --steps=400

A finished run (its checkpoint at --steps) is not trained again.
"""

import json
import subprocess
import sys
import time

from absl import app
from absl import flags

from vmsst.base import files

FLAGS = flags.FLAGS

def _define_flags() -> None:
  """Under __main__ only: bench scripts are imported side by side by the tests."""
  flags.DEFINE_string("vocab", "runs/vocab/spm.model", "SentencePiece model (python -m vmsst.vocabulary).")
  flags.DEFINE_string("data_dir", "../shared/data", "NTREX-128 and Multi30k.")
  flags.DEFINE_string("work", "runs/matryoshka", "Where the runs are trained.")
  flags.DEFINE_string("output", "docs/results/matryoshka", "Where results.json and README.md go.")
  flags.DEFINE_list("objectives", ["contrastive", "vmsst"], "Objectives with a _cpu_matryoshka.gin.")
  flags.DEFINE_integer("steps", 400, "Training steps of every run.")
  flags.DEFINE_integer("seed", 0, "Training seed of every run.")
  flags.DEFINE_list("sizes", ["16", "32", "64", "128"], "Prefix sizes evaluated.")
  flags.DEFINE_integer("max_pairs", 500, "Pairs per held-out set (the run files' own 500).")

VARIANTS = {"plain": "_cpu", "nested": "_cpu_matryoshka"}


def train(objective: str, variant: str, model_dir: str) -> float | None:
  """Trains one run unless its last checkpoint is there; wall seconds (None: skipped)."""
  if files.exists(files.join(model_dir, "checkpoints", str(FLAGS.steps))):
    return None
  command = [sys.executable, "-m", "vmsst.train",
             f"--gin_file=gin/runs/{objective}{VARIANTS[variant]}.gin",
             f"--gin.MODEL_DIR='{model_dir}'", f"--gin.TRAIN_STEPS={FLAGS.steps}",
             f"--gin.VOCAB_PATH='{FLAGS.vocab}'", f"--gin.DATA_DIR='{FLAGS.data_dir}'",
             f"--gin.train.seed={FLAGS.seed}", "--gin.train.eval_every=0"]
  print(" ".join(command), flush=True)
  start = time.time()
  subprocess.run(command, check=True)
  return time.time() - start


def retrieval(model_dir: str, sizes: list[int]) -> dict[int, dict[str, float]]:
  """Size -> {set name: accuracy ×100, "mean"} of the run's last checkpoint."""
  import numpy as np  # pylint: disable=import-outside-toplevel
  from vmsst.encoding.api import Encoder  # pylint: disable=import-outside-toplevel
  from vmsst.evaluation import tatoeba  # pylint: disable=import-outside-toplevel
  from vmsst_tasks.sources import heldout  # pylint: disable=import-outside-toplevel
  encoder = Encoder.from_checkpoint(model_dir)
  sets = heldout.retrieval_sets(FLAGS.data_dir, max_pairs=FLAGS.max_pairs)
  results = {}
  for k in sizes:
    per_set = {}
    for name, (src, trg) in sets.items():
      a = encoder.encode(list(src), truncate_dim=k)
      b = encoder.encode(list(trg), truncate_dim=k)
      per_set[name] = 50.0 * (tatoeba.retrieval_accuracy(a, b) + tatoeba.retrieval_accuracy(b, a))
    per_set["mean"] = float(np.mean(list(per_set.values())))
    results[k] = per_set
  return results


def render(results: dict, sizes: list[int], seconds: dict, command: str) -> str:
  """README.md: one table per objective (size × plain / nested), the budget, the command."""
  lines = ["# Nested (Matryoshka) dimensions: held-out retrieval at each size", "",
           "Held-out retrieval accuracy ×100 (mean of both directions, mean over NTREX "
           "validation and Multi30k test 2016 sets, tasks/sources/heldout.py, "
           f"{FLAGS.max_pairs} pairs each) of each run's embedding cut to its first k "
           "dimensions (`Encoder.encode(..., truncate_dim=k)`). *plain*: the objective's "
           "CPU run file; *nested*: the same with `NestedDims.sizes = "
           f"{sizes}` (gin/runs/<objective>_cpu_matryoshka.gin). Same budget for both: "
           f"{FLAGS.steps} steps of batch 32 (the cpu preset's tiny model, d = 128), "
           f"seed {FLAGS.seed}, on a shared 2-core CPU.", ""]
  for objective, runs in results.items():
    lines += [f"## {objective}", "", "| k | plain | nested | nested − plain |",
              "|---|---|---|---|"]
    for k in sizes:
      plain, nested = runs["plain"][str(k)]["mean"], runs["nested"][str(k)]["mean"]
      lines.append(f"| {k} | {plain:.1f} | {nested:.1f} | {nested - plain:+.1f} |")
    times = ", ".join(f"{v}: {seconds[objective][v]}" for v in VARIANTS)
    lines += ["", f"Wall time of each training command (s): {times}; on the 2-core machine "
              "shared with six other engineers' jobs (load average 14 to 21), so not a speed "
              "measurement.", ""]
  lines += ["Per-set figures: results.json.", "", "Generated by:", "", "```", command, "```", ""]
  return "\n".join(lines)


def main(argv):
  del argv
  sizes = [int(k) for k in FLAGS.sizes]
  record_path = files.join(FLAGS.output, "results.json")
  record = json.loads(files.read_text(record_path)) if files.exists(record_path) else {}
  results, seconds = record.get("results", {}), record.get("train_seconds", {})
  for objective in FLAGS.objectives:
    for variant in VARIANTS:
      model_dir = files.join(FLAGS.work, objective, variant)
      took = train(objective, variant, model_dir)
      if took is not None:
        seconds.setdefault(objective, {})[variant] = round(took)
      seconds.setdefault(objective, {}).setdefault(variant, "not recorded")
      results.setdefault(objective, {})[variant] = {
          str(k): v for k, v in retrieval(model_dir, sizes).items()}
  command = ("python bench/matryoshka.py " + " ".join(
      f"--{name}={','.join(v) if isinstance(v, list) else v}"
      for name, v in (("vocab", FLAGS.vocab), ("work", FLAGS.work), ("output", FLAGS.output),
                      ("objectives", FLAGS.objectives), ("steps", FLAGS.steps),
                      ("seed", FLAGS.seed), ("sizes", FLAGS.sizes))))
  files.makedirs(FLAGS.output)
  files.write_text(record_path, json.dumps(
      {"steps": FLAGS.steps, "batch_size": 32, "seed": FLAGS.seed, "sizes": sizes,
       "results": results, "train_seconds": seconds, "command": command}, indent=1))
  files.write_text(files.join(FLAGS.output, "README.md"), render(results, sizes, seconds, command))
  print(files.read_text(files.join(FLAGS.output, "README.md")))


if __name__ == "__main__":
  _define_flags()
  app.run(main)
