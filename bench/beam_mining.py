r"""Bitext mining as a Beam pipeline (`vmsst.mine_beam`) on its runners beside the in-process miner.

Three measurements, written to --output (results.json, README.md with this command):

  1. corpus scale, --n x --n: sentence files of --n lines a side and planted clustered
     vectors of width --d (bench/mining.py's `_planted`), the same for each of --runners
     (the DirectRunner; Dask: a LocalCluster of --dask_workers processes of one thread
     each on 127.0.0.1, started here and closed after its run). Each runner runs the
     pipeline's real read-and-deduplicate stage, finds the planted vectors where
     RunInference would write them (the pipeline resumes from them), then the IVF stages
     (train, assign, search both ways in --shards key shards, merge, candidates) and the
     pairs, each timed, into its own directory; recall@k against exact on a sample; the
     in-process IVF miner (`bitext.mine`, one index) on the same vectors, timed, and each
     runner's pairs compared with its pairs.
  2. real sentences end to end: --ntrex_sentences distinct NTREX lines a side (the first
     half of its languages against the second) embedded by the exported SavedModel
     through RunInference, mined exactly and with IVF; the in-process miner over the same
     rows must give the same pairs (exact: identical; IVF-Flat: identical).
  3. a projection to 10^8 and 10^9 a side on Dataflow from the measured per-stage rates
     (the Dask run's where there is one: a runner of several processes).

--n=0 or --ntrex_sentences=0 keeps that part as --output's results.json recorded it.

  python bench/beam_mining.py --saved_model=EXPORT --n=1000000 --d=64 --shards=8 \
      --ntrex_sentences=20000
"""

import contextlib
import dataclasses
import json
import os
import sys
import time

import numpy as np
from absl import app
from absl import flags

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# pylint: disable=wrong-import-position
from apache_beam.options.pipeline_options import PipelineOptions  # noqa: E402

from bench import mining as mining_bench  # noqa: E402
from vmsst.base import files  # noqa: E402
from vmsst.mining import bitext  # noqa: E402
from vmsst.mining import approximate  # noqa: E402
from vmsst.mining import beam_pipeline as bp  # noqa: E402

FLAGS = flags.FLAGS
RUNNERS = ("direct", "dask")


def _define_flags() -> None:
  """Under __main__ only: bench scripts are imported side by side by the tests."""
  flags.DEFINE_integer("n", 1_000_000, "Sentences a side for the corpus-scale run (0: keep "
                       "--output's recorded one and rerun only the NTREX part).")
  flags.DEFINE_integer("d", 64, "Width of the planted vectors of the corpus-scale run.")
  flags.DEFINE_integer("shards", 8, "The pipeline's shards a side.")
  flags.DEFINE_integer("nprobe", 16, "IVF cells per query (both miners).")
  flags.DEFINE_integer("train_size", 0, "IVF training sample a side of the corpus-scale run "
                       "(0: the pipeline's default, 64 points a cell, at least 100,000).")
  flags.DEFINE_list("runners", list(RUNNERS), "Beam runners of the corpus-scale run, of "
                    f"{RUNNERS}.")
  flags.DEFINE_integer("dask_workers", 2, "Worker processes (one thread each) of the Dask "
                       "runner's LocalCluster.")
  flags.DEFINE_integer("ntrex_sentences", 20_000, "Distinct NTREX sentences a side for the real "
                       "end-to-end run (0: keep --output's recorded one, if any).")
  flags.DEFINE_string("saved_model", None, "SavedModel (python -m vmsst.export) for the real run.")
  flags.DEFINE_string("data_dir", "../shared/data", "Holds ntrex128/.")
  flags.DEFINE_string("work", "/tmp/beam_mining_bench", "Scratch directory (sentences, stages).")
  flags.DEFINE_string("output", "docs/results/beam_mining", "Where results.json and README.md go.")
  flags.DEFINE_integer("dataflow_cores", 4, "vCPUs per Dataflow worker in the projection.")
  flags.DEFINE_multi_string("note", [], "A line for the page (what was run and why).")
  flags.DEFINE_bool("recorded", False, "Render README.md from --output's results.json only.")
  flags.register_validator("runners", lambda names: set(names) <= set(RUNNERS),
                           f"--runners takes names of {RUNNERS}.")


