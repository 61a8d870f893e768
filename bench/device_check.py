r"""The accelerator check: speed, a profile and a short comparison, in one command under 8 minutes.

  python bench/device_check.py --output=DIR [--parts=speed,profile,comparison] [--data=DATA]
      [--microbatches=N]
  python bench/device_check.py --prepare=DATA --data_dir=../shared/data    # here, once (seqio)
  python bench/device_check.py --output=DIR --quick --data=DATA            # a CPU rehearsal

Parts (each usable alone through --parts; docs/results/device/README.md has
the device command, what travels with it, and the figures):
- speed: each objective's real train step (vmsst.training.trainer) at the paper's
  6-layer random-init architecture, built from the run files' own gin files
  (gin/models/<objective>.gin + sizes/6l.gin + precision/bf16.gin: T5.1.1
  layers, d = 1024, vocabulary 250,112, length 32; bf16 compute, f32
  parameters, Adafactor as base_paper.gin binds it; the decoder's vocabulary
  head in tiles, NetworkConfig.vocab_tile_tokens), at the largest batch of
  2048, 1024, ... that fits: the step is first compiled (not run) at the two
  smallest, and XLA's memory_analysis of each, extrapolated linearly in the
  batch, estimates the largest that fits the device (an 80 GB one where it
  reports no limit), where the search starts (the estimate is in each row);
  examples/s, MFU from the model's FLOPs (vmsst.compiler.step.model_flops:
  unrolled, whole logits, lowered before XLA; the compiled step counts the
  tile loop's body once) against a bf16 matmul peak measured in the same
  process, the allocator's peak memory (one process per objective, so the
  peak is the objective's own); VMSST at the paper's batch 2048 in
  --microbatches accumulated microbatches (Trainer(microbatches=N)), in its
  own process; then sentence-transformers' MultipleNegativesRankingLoss at
  the same shape under bf16 autocast on the same GPU
  (bench/train_throughput.py's peer).
- profile: a jax.profiler trace of a few steps of the slowest objective,
  summarised to its top operations by device time (the trace stays behind).
- comparison: Contrastive, VMSST and BiTranslation at 6 layers, d = 512,
  batch 512, trained by `train` (vmsst.training.loop) from the pre-tokenized
  NTREX-128 + Multi30k stream in DATA for the same wall-clock budget each
  (counted from the first held-out evaluation, so compiling is not counted),
  held-out retrieval every `eval_every` steps and at the end, then the
  checkpoint's own embedding (vmsst.encoding.checkpoint, no SavedModel) of
  the held-out sets scored by the `parallel` suite's xsim.

Every part and objective runs in a child process with its own time limit;
the parent only schedules them, prints their progress and writes
DIR/device_check.json and DIR/device_check.md after each part, so a part
that runs out of time leaves the others' results. Needs JAX, flax, optax,
orbax, gin-config and sentencepiece: no TensorFlow or seqio (--prepare
alone needs them, to write DATA with `python -m vmsst.pretokenize`).
`--quick` shrinks every shape so the whole check rehearses on a CPU in under
a minute (tests/bench/test_device_check.py); it skips the PyTorch peer,
whose import alone takes longer than the rest.
"""

import json
import os
import subprocess
import sys
import time
from typing import Any, Sequence

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from absl import app  # pylint: disable=wrong-import-position
from absl import flags  # pylint: disable=wrong-import-position

import device_parts  # pylint: disable=wrong-import-position

FLAGS = flags.FLAGS
PARTS = ("speed", "profile", "comparison")
RESULTS_JSON, RESULTS_MD = "device_check.json", "device_check.md"


