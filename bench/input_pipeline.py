r"""Pairs/s one host's input pipeline produces, against its cores, for the paper mixture.

  python bench/input_pipeline.py --data_dir=../shared/data \
      --output=docs/results/input_pipeline

An OPUS-format directory (Moses files, the layout tasks/opus_download.py
writes) is built from NTREX-128's real sentences: every paper language NTREX
has, paired with English in two corpora (Europarl and OpenSubtitles, the
document's lines split between them) and repeated to --repeat passes, so the
mixture has ~150 tasks as the paper's does. The training input
(tasks/pipeline/input_pipeline.py: `vmsst_opus_paper`, Table 15's rates, files
read by tf.data, SentencePiece tokenization, the feature converter, batch)
then runs in a fresh process pinned to 1 and to 2 cores (`taskset`); after a
warm-up, pairs/s over --batches batches of --batch pairs. Next to it, the
pairs/s each host must feed each paper run on its slice at the step time
the TPU compile command gives (its records, docs/results/tpu_compile/*.json:
the lower-bound step time of each run file on its slice), in both host_data modes:
"slice" (each host tokenizes the global stream: B / step) and "shard_info"
(its share: B / (hosts x step)).
"""

import json
import os
import pathlib
import re
import subprocess
import sys
import tempfile
import time

from absl import app
from absl import flags

import common

FLAGS = flags.FLAGS

REPO = pathlib.Path(__file__).resolve().parents[1]
TPU_COMPILE = REPO / "docs" / "results" / "tpu_compile"
LENGTH = 64  # base_paper.gin's SEQUENCE_LENGTH

def _define_flags() -> None:
  """Under __main__ only: bench scripts are imported side by side by the tests."""
  flags.DEFINE_string("data_dir", str(REPO.parent / "shared" / "data"),
                      "../shared/data (NTREX lines the OPUS-format directory is made of).")
  flags.DEFINE_string("vocab", None,
                      "SentencePiece model (default: one trained here).")
  flags.DEFINE_string("opus_dir", None,
                      "An OPUS-format directory to read (default: one built from NTREX).")
  flags.DEFINE_integer("repeat", 4,
                      "Copies of the NTREX lines per corpus file.")
  flags.DEFINE_integer("batch", 256,
                      "Pairs per batch.")
  flags.DEFINE_integer("batches", 100,
                      "Batches timed per measurement (the steady state).")
  flags.DEFINE_integer("warmup", 60,
                      "Batches read after the first and before timing: every task's shuffle "
                      "buffer is filled on its first draw, so the first tens of thousands of "
                      "pairs cost many times the steady state.")
  flags.DEFINE_string("cores",
                      "1,2",
                      "Comma-separated core counts to measure.")
  flags.DEFINE_string("output", str(REPO / "docs" / "results" / "input_pipeline"),
                      "Directory of the results.")
  flags.DEFINE_string("tpu_compile", str(TPU_COMPILE),
                      "docs/results/tpu_compile: each paper run's lower-bound step time.")
  flags.DEFINE_bool("recorded", False,
                    "Keep the measured rates (results.json in --output) and re-read only the "
                    "step times of --tpu_compile (after a run's compile record changed).")
  flags.DEFINE_string("phase",
                      "main",
                      "main, or a subprocess's phase (internal).")


def build_opus_dir(data_dir: str, output: pathlib.Path, repeat: int) -> int:
  """Moses files Europarl/OpenSubtitles.en-<xx> of NTREX lines; returns the pairs written."""
  from vmsst.base import languages, text_files  # pylint: disable=import-outside-toplevel
  from vmsst_tasks.sources import opus_paper, pair_readers  # pylint: disable=import-outside-toplevel
  files = pair_readers.ntrex_files(data_dir)
  english = text_files.read_lines(files["eng"])
  written = 0
  for code in opus_paper.LANGUAGES:
    try:
      canonical = languages.canonical_language(code)
    except ValueError:
      continue
    if canonical not in files or canonical == "eng":
      continue
    other = text_files.read_lines(files[canonical])
    half = len(english) // 2
    for corpus, rows in (("Europarl", slice(0, half)), ("OpenSubtitles", slice(half, None))):
      for side, lines in (("en", english[rows]), (code, other[rows])):
        text = "".join(f"{line}\n" for line in lines) * repeat
        (output / f"{corpus}.en-{code}.{side}").write_text(text, encoding="utf-8")
      written += len(english[rows]) * repeat
  return written