def _options() -> PipelineOptions:
  return PipelineOptions(["--runner=DirectRunner"])


@contextlib.contextmanager
def _runner(name: str, workers: int):
  """(Beam options, the Dask cluster or None) of a runner; the cluster closed on exit.

  The Dask cluster is the integration tests' (tests/mining/test_beam_pipeline.py): worker
  processes of one thread each on 127.0.0.1, so every task crosses a process boundary.
  """
  if name == "direct":
    yield _options(), None
    return
  from dask import distributed  # pylint: disable=import-outside-toplevel
  with distributed.LocalCluster(n_workers=workers, threads_per_worker=1, processes=True,
                                host="127.0.0.1", dashboard_address=None) as cluster:
    yield PipelineOptions(bp.beam_arguments(
        ["--runner=DaskRunner", f"--dask_client_address={cluster.scheduler_address}"])), cluster


def _runner_record(name: str, workers: int) -> dict:
  """How a runner's run is named, and the cores its tasks could keep busy: the projection's
  bound on core-seconds (a Dask worker's nanny sets OMP_NUM_THREADS=1, so faiss there uses
  one thread a worker; the DirectRunner's faiss calls use every core)."""
  cores = os.cpu_count()
  if name == "direct":
    return {"label": "DirectRunner", "cores_bound": cores}
  return {"label": f"Dask, {workers} workers", "workers": workers,
          "cores_bound": min(cores, workers)}


def _tasks_per_worker(cluster) -> list[int]:
  """Tasks each worker ran (the cluster is this run's): evidence that the stages spread."""
  with cluster.get_client() as client:
    return sorted(client.run(lambda dask_worker: dask_worker.state.executed_count).values())


def _write_lines(path: str, lines) -> None:
  files.write_text(path, "".join(f"{line}\n" for line in lines))


def _pairs_of(path: str) -> set[tuple[str, str]]:
  return {tuple(line.split("\t")[1:]) for line in files.read_text(path).splitlines()}


def _f1(got: set, want: set) -> float:
  return 2 * len(got & want) / max(1, len(got) + len(want))


def _plant_embeddings(layout: bp.Layout, vectors, settings: bp.Settings) -> None:
  """The planted vectors where the embeddings stage writes its shards, and its marker: the
  pipeline resumes after it. Rows are file order (every line distinct): row i is line i."""
  bounds = bp.shard_bounds(len(vectors[0]), settings.shards)
  for side, matrix in zip(bp.SIDES, vectors):
    for shard in range(settings.shards):
      files.save_npy(layout.embeddings(side, shard), matrix[bounds[shard]:bounds[shard + 1]])
  bp.mark_done(layout, "embeddings", settings, width=vectors[0].shape[1])


def _runner_stages(patterns: dict, vectors, output: str, settings: bp.Settings,
                   options) -> dict:
  """One runner's pipeline from the sentence files, every stage timed, into a fresh `output`:
  a stage a previous run left there would be skipped, its seconds that run's."""
  if files.exists(output):
    files.rmtree(output)
  layout = bp.Layout(output, settings.shards)
  start = time.perf_counter()
  bp.sentences_stage(patterns, layout, settings, options)  # before the planted vectors
  read_seconds = time.perf_counter() - start
  _plant_embeddings(layout, vectors, settings)
  summary = bp.run(patterns, output, settings, options)
  return {**summary, "seconds": {**summary["recorded_seconds"], "sentences": read_seconds}}


def _compared(summary: dict, want: set, planted: set) -> dict:
  """A runner's pairs (rows from the planted sentence names) against the in-process ones."""
  got = {(int(s[1:]), int(t[1:])) for s, t in _pairs_of(summary["pairs"])}
  return {"stage_seconds": summary["seconds"], "recall": summary["recall"], "pairs": len(got),
          "identical_to_in_process": got == want, "f1_vs_in_process": _f1(got, want),
          "recall_of_planted": len(got & planted) / len(planted)}