def _define_flags() -> None:
  flags.DEFINE_string("output", None, "Directory for device_check.json and device_check.md.")
  flags.DEFINE_list("parts", list(PARTS), f"Which of {PARTS} to run.")
  flags.DEFINE_string("data", ".device_carry/data",
                      "The comparison's data (--prepare writes it).")
  flags.DEFINE_bool("quick", False, "Tiny shapes and budgets: a CPU rehearsal in under a minute.")
  flags.DEFINE_string("prepare", None, "Write the comparison's data into this directory and "
                      "stop (needs seqio and --data_dir).")
  flags.DEFINE_string("data_dir", "../shared/data", "NTREX-128 and Multi30k (--prepare).")
  flags.DEFINE_list("objectives", list(device_parts.OBJECTIVES),
                    "The speed part's objectives (fewer of them: more time for each).")
  flags.DEFINE_bool("peer", True, "Time sentence-transformers' MultipleNegativesRankingLoss "
                    "after the speed part (--nopeer: leave its 40 s to the objectives).")
  flags.DEFINE_float("speed_seconds", None, "The speed part's budget in seconds, shared by its "
                     "objectives (default: BUDGETS in device_parts.py).")
  flags.DEFINE_integer("microbatches", 1, "The speed part also times VMSST at the paper's batch "
                       "(2048; --quick: 16) in this many accumulated microbatches "
                       "(Trainer(microbatches=N)), when --objectives has vmsst.")


def _child_command(kind: str, args: dict[str, Any]) -> list[str]:
  """A child runs bench/device_parts.py, not this file: its flags are not the parent's (the
  speed part imports vmsst.compile, which defines its own --output)."""
  return [sys.executable, os.path.abspath(device_parts.__file__), f"--child={kind}",
          f"--child_args={json.dumps(args)}"] + (["--quick"] if FLAGS.quick else [])


def run_child(kind: str, args: dict[str, Any], seconds: float) -> dict[str, Any]:
  """One piece of work in its own process, its output printed as it comes.

  Returns {"results": the RESULT lines it printed, "seconds", and "error" with
  the last lines when it failed or ran out of time}.
  """
  print(f"[device_check] {kind} {args} (at most {seconds:.0f} s)", flush=True)
  start = time.time()
  # Each child has the device alone: let JAX's pool take most of it (a larger batch fits).
  env = {"XLA_PYTHON_CLIENT_MEM_FRACTION": "0.92", **os.environ, "PYTHONUNBUFFERED": "1"}
  with subprocess.Popen(_child_command(kind, args), stdout=subprocess.PIPE,
                        stderr=subprocess.STDOUT, text=True, env=env) as process:
    results, tail = [], []
    try:
      for line in _lines_until(process, start + seconds):
        if line.startswith("RESULT "):
          results.append(json.loads(line[len("RESULT "):]))
        else:
          print(f"  {line}", end="" if line.endswith("\n") else "\n", flush=True)
          tail = (tail + [line.rstrip()])[-5:]
    finally:
      if process.poll() is None:
        process.kill()
    process.wait()
  took = time.time() - start
  done = {"results": results, "seconds": took}
  if process.returncode:
    done.update(error="out of time" if took >= seconds else f"exit status {process.returncode}",
                last_lines=tail)
  return done


def _one(done: dict[str, Any]) -> dict[str, Any]:
  """A child's single result, or its failure."""
  if done["results"]:
    return {**done["results"][0], "seconds": done["seconds"]}
  return {k: v for k, v in done.items() if k != "results"}


def _failure(done: dict[str, Any]) -> dict[str, Any]:
  return {k: v for k, v in done.items() if k not in ("results", "seconds")}


def _by_objective(done: dict[str, Any], objectives: Sequence[str]) -> list[dict[str, Any]]:
  """A child's per-objective results (the last of each), and its failure for each objective it
  did not reach or did not finish (a row without MFU: its estimate, or timing, and why)."""
  results = {r["objective"]: r for r in done["results"]}
  failure = _failure(done)
  return [{**results[o], **failure} if o in results and "mfu" not in results[o]
          else results.get(o, {"objective": o, **(failure or {"error": "no result"})})
          for o in objectives]


def _paper_rows(done: dict[str, Any]) -> list[dict[str, Any]]:
  """Takes the paper-batch rows (device_parts.paper_batch_row) out of a speed child's results."""
  rows = [r for r in done["results"] if r.get("paper_batch")]
  done["results"] = [r for r in done["results"] if not r.get("paper_batch")]
  return rows