def measure(args) -> None:
  """(subprocess, pinned) Prints {"pairs_per_second", "cores"} of the training input."""
  from vmsst_tasks.pipeline import input_pipeline  # pylint: disable=import-outside-toplevel
  from vmsst_tasks.registry import common  # pylint: disable=import-outside-toplevel
  from vmsst_tasks.registry import opus  # pylint: disable=import-outside-toplevel
  # Only the OPUS family: the paper mixture's tasks.
  opus.opus_tasks(common.RegistrationInputs.read(args.data_dir, args.vocab),
                  opus_dir=args.opus_dir, paper_mixture=True)
  started = time.perf_counter()
  batches = input_pipeline.train_iterator(opus.PAPER_MIXTURE, batch_size=args.batch,
                                          sequence_length=LENGTH, seed=0, start_step=0)
  next(batches)
  first_batch = time.perf_counter() - started
  for _ in range(args.warmup):
    next(batches)
  started, cpu_started = time.perf_counter(), time.process_time()
  for _ in range(args.batches):
    next(batches)
  seconds = time.perf_counter() - started
  cpu_seconds = time.process_time() - cpu_started  # all threads: robust to a shared machine
  print(json.dumps({"first_batch_seconds": first_batch,
                    "pairs_per_second": args.batch * args.batches / seconds,
                    "pairs_per_cpu_second": args.batch * args.batches / cpu_seconds,
                    "cores_used": cpu_seconds / seconds,
                    "cores": len(os.sched_getaffinity(0)),
                    "tasks": len(__import__("seqio").get_mixture_or_task(
                        opus.PAPER_MIXTURE).tasks)}))