def corpus_scale(n: int, d: int, shards: int, nprobe: int, train_size: int, runners,
                 dask_workers: int, work: str) -> dict:
  """The planted --n x --n run: each runner's stages timed, the in-process miner beside."""
  source, target, gold = mining_bench._planted(n, d)  # pylint: disable=protected-access
  patterns = {side: files.join(work, "scale", f"{side}.txt") for side in bp.SIDES}
  _write_lines(patterns["src"], (f"s{i}" for i in range(n)))
  _write_lines(patterns["trg"], (f"t{i}" for i in range(n)))
  ivf = approximate.IvfOptions(nprobe=nprobe, train_size=train_size)
  settings = bp.Settings(index="ivf", ivf=ivf, k=4, shards=shards, recall_sample=1000)
  summaries, records = {}, {}
  for name in runners:
    records[name] = _runner_record(name, dask_workers)
    with _runner(name, dask_workers) as (options, cluster):
      summaries[name] = _runner_stages(patterns, (source, target),
                                       files.join(work, "scale", name), settings, options)
      if cluster is not None:
        records[name]["tasks_per_worker"] = _tasks_per_worker(cluster)
    print(name, json.dumps(summaries[name]["seconds"]), flush=True)
  start = time.perf_counter()
  pairs, _ = bitext.mine(source, target, k=4, index="ivf", ivf=ivf)
  in_process_seconds = time.perf_counter() - start
  want = set(map(tuple, pairs.tolist()))
  planted = set(map(tuple, gold.tolist()))
  return {"n": n, "d": d, "shards": shards, "ivf": dataclasses.asdict(ivf),
          "cells": ivf.cells(n), "train_size": ivf.training_keys(n),
          "runners": {name: {**records[name], **_compared(summaries[name], want, planted)}
                      for name in runners},
          "in_process_seconds": in_process_seconds, "in_process_pairs": len(want),
          "in_process_recall_of_planted": len(want & planted) / len(planted)}


def _ntrex_sides(data_dir: str, per_side: int, work: str) -> dict:
  """The first half of NTREX's languages against the second, each side's files as given."""
  folder = files.join(data_dir, "ntrex128")
  names = sorted(n for n in files.listdir(folder) if n.startswith("newstest2019-"))
  half = len(names) // 2
  patterns = {}
  for side, chosen in (("src", names[:half]), ("trg", names[half:])):
    seen = {}
    for name in chosen:
      text = files.read_bytes(files.join(folder, name))
      import gzip  # pylint: disable=import-outside-toplevel
      for line in gzip.decompress(text).decode("utf-8").split("\n"):
        line = line.strip()
        if line and "\t" not in line:
          seen.setdefault(line, None)
    lines = list(seen)[:per_side]
    patterns[side] = files.join(work, "ntrex", f"{side}.txt")
    _write_lines(patterns[side], lines)
  return patterns


def real_end_to_end(saved_model: str, data_dir: str, per_side: int, shards: int,
                    work: str) -> dict:
  """NTREX sentences embedded by RunInference; exact and IVF pairs against in-process."""
  patterns = _ntrex_sides(data_dir, per_side, work)
  handler = bp.SavedModelHandler(saved_model)
  results = {}
  exact_dir = files.join(work, "ntrex", "exact")
  for index in ("exact", "ivf"):
    output = files.join(work, "ntrex", index)
    if index == "ivf":  # the same sentences and embeddings: resumed from the exact run
      for stage in ("sentences", "embeddings"):
        files.copytree(files.join(exact_dir, stage), files.join(output, stage))
    ivf = approximate.IvfOptions(nprobe=FLAGS.nprobe)
    settings = bp.Settings(index=index, ivf=ivf, k=4, shards=shards)
    summary = bp.run(patterns, output, settings, _options(), {"src": handler, "trg": handler})
    layout = bp.Layout(output, shards)
    x, y = (bp.ShardedRows(layout, side)[:] for side in bp.SIDES)
    sentences = [sum((bp.read_sentence_shard(layout, side, s) for s in range(shards)), [])
                 for side in bp.SIDES]
    start = time.perf_counter()
    pairs, _ = (bitext.mine(x, y, k=4) if index == "exact"
                else bitext.mine(x, y, k=4, index="ivf", ivf=ivf))
    in_process_seconds = time.perf_counter() - start
    want = {(sentences[0][i], sentences[1][j]) for i, j in pairs.tolist()}
    got = _pairs_of(summary["pairs"])
    results[index] = {"stage_seconds": summary["recorded_seconds"], "sentences": summary["sentences"],
                      "counts": summary["counts"], "pairs": len(got), "recall": summary["recall"],
                      "in_process_search_and_margin_seconds": in_process_seconds,
                      "identical_to_in_process": got == want, "f1_vs_in_process": _f1(got, want)}
  embedded = sum(results["exact"]["sentences"].values())
  results["embed_sentences_per_second"] = embedded / results["exact"]["stage_seconds"]["embeddings"]
  return results


