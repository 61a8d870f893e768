r"""Every paper run compiled by the TPU compiler for the slice it names: docs/results/tpu_compile/.

  python bench/tpu_compile.py [--output=docs/results/tpu_compile] [--runs=vmsst_6l_paper,...] \
      [--jobs=2]

Runs `python -m vmsst.compile --gin_file=gin/runs/<run>.gin --output=...`
for each run file that names a slice (`target_slice.accelerator_type`), two
at a time (the compiler is mostly one thread), and writes `<run>.json` per
run and `README.md`: the table the project README shows, generated, with this
command and the compiler's version. Nothing runs on a TPU: peak memory and
FLOPs are the compiler's and the model's counts, the step time a lower bound
at the chip's bf16 peak, the days an estimate at 40% of it.
"""

import concurrent.futures
import json
import os
import pathlib
import re
import subprocess
import sys
import time
from importlib import metadata

from absl import app
from absl import flags

ROOT = pathlib.Path(__file__).resolve().parents[1]
GIB = 2.0 ** 30

# Values the step's shapes depend on that a run leaves to its user (its data or
# teacher); the stand-ins compiled here.
STAND_INS = {
    # The paper's teacher, SBERT bert-base-nli-stsb-mean-tokens, is 768 wide
    # (Reimers & Gurevych 2020, §4).
    "distillation_paper": ["TEACHER_DIM = 768"],
    # EASE's table has a row per entity of its 1M sampled pairs (§4.1: 64 x
    # 15,625 steps) at most, one hard negative per sentence (§3.2); ENTITY_DIR
    # is what the pipeline writes, absent here.
    "entity_contrastive_paper": ["EntityContrastive.entity_dir = None",
                                 "EntityContrastive.entity_vectors = None",
                                 "EntityContrastive.num_entities = 1000000",
                                 "EntityContrastive.num_hard_negatives = 1"],
}


def paper_runs() -> list[str]:
  """Run files naming a slice, in name order."""
  pattern = re.compile(r"^target_slice\.accelerator_type\s*=", re.M)
  return sorted(p.stem for p in (ROOT / "gin" / "runs").glob("*.gin")
                if pattern.search(p.read_text()))


def smallest_runs() -> list[str]:
  """Paper runs that also name the smallest slice their batch fits
  (`target_slice.smallest_accelerator_type`)."""
  pattern = re.compile(r"^target_slice\.smallest_accelerator_type\s*=", re.M)
  return [run for run in paper_runs()
          if pattern.search((ROOT / "gin" / "runs" / f"{run}.gin").read_text())]


SMALLEST_SUFFIX = ".smallest"  # <run>.smallest.json: the run compiled for its smallest slice


def compile_command(run: str, json_path: pathlib.Path,
                    reuse: pathlib.Path | None = None, smallest: bool = False) -> list[str]:
  """`vmsst.compile` for `run` (on its smallest slice with `smallest`); with `reuse`, its
  record there stands when the program is the one it was compiled from."""
  record = f"{run}{SMALLEST_SUFFIX if smallest else ''}.json"
  reusing = [f"--reuse={reuse / record}"] if reuse else []
  return [sys.executable, "-m", "vmsst.compile", f"--gin_file=gin/runs/{run}.gin",
          f"--output={json_path}", *reusing, *(["--topology=smallest"] if smallest else []),
          *[f"--gin_bindings={b}" for b in STAND_INS.get(run, [])]]


def compile_run(run: str, output: pathlib.Path, reuse: pathlib.Path | None = None,
                smallest: bool = False) -> dict:
  """One run's report (its JSON), or the failure's last lines."""
  json_path = output / f"{run}{SMALLEST_SUFFIX if smallest else ''}.json"
  start = time.time()
  result = subprocess.run(compile_command(run, json_path, reuse, smallest), cwd=ROOT,
                          capture_output=True, text=True, check=False)
  print(f"{run}: exit {result.returncode} after {time.time() - start:.0f} s", flush=True)
  if result.returncode not in (0, 3) or not json_path.exists():
    return {"run_file": f"gin/runs/{run}.gin", "error": result.stderr[-3000:],
            "exit": result.returncode}
  report = json.loads(json_path.read_text())
  report["exit"] = result.returncode
  json_path.write_text(json.dumps(report, indent=1))
  return report