def _lines_until(process: subprocess.Popen, deadline: float):
  """The child's output lines until it ends or `deadline` passes (then it is killed)."""
  import selectors  # pylint: disable=import-outside-toplevel
  selector = selectors.DefaultSelector()
  selector.register(process.stdout, selectors.EVENT_READ)
  while time.time() < deadline:
    if not selector.select(timeout=min(1.0, max(0.0, deadline - time.time()))):
      if process.poll() is not None:
        return
      continue
    line = process.stdout.readline()
    if not line:
      return
    yield line


def run_parts(out: str, parts: Sequence[str]) -> dict[str, Any]:
  """Every asked part within its budget; the results written after each."""
  budgets = dict(device_parts.QUICK_BUDGETS if FLAGS.quick else device_parts.BUDGETS)
  if FLAGS.speed_seconds:
    budgets["speed"] = FLAGS.speed_seconds
  results = {"quick": FLAGS.quick, "budgets_s": budgets, "microbatches": FLAGS.microbatches,
             "parts": {}}
  started = time.time()
  if "speed" in parts or "profile" in parts:
    speed = _speed(budgets) if "speed" in parts else {}
    if "speed" in parts:
      results["parts"]["speed"] = speed
      _write(out, results)
    if "profile" in parts:
      results["parts"]["profile"] = _one(run_child("profile", _slowest(speed),
                                                   budgets["profile"]))
      _write(out, results)
  if "comparison" in parts:
    results["parts"]["comparison"] = _comparison(budgets)
  results["total_seconds"] = time.time() - started
  _write(out, results)
  return results


def _speed(budgets: dict[str, float]) -> dict[str, Any]:
  """Each objective in its own process (quick: all in one), VMSST at the paper's batch in
  --microbatches microbatches (its own process; quick: the same one), then the PyTorch peer."""
  objectives = list(FLAGS.objectives)
  paper = {"microbatches": FLAGS.microbatches} if "vmsst" in objectives else None
  groups = [objectives] if FLAGS.quick else [[o] for o in objectives]
  children = len(groups) + (paper is not None and not FLAGS.quick)
  rows, deadline = [], time.time() + budgets["speed"]
  speed = {"rows": rows}
  for index, group in enumerate(groups):
    share = (deadline - time.time()) / (children - index)
    args = {"objectives": group, **({"paper_batch": paper} if FLAGS.quick and paper else {})}
    done = run_child("speed", args, share)
    paper_rows = _paper_rows(done)
    rows += _by_objective(done, group)
    if FLAGS.quick and paper:  # the same child's last row
      last = paper_rows[-1] if paper_rows else {"error": "no result"}
      speed["paper_batch"] = last if "mfu" in last else {**last, **_failure(done)}
  if paper is not None and not FLAGS.quick:
    speed["paper_batch"] = _paper_batch(rows, paper, deadline)
  contrastive = next((r for r in rows if r.get("objective") == "contrastive" and "batch" in r),
                     None)
  if FLAGS.quick:
    speed["peer"] = {"skipped": "quick mode: importing torch and sentence-transformers takes "
                                "longer than the rest of the rehearsal"}
  elif not FLAGS.peer:
    speed["peer"] = {"skipped": "--nopeer"}
  elif contrastive is not None:
    speed["peer"] = _one(run_child("peer", {"batch": contrastive["batch"]}, budgets["peer"]))
    if "pairs_per_s" in speed["peer"]:
      speed["peer"]["contrastive_over_peer"] = (contrastive["examples_per_s"]
                                                / speed["peer"]["pairs_per_s"])
  return speed


