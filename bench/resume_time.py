r"""Time to the first batch of a resumed run: a restored data position vs step 0 vs skipping.

  python bench/resume_time.py --data_dir=../shared/data --steps=5000 \
      --output=docs/results/resume_time

The make-train stream (vmsst_ntrex_multi30k, batch 32, length 32): one
process draws `--steps` batches and saves the stream position as training
does at a checkpoint (tasks/pipeline/input_pipeline.py); then fresh processes
each time `train_iterator(...)` to its first batch (imports and task
registration excluded, the same in all three):
  step 0            a new run;
  restored at N     the position saved at step N (what a resume does now);
  skipped to N      the old resume, replaying N batches through the pipeline.
Writes results.json and README.md (the table and this command) to --output.
"""

import json
import os
import pathlib
import statistics
import subprocess
import sys
import tempfile
import time

from absl import app
from absl import flags

import common

FLAGS = flags.FLAGS

MIXTURE, BATCH, LENGTH, SEED = "vmsst_ntrex_multi30k", 32, 32, 0
REPO = pathlib.Path(__file__).resolve().parents[1]

def _define_flags() -> None:
  """Under __main__ only: bench scripts are imported side by side by the tests."""
  flags.DEFINE_string("data_dir", str(REPO.parent / "shared" / "data"),
                      "../shared/data.")
  flags.DEFINE_string("vocab", None,
                      "SentencePiece model (default: one trained here).")
  flags.DEFINE_integer("steps", 5000,
                      "The large step N resumed at.")
  flags.DEFINE_integer("repeats", 3,
                      "Fresh processes per measurement (the median is kept).")
  flags.DEFINE_string("output", str(REPO / "docs" / "results" / "resume_time"),
                      "Directory of the results.")
  flags.DEFINE_string("phase",
                      "main",
                      "main, or a subprocess's phase (internal).")
  flags.DEFINE_integer("start_step", 0,
                      "Step a subprocess resumes at (internal).")
  flags.DEFINE_string("positions", None,
                      "Saved data positions' directory (internal).")


def _register(data_dir: str, vocab: str) -> None:
  from vmsst_tasks import registry  # pylint: disable=import-outside-toplevel
  from vmsst_tasks.registry import pairs  # pylint: disable=import-outside-toplevel
  registry.register_families([pairs.pair_tasks], data_dir=data_dir, vocabulary_path=vocab)


def _iterator(start_step: int, position: str | None):
  """The stream; resumed at `start_step` from the position saved in the folder `position`."""
  from vmsst_tasks.pipeline import input_pipeline  # pylint: disable=import-outside-toplevel
  return input_pipeline.train_iterator(
      MIXTURE, batch_size=BATCH, sequence_length=LENGTH, seed=SEED, start_step=start_step,
      restore_position=position and (lambda fresh: fresh.restore(position)))


def first_batch(args) -> None:
  """(subprocess) Prints {"seconds", "restored"} for one resume."""
  _register(args.data_dir, args.vocab)
  started = time.perf_counter()
  batches = _iterator(args.start_step, args.positions)
  batch = next(batches)
  print(json.dumps({"seconds": time.perf_counter() - started,
                    "restored": batches.restored_from is not None,
                    "first_tokens": batch["tokens_a"][0, :4].tolist()}))


def save_at(args) -> None:
  """(subprocess) Draws --steps batches, saves the position; prints the next batch's tokens."""
  _register(args.data_dir, args.vocab)
  batches = _iterator(0, None)
  started = time.perf_counter()
  for _ in range(args.steps):
    next(batches)
  drawn = time.perf_counter() - started
  started = time.perf_counter()
  batches.save(args.positions)  # what a checkpoint's data position item holds
  saved = time.perf_counter() - started
  size = sum(p.stat().st_size for p in pathlib.Path(args.positions).rglob("*") if p.is_file())
  print(json.dumps({"draw_seconds": drawn, "save_seconds": saved, "position_bytes": size,
                    "next_tokens": next(batches)["tokens_a"][0, :4].tolist()}))