def hosts(report: dict) -> int:
  """Hosts of the slice: 4 chips each, or one VM for the smallest slices."""
  return max(1, report["chips"] // 4)


def table(reports: list[dict]) -> str:
  lines = ["| run file | slice | peak HBM per chip | FLOPs per step (per chip) "
           "| step time at bf16 peak (lower bound) | days for 100k steps at 40% (estimate) "
           "| pairs/s per host at that bound |",
           "|---|---|---|---:|---:|---:|---:|"]
  for r in reports:
    name = f"`{pathlib.Path(r['run_file']).name}`" + (" (stale†)" if r.get("stale") else "")
    if "error" in r:
      lines.append(f"| {name} | failed to compile (exit {r['exit']}) | | | | | |")
      continue
    hbm = f"{r['hbm_bytes_per_chip'] / GIB:.0f} GiB"
    peak = (f"{r['peak_bytes_per_chip'] / GIB:.1f} of {hbm}" if r["fits"]
            else f"**does not fit** {hbm}" + (f" (needs {r['peak_bytes_per_chip'] / GIB:.1f})"
                                              if r["peak_bytes_per_chip"] else ""))
    step = r["lower_bound_step_seconds"]
    feed = r["batch_size"] / step / hosts(r)
    lines.append(f"| {name} | {r['slice']} (batch {r['batch_size']}) | {peak} "
                 f"| {r['model_flops_per_chip']:.2e} | {1e3 * step:.0f} ms "
                 f"| {r['estimated_days_100k_steps_at_40pct']:.2g} | {feed:,.0f} |")
  return "\n".join(lines)


def stale_runs(reports: list[dict]) -> str:
  """The footnote of the records marked stale (their JSON's "stale": why), grouped by why.

  A record is marked by hand when a change to its run (its layers, its memory
  switches) makes the compiled step another; recompiling writes a JSON
  without the mark.
  """
  why: dict[str, list[str]] = {}
  for r in reports:
    if r.get("stale"):
      why.setdefault(r["stale"], []).append(pathlib.Path(r["run_file"]).stem)
  if not why:
    return ""
  lines = [f"† Stale, {reason}" + (f": {', '.join(f'`{run}.gin`' for run in runs)}."
                                    if len(why) > 1 else ".") for reason, runs in why.items()]
  every = ",".join(run for runs in why.values() for run in runs)
  lines.append("Not yet recompiled; rerun one at a time: "
               f"`python bench/tpu_compile.py --runs={every} --jobs=1`.")
  return "\n" + "\n\n".join(lines) + "\n"


def missing_runs(reports: list[dict]) -> str:
  """The runs naming a slice that have no record here, said as such."""
  done = {pathlib.Path(r["run_file"]).stem for r in reports}
  missing = [run for run in paper_runs() if run not in done]
  if not missing:
    return ""
  return ("\nNot compiled here: " + ", ".join(f"`{run}.gin`" for run in missing) + ". "
          "Compile it alone: `python bench/tpu_compile.py --runs=<run> --jobs=1`.\n")


BASELINE = "whole_head_baseline.json"  # the decoding runs compiled with whole-logit heads


def smallest_table(smallest: list[dict], reports: list[dict], baseline: dict) -> str:
  """Each decoding run on its paper slice (whole-logit head, then tiled) and on the smallest
  slice it names, at the same batch."""
  on_paper = {pathlib.Path(r["run_file"]).stem: r for r in reports}
  gib = lambda x: f"{x / GIB:.1f}" if x else "-"
  lines = ["| run file | paper slice | peak there, whole logits → tiled | smallest slice "
           "| peak there (tiled) |", "|---|---|---|---|---|"]
  for r in smallest:
    run = pathlib.Path(r["run_file"]).stem
    old, new = baseline.get(run, {}), on_paper.get(run, {})
    stale = " (stale†)" if new.get("stale") else ""
    there = (f"{gib(r['peak_bytes_per_chip'])} of {r['hbm_bytes_per_chip'] / GIB:.0f} GiB"
             if r.get("fits") else "**does not fit**")
    lines.append(f"| `{run}.gin` | {new.get('slice', '-')} | "
                 f"{gib(old.get('peak_bytes_per_chip'))} → {gib(new.get('peak_bytes_per_chip'))}"
                 f" GiB{stale} | {r['slice']} (batch {r['batch_size']}) | {there} |")
  return "\n".join(lines)


def readme(reports: list[dict], command: str, smallest: list[dict] | None = None,
           baseline: dict | None = None) -> str:
  versions = ", ".join(f"{p} {metadata.version(p)}" for p in ("jax", "libtpu"))
  return f"""# Paper runs compiled by the TPU compiler

Every `gin/runs/*.gin` that names a slice (`target_slice.accelerator_type`),
compiled on a CPU machine by the TPU compiler ({versions}) for that slice: the
step `train` runs there (the run file's mesh, shardings, donation), state and
batch abstract. Generated by

    {command}

- **peak HBM per chip**: arguments + outputs − aliased + temporaries of the
  compiled per-chip program (`compiled.memory_analysis()`), against the chip's
  HBM. Per-run details (parameters, optimizer state, temporaries) are in
  `<run>.json`.
- **FLOPs per step**: the model's count (the step as written, layers unrolled,
  nothing rematerialised, XLA's cost analysis before optimisation) over the
  chips. The compiler's own count is in the JSON where it is complete (not
  under `scan_layers`: it counts a loop body once).
- **step time**: FLOPs per chip at the chip's bf16 peak (v4 275, v5e 197,
  v5p 459, v6e 918 TFLOP/s): a lower bound, nothing was run. **Days**: 100k
  steps at 40% of that peak, an estimate. **Pairs/s per host**: what each host's
  input pipeline must feed at that lower bound (4 chips per host).
- Stand-ins for values a run leaves to its user (`bench/tpu_compile.py`
  `STAND_INS`): distillation's teacher width 768; EASE's entity table 1M rows.

{table(reports)}
{stale_runs(reports)}{missing_runs(reports)}{smallest_section(smallest or [], reports, baseline or {})}"""


def smallest_section(smallest: list[dict], reports: list[dict], baseline: dict) -> str:
  if not smallest:
    return ""
  return f"""
## The decoding runs on fewer chips

The decoder's vocabulary head runs a tile of tokens at a time
(`NetworkConfig.vocab_tile_tokens`, vmsst/model/vocab_tiling.py), so no
[tokens, V] float32 logits exist beyond one tile. Each decoding run file names,
beside its paper slice, the smallest slice its batch fits with it
(`target_slice.smallest_accelerator_type`; `python -m vmsst.compile
--gin_file=RUN --topology=smallest` compiles for it). Peaks per chip; "whole
logits" is the record before the tiles (`{BASELINE}`), the rest `<run>.json`
and `<run>{SMALLEST_SUFFIX}.json` here. Generated by

    python bench/tpu_compile.py --smallest_runs=all

The model's FLOPs per step are unchanged (the same math, counted with whole
logits); the compiled step computes each tile's logits twice (forward, and
again in the backward instead of storing them): one more forward of the
head, 2 · tokens · 3d · V FLOPs per step. The compiler's own count is
incomplete under the tile loop (it counts a loop body once).

{smallest_table(smallest, reports, baseline)}
"""


FLAGS = flags.FLAGS


def _define_flags() -> None:
  """Under __main__ only: bench scripts are imported side by side by the tests."""
  flags.DEFINE_string("output", "docs/results/tpu_compile", "Directory of the results.")
  flags.DEFINE_list("runs", [], "Run names (gin/runs/<name>.gin; default: every one naming a "
                    "slice).")
  flags.DEFINE_integer("jobs", 2, "Compiles at a time.")
  flags.DEFINE_list("smallest_runs", [], "Runs to compile on the smallest slice their file "
                    "names (target_slice.smallest_accelerator_type) into "
                    "<run>.smallest.json; 'all': every run naming one. Alone, nothing else "
                    "is compiled.")
  flags.DEFINE_bool("readme_only", False, "Compile nothing: write README.md from the "
                    "records (<run>.json) there.")
  flags.DEFINE_string("reuse_records", None, "A directory of records (<run>.json): a run "
                      "whose step lowers to the program its record was compiled from takes "
                      "that record instead of a compile (what `make test` does).")


def main(argv) -> None:
  del argv
  output = (ROOT / FLAGS.output).resolve()
  output.mkdir(parents=True, exist_ok=True)
  runs = [] if FLAGS.readme_only else FLAGS.runs or paper_runs()
  if FLAGS.smallest_runs and not FLAGS.runs:
    runs = []  # only the smallest slices, unless --runs names runs too
  on_smallest = [] if FLAGS.readme_only else (
      smallest_runs() if FLAGS.smallest_runs == ["all"] else FLAGS.smallest_runs)
  jobs = [(run, False) for run in runs] + [(run, True) for run in on_smallest]
  with concurrent.futures.ThreadPoolExecutor(FLAGS.jobs) as pool:
    reuse = (ROOT / FLAGS.reuse_records).resolve() if FLAGS.reuse_records else None
    done = list(pool.map(lambda job: compile_run(job[0], output, reuse, job[1]), jobs))
  fresh = {run: r for (run, small), r in zip(jobs, done) if not small}
  print(table(list(fresh.values())))
  # The README covers every run: those compiled now, and the others' last JSON
  # (`--runs` recompiles some after a change to them).
  reports = [fresh.get(run) or json.loads((output / f"{run}.json").read_text())
             for run in paper_runs() if run in fresh or (output / f"{run}.json").exists()]
  smallest = [json.loads((output / f"{run}{SMALLEST_SUFFIX}.json").read_text())
              for run in smallest_runs() if (output / f"{run}{SMALLEST_SUFFIX}.json").exists()]
  baseline = (json.loads((output / BASELINE).read_text())
              if (output / BASELINE).exists() else {})
  (output / "README.md").write_text(readme(reports, "python bench/tpu_compile.py", smallest,
                                           baseline))
  sys.exit(0 if all("error" not in r and r["fits"] for r in done) else 1)


if __name__ == "__main__":
  os.environ.setdefault("JAX_PLATFORMS", "cpu")
  _define_flags()
  app.run(main)