def _pinned(args, cores: int, opus_dir: str) -> dict:
  command = ["taskset", "-c", ",".join(str(c) for c in range(cores)), sys.executable, __file__,
             "--phase=measure", f"--data_dir={args.data_dir}", f"--vocab={args.vocab}",
             f"--opus_dir={opus_dir}", f"--batch={args.batch}", f"--batches={args.batches}",
             f"--warmup={args.warmup}"]
  done = subprocess.run(command, capture_output=True, text=True, check=False,
                        env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"))
  if done.returncode:
    raise RuntimeError(f"{command} exited {done.returncode}:\n{done.stderr[-3000:]}")
  return json.loads(done.stdout.strip().splitlines()[-1])


# Chips per TPU VM host (v4, v5p, v5e and v6e multi-host slices: 4 per host).
CHIPS_PER_HOST = 4


def required_rates(directory: pathlib.Path) -> list[dict]:
  """Per paper run: pairs/s a host must feed at the TPU compile command's lower-bound step.

  Reads each `python -m vmsst.compile` record in `directory` (one JSON per run
  file: "run_file", "slice", "chips", "batch_size", "lower_bound_step_seconds").
  """
  rows = []
  for path in sorted(directory.glob("*.json")) if directory.is_dir() else []:
    record = json.loads(path.read_text())
    step = record.get("lower_bound_step_seconds")
    if not step:
      continue
    hosts = max(record["chips"] // CHIPS_PER_HOST, 1)
    rows.append({"run": pathlib.Path(record["run_file"]).stem, "slice": record["slice"],
                 "hosts": hosts, "batch": record["batch_size"], "step_seconds": step,
                 "slice_mode": record["batch_size"] / step,
                 "shard_info_mode": record["batch_size"] / hosts / step})
  return rows


def _measured(args) -> dict:
  """Pairs/s at each core count, over an OPUS-format directory built from NTREX."""
  with tempfile.TemporaryDirectory() as tmp:
    args.vocab = args.vocab or common.tiny_vocabulary(args.data_dir, tmp)
    opus_dir = pathlib.Path(tmp, "opus")
    opus_dir.mkdir()
    pairs = build_opus_dir(args.data_dir, opus_dir, args.repeat)
    runs = [_pinned(args, int(c), str(opus_dir)) for c in args.cores.split(",")]
  slope = ((runs[-1]["pairs_per_second"] - runs[0]["pairs_per_second"])
           / max(runs[-1]["cores"] - runs[0]["cores"], 1))
  return {"pairs_on_disk": pairs, "runs": runs, "pairs_per_second_per_core": slope}


def _stale_runs(directory: pathlib.Path) -> set[str]:
  """The runs the compile results page marks stale (recorded before a change to them)."""
  page = directory / "README.md"
  text = page.read_text() if page.is_file() else ""
  return set(re.findall(r"`(\w+)\.gin` \(stale", text))


def _shown(path: str) -> str:
  """`path` relative to the repository when inside it (the README is read there)."""
  resolved = pathlib.Path(path).resolve()
  return str(resolved.relative_to(REPO)) if resolved.is_relative_to(REPO) else path


def main(argv) -> None:
  del argv
  args = FLAGS
  if args.phase == "measure":
    return measure(args)
  from vmsst_tasks.registry import opus  # pylint: disable=import-outside-toplevel
  out = pathlib.Path(args.output)
  if args.recorded:  # the pipeline unchanged, the step times moved: re-read, not re-measured
    results = json.loads((out / "results.json").read_text())
  else:
    results = {**common.machine(), **_measured(args), "batch": args.batch, "length": LENGTH,
               "warmup": args.warmup, "batches": args.batches,
               "command": "python bench/input_pipeline.py " + " ".join(
                   a for a in sys.argv[1:] if not a.startswith(("--vocab", "--opus_dir")))}
  runs, pairs, slope = results["runs"], results["pairs_on_disk"], results["pairs_per_second_per_core"]
  required = results["required"] = required_rates(pathlib.Path(args.tpu_compile))
  out.mkdir(parents=True, exist_ok=True)
  (out / "results.json").write_text(json.dumps(results, indent=1) + "\n")
  lines = ["# One host's input pipeline against its cores (paper mixture, OPUS-format files)", "",
           f"`vmsst_opus_paper` over {pairs:,} pairs on disk ({runs[0]['tasks']} tasks, NTREX-128 "
           f"sentences in OPUS Moses files), batch {results['batch']}, length {LENGTH}, tiny "
           "vocabulary; one fresh process pinned with taskset. The first batch waits for the "
           "shuffle buffers of the tasks it draws from to fill (seqio fills a task's "
           f"{opus.OPUS_SHUFFLE_BUFFER:,}-example buffer on its first draw); the steady "
           f"state is timed over {results['batches']} batches after {results['warmup']} more.",
           "",
           "| host cores | first batch (s) | steady pairs/s (wall clock) | cores busy | "
           "steady pairs per CPU-second |", "|---:|---:|---:|---:|---:|"]
  lines += [f"| {r['cores']} | {r['first_batch_seconds']:,.0f} | {r['pairs_per_second']:,.0f} | "
            f"{r['cores_used']:.2f} | {r['pairs_per_cpu_second']:,.0f} |" for r in runs]
  lines += ["", f"Slope: {slope:,.0f} pairs/s per added core, wall clock (machine shared: "
            f"load average {results['load_average']} on {results['cores']} cores, so wall-clock "
            "rates are floors; pairs per CPU-second, all the process's threads, is what one "
            "core does, and the cores-to-keep-up figures below use it).", ""]
  if required:
    one_core = max(runs[0]["pairs_per_cpu_second"], 1)
    lines += ["Pairs/s each host must feed at the lower-bound step time of the TPU compile "
              f"command ({_shown(args.tpu_compile)}; {CHIPS_PER_HOST} chips per host), and the host "
              "cores that keep up at the pairs per CPU-second above (if the pipeline scales with "
              "cores; TPU v4 hosts have 240 vCPUs):", "",
              "| run | slice | hosts | batch | step (s) | per host, shard_info | cores | "
              "per host, slice | cores |", "|---|---|---:|---:|---:|---:|---:|---:|---:|"]
    stale = _stale_runs(pathlib.Path(args.tpu_compile))
    for r in required:
      run = f"{r['run']} (stale†)" if r["run"] in stale else r["run"]
      lines.append(f"| {run} | {r['slice']} | {r['hosts']} | {r['batch']} | "
                   f"{r['step_seconds']:.3g} | {r['shard_info_mode']:,.0f} | "
                   f"{r['shard_info_mode'] / one_core:.1f} | {r['slice_mode']:,.0f} | "
                   f"{r['slice_mode'] / one_core:.1f} |")
    if stale:
      lines += ["", "† The compile record predates a change to the run (its page, "
                f"{_shown(args.tpu_compile)}/README.md, says which and how to recompile)."]
  else:
    lines += ["The pairs/s each host must feed needs the TPU compile command's records "
              f"({args.tpu_compile}: none found); rerun with them: needed = batch / step "
              "(slice mode) or batch / (hosts x step) (shard_info), cores = needed / the 1-core "
              "rate above."]
  lines += ["", "Command (from the repository root):", "", f"    {results['command'].strip()}", "",
            "The step times re-read from the TPU compile records, the rates kept: "
            "`python bench/input_pipeline.py --recorded`.", ""]
  (out / "README.md").write_text("\n".join(lines))
  print((out / "README.md").read_text())


if __name__ == "__main__":
  _define_flags()
  app.run(main)