SIZES = (10 ** 8, 10 ** 9)
WORKER_COUNTS = (100, 1000)
SINGLE_TASK = {"index": "1 task a side", "pairs": "1 task"}
RUNNER_FIELDS = ("stage_seconds", "recall", "pairs", "identical_to_in_process",
                 "f1_vs_in_process", "recall_of_planted")
NTREX_MACHINE = "; the NTREX part: "


def _upgraded(scale: dict) -> dict:
  """A corpus-scale record from before --runners (the DirectRunner's run only) in this shape,
  so --recorded and --n=0 still read it."""
  if "runners" in scale:
    return scale
  rest = {k: v for k, v in scale.items() if k not in RUNNER_FIELDS}
  return {**rest, "runners": {"direct": {"label": "DirectRunner",
                                         **{k: scale[k] for k in RUNNER_FIELDS}}}}


def _growth(ivf: approximate.IvfOptions, n0: int, n: int) -> dict[str, float]:
  """Each stage's work at n a side over its work at the measured n0, the cells and training
  sample as the pipeline picks them at each size: reading, the merge, the candidates and the
  pairs linear in n (the pairs' sort is n log n, taken as linear); training as sample x cells;
  assignment as n x cells; the search as n x the keys a query scans (nprobe x n / cells)."""
  linear = n / n0
  scanned = lambda m: min(ivf.nprobe, ivf.cells(m)) * m / ivf.cells(m)
  training = lambda m: ivf.training_keys(m) * ivf.cells(m)
  return {"sentences": linear, "index": training(n) / training(n0),
          "assign": linear * ivf.cells(n) / ivf.cells(n0),
          "neighbours": linear * scanned(n) / scanned(n0), "merge": linear,
          "candidates": linear, "pairs": linear}


def _cores_spread(stage: str, workers: int, cores: int) -> int:
  """Cores a stage's tasks keep busy on Dataflow: the index trains one task a side (each on a
  worker's cores), the pairs are one sequential task (one core), the rest spread over all."""
  return {"index": min(workers, 2) * cores, "pairs": 1}.get(stage, workers * cores)


def _core_seconds(measured: dict, n0: int, n: int, ivf: approximate.IvfOptions,
                  embed_rate: float | None, cores_here: int) -> dict[str, float]:
  """Each stage's core-seconds at n a side: wall seconds x the cores the measured run could
  keep busy (an upper bound; the pairs' one, its task is sequential) x the stage's growth;
  embedding from the NTREX rate (this machine's cores, DirectRunner)."""
  growth, bound = _growth(ivf, n0, n), measured.get("cores_bound", cores_here)
  work = {}
  for stage in bp.STAGES:
    seconds = measured["stage_seconds"].get(stage)
    if stage == "embeddings" and embed_rate:
      work[stage] = 2 * n * cores_here / embed_rate
    elif seconds is not None and stage in growth:
      work[stage] = seconds * (1 if stage == "pairs" else bound) * growth[stage]
  return work


def _single_task_bounds(work: dict, ivf: approximate.IvfOptions, n: int, cores: int) -> dict:
  """The hours of the stages that do not spread, whatever the workers (two or more)."""
  hours = lambda stage: round(work[stage] / _cores_spread(stage, 2, cores) / 3600, 2)
  return {"index": {"hours": hours("index"), "sample": ivf.training_keys(n),
                    "cells": ivf.cells(n)}, "pairs": {"hours": hours("pairs")}}