def _child(args, phase: str, **flags) -> dict:
  command = [sys.executable, __file__, f"--phase={phase}", f"--data_dir={args.data_dir}",
             f"--vocab={args.vocab}", f"--steps={args.steps}"]
  command += [f"--{k}={v}" for k, v in flags.items()]
  done = subprocess.run(command, capture_output=True, text=True, check=False,
                        env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"))
  if done.returncode:
    raise RuntimeError(f"{command} exited {done.returncode}:\n{done.stderr[-3000:]}")
  return json.loads(done.stdout.strip().splitlines()[-1])


def main(argv) -> None:
  del argv
  args = FLAGS
  if args.phase == "first_batch":
    return first_batch(args)
  if args.phase == "save_at":
    return save_at(args)
  with tempfile.TemporaryDirectory() as tmp:
    args.vocab = args.vocab or common.tiny_vocabulary(args.data_dir, tmp)
    positions = os.path.join(tmp, "data_position")
    saved = _child(args, "save_at", positions=positions)
    cases = {"step 0": {"start_step": 0},
             f"restored at {args.steps}": {"start_step": args.steps, "positions": positions},
             f"skipped to {args.steps}": {"start_step": args.steps}}
    trials = {name: [] for name in cases}
    for _ in range(args.repeats):  # interleaved: the shared machine's load hits all alike
      for name, flags in cases.items():
        trials[name].append(_child(args, "first_batch", **flags))
    runs = {name: {**t[0], "seconds": statistics.median(r["seconds"] for r in t),
                   "trials": [r["seconds"] for r in t]} for name, t in trials.items()}
  restored, skipped = runs[f"restored at {args.steps}"], runs[f"skipped to {args.steps}"]
  assert restored["restored"] and not skipped["restored"]
  assert restored["first_tokens"] == skipped["first_tokens"] == saved["next_tokens"]
  step0 = runs["step 0"]["seconds"]
  rows = [f"| {name} | {r['seconds']:.2f} | {r['seconds'] / step0:.2f} | "
          f"{', '.join(f'{t:.1f}' for t in r['trials'])} |" for name, r in runs.items()]
  results = {**common.machine(), "mixture": MIXTURE, "batch": BATCH, "length": LENGTH,
             "steps": args.steps, "runs": runs, "position": saved,
             "restored_over_step0": restored["seconds"] / step0,
             "skipped_over_step0": skipped["seconds"] / step0}
  out = pathlib.Path(args.output)
  out.mkdir(parents=True, exist_ok=True)
  (out / "results.json").write_text(json.dumps(results, indent=1) + "\n")
  command = "python bench/resume_time.py " + " ".join(
      a for a in sys.argv[1:] if not a.startswith("--vocab"))
  (out / "README.md").write_text(
      "# Time to the first batch of a resumed run\n\n"
      f"The make-train stream ({MIXTURE}, batch {BATCH}, length {LENGTH}), first batch of a "
      "fresh process after task registration; the same batch in both resumes (checked). "
      f"Median of {args.repeats} fresh processes per case, run interleaved.\n\n"
      "| resume | seconds (median) | / step 0 | trials (s) |\n|---|---:|---:|---|\n"
      + "\n".join(rows) + "\n\n"
      f"The saved position: {saved['position_bytes'] / 1e6:.1f} MB, written in "
      f"{saved['save_seconds']:.2f} s (drawing the {args.steps} batches took "
      f"{saved['draw_seconds']:.0f} s). Machine: {results['cores']} cores, load average "
      f"{results['load_average']} (shared).\n\n"
      f"Command (from the repository root):\n\n    {command.strip()}\n")
  print((out / "README.md").read_text())


if __name__ == "__main__":
  _define_flags()
  app.run(main)