def _paper_batch(rows: list[dict[str, Any]], paper: dict[str, Any],
                 deadline: float) -> dict[str, Any]:
  """VMSST at the paper's batch in its own process, unless its row is there already (one
  microbatch) or its memory estimate says a microbatch cannot fit (no compile spent)."""
  batch, microbatches = device_parts.PAPER_BATCH[False], paper["microbatches"]
  vmsst = next((r for r in rows if r.get("objective") == "vmsst"), {})
  about = {"objective": "vmsst", "paper_batch": True, "batch": batch,
           "microbatches": microbatches, "microbatch": batch // microbatches}
  if microbatches == 1 and vmsst.get("batch") == batch and "examples_per_s" in vmsst:
    return {**about, "skipped": "the VMSST row is at the paper's batch already"}
  estimate = vmsst.get("memory_estimate")
  refused = device_parts.refuse_paper_batch(estimate, batch, microbatches)
  if refused:
    return {**about, "error": refused}
  done = run_child("speed", {"objectives": [],
                             "paper_batch": {**paper, "estimate": estimate}},
                   max(deadline - time.time(), 1.0))
  found = _paper_rows(done)
  if found and "mfu" in found[-1]:
    return {**found[-1], "seconds": done["seconds"]}
  return {**about, **(found[-1] if found else {}), **(_failure(done) or {}),
          "seconds": done["seconds"]}


def _slowest(speed: dict[str, Any]) -> dict[str, Any]:
  """The objective with the fewest examples/s and its batch (VMSST if speed did not run)."""
  timed = [r for r in speed.get("rows", []) if "examples_per_s" in r]
  if not timed:
    return {"objective": "vmsst"}
  row = min(timed, key=lambda r: r["examples_per_s"])
  return {"objective": row["objective"], "batch": row["batch"]}


def _comparison(budgets: dict[str, float]) -> dict[str, Any]:
  """The three objectives trained by `train` for the same budget each (quick: one process)."""
  objectives = list(device_parts.COMPARED)
  each = device_parts.COMPARISON_TRAIN_SECONDS[FLAGS.quick]
  args = {"data": os.path.abspath(FLAGS.data), "train_seconds": each}
  if FLAGS.quick:
    done = run_child("comparison", {**args, "objectives": objectives}, budgets["comparison"])
    runs = _by_objective(done, objectives)
  else:
    runs, deadline = [], time.time() + budgets["comparison"]
    for index, objective in enumerate(objectives):
      share = (deadline - time.time()) / (len(objectives) - index)
      runs += _by_objective(run_child("comparison", {**args, "objectives": [objective]}, share),
                            [objective])
  return {"train_seconds_each": each, "runs": {run.pop("objective"): run for run in runs}}


def _write(out: str, results: dict[str, Any]) -> None:
  from vmsst.base import files  # pylint: disable=import-outside-toplevel
  files.write_text(files.join(out, RESULTS_JSON), json.dumps(results, indent=1) + "\n")
  files.write_text(files.join(out, RESULTS_MD), device_parts.summary(results))


def main(argv: Sequence[str]) -> None:
  del argv
  if FLAGS.prepare:
    device_parts.prepare(FLAGS.prepare, FLAGS.data_dir)
    return
  if not FLAGS.output:
    raise app.UsageError("--output is required (where device_check.json and .md go)")
  unknown = sorted(set(FLAGS.parts) - set(PARTS))
  if unknown:
    raise app.UsageError(f"--parts: unknown {unknown}; pick from {PARTS}")
  paper_batch = device_parts.PAPER_BATCH[FLAGS.quick]
  if FLAGS.microbatches < 1 or paper_batch % FLAGS.microbatches:
    raise app.UsageError(f"--microbatches={FLAGS.microbatches}: give a divisor of the paper's "
                         f"batch {paper_batch}")
  unknown = sorted(set(FLAGS.objectives) - set(device_parts.OBJECTIVES))
  if unknown:
    raise app.UsageError(f"--objectives: unknown {unknown}; pick from "
                         f"{list(device_parts.OBJECTIVES)}")
  results = run_parts(FLAGS.output, FLAGS.parts)
  print(device_parts.summary(results), flush=True)


if __name__ == "__main__":
  _define_flags()
  app.run(main)