def projection(scale: dict, embed_rate: float | None, cores_here: int, cores: int) -> dict:
  """Dataflow workers and hours at 10^8 and 10^9 a side from the measured per-stage rates.

  The rates are the Dask run's where there is one (a runner of several processes: each task
  crosses a process boundary as on Dataflow), else the DirectRunner's. Every stage but two
  divides over workers x `cores`: the index trains one task a side on its sample (bounded
  by the sample, not by n) and the pairs are one task (bounded by their measured seconds a
  row x n). Spread stages are taken to have a task for every core (shards enough); the
  merge reads one list per key shard, so more shards than measured add to it, not modelled.
  """
  rates_from = "dask" if "dask" in scale["runners"] else "direct"
  measured = scale["runners"][rates_from]
  ivf, n0 = approximate.IvfOptions(**scale["ivf"]), scale["n"]
  rows, single = {}, {}
  for n in SIZES:
    work = _core_seconds(measured, n0, n, ivf, embed_rate, cores_here)
    single[f"{n:.0e}"] = _single_task_bounds(work, ivf, n, cores)
    for workers in WORKER_COUNTS:
      hours = {stage: w / _cores_spread(stage, workers, cores) / 3600 for stage, w in work.items()}
      rows[f"{n:.0e} x {workers} workers"] = {
          "hours": {k: round(v, 2) for k, v in hours.items()},
          "total_hours": round(sum(hours.values()), 1), "dominant": max(hours, key=hours.get)}
  return {"rates_from": rates_from, "runner": measured["label"],
          "cores_bound": measured.get("cores_bound", cores_here), "dataflow_cores": cores,
          "embedding_rate": embed_rate, "pairs_seconds_per_million_rows":
              1e6 * measured["stage_seconds"]["pairs"] / n0,
          "single_task": single, "rows": rows}


def _seconds(value: float | None) -> str:
  return "" if value is None else f"{value:.1f}"


def _after_embeddings(seconds: dict) -> float:
  """A runner's seconds from the index to the pairs: what the in-process miner's time covers."""
  return sum(v for k, v in seconds.items() if v is not None and k not in ("sentences",
                                                                          "embeddings"))


def _runners_text(runners: dict) -> str:
  dask = runners.get("dask")
  if not dask:
    return "The DirectRunner ran every stage."
  return (f"Each runner ran every stage into its own directory from the same files; Dask: a "
          f"`LocalCluster` of {dask['workers']} worker processes of one thread each on "
          f"127.0.0.1, started by the bench (tasks run per worker: "
          f"{dask.get('tasks_per_worker')}).")


def _scale_lines(scale: dict, embedded: bool) -> list[str]:
  """The corpus-scale part: the runners' stage seconds side by side, then their pairs."""
  runners = scale["runners"]
  rate = "its rate is below, on real sentences" if embedded else "nor is there an NTREX part"
  lines = [f"## {scale['n']:,} x {scale['n']:,}, planted vectors of width {scale['d']}", "",
           "Read and deduplicate ran on real files of that many lines (one a side); the "
           "embeddings stage's files are planted vectors (bench/mining.py `_planted`), the same "
           f"for every runner, so RunInference did not run here ({rate}). "
           f"{_runners_text(runners)}", "",
           "| stage | " + " | ".join(f"{r['label']} s" for r in runners.values())
           + " | in-process s |", "|---|" + "---:|" * (len(runners) + 1)]
  for stage in bp.STAGES:
    cells = [r["stage_seconds"].get(stage) for r in runners.values()]
    if any(c is not None for c in cells):
      lines.append(f"| {stage} | " + " | ".join(map(_seconds, cells)) + " | |")
  lines += ["| index to pairs | " + " | ".join(
      _seconds(_after_embeddings(r["stage_seconds"])) for r in runners.values())
            + f" | {scale['in_process_seconds']:.1f} |", "",
            "In-process: `bitext.mine(index='ivf')` on the same vectors (training, adding, "
            "searching both ways, margins and pairs, one index per side). IVF-Flat, "
            f"{scale['cells']} cells, nprobe {scale['ivf']['nprobe']}, {scale['train_size']:,} "
            f"training points a side, {scale['shards']} shards.", "",
            "| miner | pairs | identical to in-process | F1 | planted translations found | "
            "recall@4 against exact, 1,000 sampled queries |", "|---|---:|---|---:|---:|---|"]
  for r in runners.values():
    recall = r["recall"] and f"forward {r['recall']['forward']:.4f}, backward " \
                             f"{r['recall']['backward']:.4f}"
    lines.append(f"| {r['label']} | {r['pairs']:,} | {r['identical_to_in_process']} | "
                 f"{r['f1_vs_in_process']:.4f} | {r['recall_of_planted']:.4f} | {recall} |")
  lines += [f"| in-process | {scale['in_process_pairs']:,} | | | "
            f"{scale['in_process_recall_of_planted']:.4f} | |", ""]
  return lines


def _real_lines(real: dict | None) -> list[str]:
  if not real:
    return []
  lines = ["## NTREX sentences through RunInference", "",
           f"Sentences a side: {real['exact']['sentences']}; embedded at "
           f"{real['embed_sentences_per_second']:.0f} sentences/s (the exported model "
           f"named in the command, DirectRunner).", "",
           "| index | stage seconds | pairs | identical to in-process | recall |",
           "|---|---|---:|---|---|"]
  for index in ("exact", "ivf"):
    r = real[index]
    stages = ", ".join(f"{k} {v:.1f}" for k, v in r["stage_seconds"].items() if v is not None)
    lines.append(f"| {index} | {stages} | {r['pairs']:,} | {r['identical_to_in_process']} "
                 f"(F1 {r['f1_vs_in_process']:.4f}) | {r['recall']} |")
  return lines + [""]


def _projection_lines(p: dict) -> list[str]:
  """The projection's model in words, its table, and the single-task stages' bounds."""
  stages = list(next(iter(p["rows"].values()))["hours"])
  embedding = ("Embedding at the rate measured on NTREX above (DirectRunner)."
               if p["embedding_rate"] else "Embedding is not in it: no NTREX rate recorded.")
  lines = ["## Projection to Dataflow", "",
           f"From the {p['runner']} run's rates above (`rates_from`: {p['rates_from']}). "
           f"Core-seconds per stage = its wall seconds x the {p['cores_bound']} cores its tasks "
           "could keep busy (an upper bound), the pairs' x 1 (one sequential task). Work at n a "
           "side over the measured n, with the cells and training sample the pipeline picks at "
           "n: read, merge, candidates, pairs and embedding linear; training as sample x cells; "
           "assignment as n x cells; search as n x nprobe x n / cells. Every stage spreads "
           "over all workers' cores but two, marked: the index (one task a side, k-means on "
           "its `--train_size` sample: bounded by the sample, not by n) and the pairs (one "
           "task, one-to-one being sequential: bounded by n x its measured rate, "
           f"{p['pairs_seconds_per_million_rows']:.2f} s per 10^6 rows a side, taken as "
           "linear though its sort is n log n). Spread stages are taken to have a task for "
           "every core; the merge reads one list per key shard, so more shards than measured "
           f"add to it (not modelled). {embedding} {p['dataflow_cores']} vCPUs a worker, each "
           "as fast as a core here; hours:", "",
           "| sides x workers | total hours | dominant stage | "
           + " | ".join(f"{s} ({SINGLE_TASK[s]})" if s in SINGLE_TASK else s for s in stages)
           + " |", "|---|---:|---|" + "---:|" * len(stages)]
  for name, row in p["rows"].items():
    lines.append(f"| {name} | {row['total_hours']} | {row['dominant']} | "
                 + " | ".join(f"{row['hours'][s]:.2f}" for s in stages) + " |")
  bounds = "; ".join(f"{size} a side: index {b['index']['hours']} h ({b['index']['sample']:,} "
                     f"training points, {b['index']['cells']:,} cells), pairs "
                     f"{b['pairs']['hours']} h" for size, b in p["single_task"].items())
  return lines + ["", f"Single-task stages, whatever the workers: {bounds}.", ""]


def _render(results: dict, command: str) -> str:
  scale = results["corpus_scale"]
  labels = " and ".join(r["label"] for r in scale["runners"].values())
  return "\n".join([f"# Bitext mining as an Apache Beam pipeline ({labels}) beside the "
                    "in-process miner", "", "Generated by bench/beam_mining.py from "
                    "results.json (the command at the end); not edited by hand.", "",
                    f"Machine: {results['machine']}.", "",
                    *[f"- {note}" for note in results.get("notes", [])], "",
                    *_scale_lines(scale, "real" in results), *_real_lines(results.get("real")),
                    *_projection_lines(results["projection"]),
                    "Command (from the repository root):", "", f"    {command}", ""])


def _recorded(output: str) -> dict:
  """--output's results.json ({} when there is none) in this shape: records from before
  --runners hold only the DirectRunner's corpus-scale run, and no field for the cores."""
  path = files.join(output, "results.json")
  if not files.exists(path):
    return {}
  results = json.loads(files.read_text(path))
  if "corpus_scale" in results:
    results["corpus_scale"] = _upgraded(results["corpus_scale"])
  results.setdefault("cores", int(results["machine"].split(" cores")[0]))
  return results


def _provenance(here: str, command: str, recorded: dict, kept: str | None) -> tuple[str, str]:
  """(machine, command) of the page: this run's, beside those of the part kept from the record
  (`kept`): the corpus-scale part's first, the NTREX part's after NTREX_MACHINE / last."""
  if kept is None:
    return here, command
  machines, commands = recorded["machine"].split(NTREX_MACHINE), recorded["command"].split("\n")
  if kept == "corpus_scale":
    return machines[0] + NTREX_MACHINE + here, commands[0] + "\n    " + command
  return here + NTREX_MACHINE + machines[-1], command + "\n    " + commands[-1].strip()


def _write(results: dict, output: str) -> None:
  """The projection from the record's rates (arithmetic only: --recorded redoes it alike),
  then results.json and the page."""
  rate = results.get("real", {}).get("embed_sentences_per_second")
  results["projection"] = projection(results["corpus_scale"], rate, results["cores"],
                                     results["dataflow_cores"])
  files.write_text(files.join(output, "results.json"), json.dumps(results, indent=1))
  files.write_text(files.join(output, "README.md"), _render(results, results["command"]))


def _check_flags(recorded: dict) -> None:
  """Raises app.UsageError for a run that would fail after its first part, naming the fix."""
  if not (FLAGS.n or FLAGS.ntrex_sentences):
    raise app.UsageError("--n=0 and --ntrex_sentences=0 measure nothing; --recorded renders "
                         "the page from --output's results.json.")
  if not FLAGS.n and "corpus_scale" not in recorded:
    raise app.UsageError(f"--n=0 keeps the corpus-scale part of {FLAGS.output}/results.json, "
                         "which holds none; give --n.")
  if FLAGS.ntrex_sentences and not FLAGS.saved_model:
    raise app.UsageError("--ntrex_sentences needs --saved_model (python -m vmsst.export); "
                         "--ntrex_sentences=0 skips the NTREX part or keeps --output's.")


def main(argv) -> None:
  del argv
  recorded = _recorded(FLAGS.output)
  if FLAGS.recorded:
    if not recorded:
      raise app.UsageError(f"--recorded renders {FLAGS.output}/results.json; there is none.")
    recorded["notes"] = FLAGS.note or recorded.get("notes", [])
    _write(recorded, FLAGS.output)
    return
  _check_flags(recorded)
  start_load = os.getloadavg()[0]
  results = {"cores": os.cpu_count(), "dataflow_cores": FLAGS.dataflow_cores, "notes": FLAGS.note}
  if FLAGS.ntrex_sentences:
    results["real"] = real_end_to_end(FLAGS.saved_model, FLAGS.data_dir, FLAGS.ntrex_sentences,
                                      FLAGS.shards, FLAGS.work)
    print(json.dumps(results["real"], indent=1), flush=True)
  if FLAGS.n:
    results["corpus_scale"] = corpus_scale(FLAGS.n, FLAGS.d, FLAGS.shards, FLAGS.nprobe,
                                           FLAGS.train_size, FLAGS.runners, FLAGS.dask_workers,
                                           FLAGS.work)
    print(json.dumps(results["corpus_scale"], indent=1), flush=True)
  kept = next((part for part in ("corpus_scale", "real")
               if part not in results and part in recorded), None)
  if kept:
    results[kept] = recorded[kept]
  here = (f"{os.cpu_count()} cores, load average {start_load:.1f} at the start, "
          f"{os.getloadavg()[0]:.1f} at the end")
  results["machine"], results["command"] = _provenance(
      here, "python " + " ".join(sys.argv), recorded, kept)
  _write(results, FLAGS.output)
  print(files.read_text(files.join(FLAGS.output, "README.md")))


if __name__ == "__main__":
  _define_flags()
  app.run(main)
