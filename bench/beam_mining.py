r"""Bitext mining as a Beam pipeline (`vmsst.mine_beam`, DirectRunner) beside the in-process miner.

Three measurements, written to --output (results.json, README.md with this command):

  1. corpus scale, --n x --n: sentence files of --n lines a side go through the pipeline's
     real read-and-deduplicate stage; the embeddings stage's files are planted clustered
     vectors of width --d (bench/mining.py's `_planted`, written where RunInference
     would write them: the pipeline resumes from them), then the IVF stages (train,
     assign, search both ways in --shards key shards) and the pairs, each timed; recall@k
     against exact on a sample; the in-process IVF miner (`bitext.mine`, one index) on
     the same vectors, timed, and the two pair sets compared.
  2. real sentences end to end: --ntrex_sentences distinct NTREX lines a side (the first
     half of its languages against the second) embedded by the exported SavedModel
     through RunInference, mined exactly and with IVF; the in-process miner over the same
     rows must give the same pairs (exact: identical; IVF-Flat: identical).
  3. a projection to 10^8 and 10^9 a side on Dataflow from the measured per-stage rates.

  python bench/beam_mining.py --saved_model=EXPORT --n=1000000 --d=64 --shards=8 \
      --ntrex_sentences=20000
"""

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
from vmsst import files  # noqa: E402
from vmsst.mining import bitext  # noqa: E402
from vmsst.mining import approximate  # noqa: E402
from vmsst.mining import beam_pipeline as bp  # noqa: E402

FLAGS = flags.FLAGS

def _define_flags() -> None:
  """Under __main__ only: bench scripts are imported side by side by the tests."""
  flags.DEFINE_integer("n", 1_000_000, "Sentences a side for the corpus-scale run (0: keep "
                       "--output's recorded one and rerun only the NTREX part).")
  flags.DEFINE_integer("d", 64, "Width of the planted vectors of the corpus-scale run.")
  flags.DEFINE_integer("shards", 8, "The pipeline's shards a side.")
  flags.DEFINE_integer("nprobe", 16, "IVF cells per query (both miners).")
  flags.DEFINE_integer("ntrex_sentences", 20_000, "Distinct NTREX sentences a side for the real "
                       "end-to-end run (0 skips it).")
  flags.DEFINE_string("saved_model", None, "SavedModel (python -m vmsst.export) for the real run.")
  flags.DEFINE_string("data_dir", "../shared/data", "Holds ntrex128/.")
  flags.DEFINE_string("work", "/tmp/beam_mining_bench", "Scratch directory (sentences, stages).")
  flags.DEFINE_string("output", "docs/results/beam_mining", "Where results.json and README.md go.")
  flags.DEFINE_integer("dataflow_cores", 4, "vCPUs per Dataflow worker in the projection.")
  flags.DEFINE_multi_string("note", [], "A line for the page (what was run and why).")
  flags.DEFINE_bool("recorded", False, "Render README.md from --output's results.json only.")

STAGE_NAMES = ("sentences", "embeddings", "index", "assign", "neighbours", "pairs")


def _options() -> PipelineOptions:
  return PipelineOptions(["--runner=DirectRunner"])


def _write_lines(path: str, lines) -> None:
  files.write_text(path, "".join(f"{line}\n" for line in lines))


def _pairs_of(path: str) -> set[tuple[str, str]]:
  return {tuple(line.split("\t")[1:]) for line in files.read_text(path).splitlines()}


def _f1(got: set, want: set) -> float:
  return 2 * len(got & want) / max(1, len(got) + len(want))


def corpus_scale(n: int, d: int, shards: int, nprobe: int, work: str) -> dict:
  """The planted --n x --n run: the pipeline's stages timed, the in-process miner beside."""
  source, target, gold = mining_bench._planted(n, d)  # pylint: disable=protected-access
  patterns = {"src": files.join(work, "scale", "src.txt"), "trg": files.join(work, "scale",
                                                                              "trg.txt")}
  _write_lines(patterns["src"], (f"s{i}" for i in range(n)))
  _write_lines(patterns["trg"], (f"t{i}" for i in range(n)))
  ivf = approximate.IvfOptions(nprobe=nprobe)
  settings = bp.Settings(index="ivf", ivf=ivf, k=4, shards=shards, recall_sample=1000)
  output = files.join(work, "scale", "mined")
  layout = bp.Layout(output, shards)
  start = time.perf_counter()
  bp.sentences_stage(patterns, layout, settings, _options())
  read_seconds = time.perf_counter() - start
  bounds = bp.shard_bounds(n, shards)  # rows are file order: row i is line i
  for side, matrix in (("src", source), ("trg", target)):
    for shard in range(shards):
      files.save_npy(layout.embeddings(side, shard), matrix[bounds[shard]:bounds[shard + 1]])
  bp.mark_done(layout, "embeddings", settings, width=d)
  summary = bp.run(patterns, output, settings, _options())
  summary["seconds"] = {**summary["recorded_seconds"], "sentences": read_seconds}
  got = {(int(s[1:]), int(t[1:])) for s, t in _pairs_of(summary["pairs"])}
  start = time.perf_counter()
  pairs, _ = bitext.mine(source, target, k=4, index="ivf", ivf=ivf)
  in_process_seconds = time.perf_counter() - start
  want = set(map(tuple, pairs.tolist()))
  planted = set(map(tuple, gold.tolist()))
  return {"n": n, "d": d, "shards": shards, "ivf": dataclasses.asdict(ivf),
          "cells": ivf.cells(n), "train_size": ivf.training_keys(n),
          "stage_seconds": summary["seconds"], "recall": summary["recall"],
          "pairs": len(got), "in_process_seconds": in_process_seconds,
          "in_process_pairs": len(want), "identical_to_in_process": got == want,
          "f1_vs_in_process": _f1(got, want), "recall_of_planted": len(got & planted) / len(planted),
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


def projection(scale: dict, embed_rate: float | None, cores_here: int, cores: int) -> dict:
  """Dataflow workers and hours at 10^8 and 10^9 a side from the measured per-stage rates.

  Core-seconds here = wall seconds x the cores of this machine (an upper bound: the
  DirectRunner's Python stages used one). Cost models (n a side, nlist = 4 sqrt(n) cells,
  64 training points per cell): reading, embedding and pairs grow as n; training as
  sample x cells (n); assignment as n x cells and the search as n x nprobe x n / cells,
  both n^1.5. Parallel stages divide over workers x cores; training (one task per side)
  and pairs (one task) do not.
  """
  n0, seconds = scale["n"], scale["stage_seconds"]
  grow = {"sentences": lambda n: n / n0, "index": lambda n: n / n0, "pairs": lambda n: n / n0,
          "assign": lambda n: (n / n0) ** 1.5, "neighbours": lambda n: (n / n0) ** 1.5}
  serial = {"index": 2, "pairs": 1}  # tasks that cannot spread further
  table = {}
  for n in (10 ** 8, 10 ** 9):
    for workers in (100, 1000):
      hours = {}
      for stage, g in grow.items():
        core_seconds = seconds[stage] * cores_here * g(n)
        spread = min(workers * cores, serial.get(stage, 10 ** 12) * cores)
        hours[stage] = core_seconds / spread / 3600
      if embed_rate:
        hours["embeddings"] = 2 * n / (embed_rate / cores_here) / (workers * cores) / 3600
      table[f"{n:.0e} x {workers} workers"] = {
          "hours": {k: round(v, 2) for k, v in hours.items()},
          "total_hours": round(sum(hours.values()), 1),
          "dominant": max(hours, key=hours.get)}
  return table


def _render(results: dict, command: str) -> str:
  scale = results["corpus_scale"]
  lines = ["# Bitext mining as an Apache Beam pipeline (DirectRunner) beside the in-process "
           "miner", "", "Generated by bench/beam_mining.py from results.json (the command at the "
           "end); not edited by hand.", "",
           f"Machine: {results['machine']}.", "",
           *[f"- {note}" for note in results.get("notes", [])], "",
           f"## {scale['n']:,} x {scale['n']:,}, planted vectors of width {scale['d']}",
           "", "Read and deduplicate ran on real files of that many lines; the embeddings "
           "stage's files are planted vectors (bench/mining.py `_planted`), so RunInference "
           "did not run here (its rate is below, on real sentences).", "",
           "| stage | seconds |", "|---|---:|"]
  lines += [f"| {k} | {v:.1f} |" for k, v in scale["stage_seconds"].items() if v is not None]
  lines += ["", f"In-process `bitext.mine(index='ivf')` on the same vectors (training, adding, "
            f"searching both ways and margins, one index per side): {scale['in_process_seconds']:.1f} s. IVF-Flat, {scale['cells']} cells, "
            f"nprobe {scale['ivf']['nprobe']}, {scale['train_size']:,} training points, "
            f"{scale['shards']} shards.", "",
            f"Recall@4 against exact on 1,000 sampled queries: {scale['recall']}. Pairs: "
            f"{scale['pairs']:,} (in-process {scale['in_process_pairs']:,}); identical: "
            f"{scale['identical_to_in_process']}, F1 {scale['f1_vs_in_process']:.4f}; planted "
            f"translations found {scale['recall_of_planted']:.4f} (in-process "
            f"{scale['in_process_recall_of_planted']:.4f}).", ""]
  real = results.get("real")
  if real:
    lines += ["## NTREX sentences through RunInference", "",
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
    lines.append("")
  lines += ["## Projection to Dataflow", "",
            "Core-seconds per stage = wall seconds here x this machine's cores (an upper "
            "bound: the DirectRunner's Python stages used one core). Growth with n a side "
            "(nlist = 4 sqrt(n), 64 training points a cell): read, embed, train and pairs "
            "as n; assign (n x cells) and search (n x nprobe x n / cells) as n^1.5. Read, "
            "embed, assign and search spread over every worker's cores; training (one task "
            "a side) and pairs (one task) do not. Embedding at the rate measured on NTREX "
            f"above. {results['dataflow_cores']} vCPUs a worker, each as fast as a core here:",
            "", "| sides x workers | total hours | dominant stage | hours per stage |",
            "|---|---:|---|---|"]
  for name, row in results["projection"].items():
    lines.append(f"| {name} | {row['total_hours']} | {row['dominant']} | {row['hours']} |")
  lines += ["", "Command (from the repository root):", "", f"    {command}", ""]
  return "\n".join(lines)


def main(argv) -> None:
  del argv
  if FLAGS.recorded:
    results = json.loads(files.read_text(files.join(FLAGS.output, "results.json")))
    results["notes"] = FLAGS.note or results.get("notes", [])
    files.write_text(files.join(FLAGS.output, "results.json"), json.dumps(results, indent=1))
    files.write_text(files.join(FLAGS.output, "README.md"), _render(results, results["command"]))
    return
  command = "python " + " ".join(sys.argv)
  results = {"machine": f"{os.cpu_count()} cores, load average "
                        f"{os.getloadavg()[0]:.1f} at the start (shared)",
             "dataflow_cores": FLAGS.dataflow_cores, "command": command, "notes": FLAGS.note}
  if FLAGS.ntrex_sentences:
    results["real"] = real_end_to_end(FLAGS.saved_model, FLAGS.data_dir, FLAGS.ntrex_sentences,
                                      FLAGS.shards, FLAGS.work)
    print(json.dumps(results["real"], indent=1), flush=True)
  if FLAGS.n:
    results["corpus_scale"] = corpus_scale(FLAGS.n, FLAGS.d, FLAGS.shards, FLAGS.nprobe,
                                           FLAGS.work)
    print(json.dumps(results["corpus_scale"], indent=1), flush=True)
  else:  # --n=0: the corpus-scale part as --output's results.json recorded it
    recorded = json.loads(files.read_text(files.join(FLAGS.output, "results.json")))
    results["corpus_scale"] = recorded["corpus_scale"]
    # Its own command and machine only (the first of what a previous --n=0 run recorded).
    command = recorded["command"].split("\n")[0] + "\n    " + command
    results["machine"] = (recorded["machine"].split("; the NTREX part: ")[0]
                          + "; the NTREX part: " + results["machine"])
    results["command"] = command
  rate = results.get("real", {}).get("embed_sentences_per_second")
  results["projection"] = projection(results["corpus_scale"], rate, os.cpu_count(),
                                     FLAGS.dataflow_cores)
  results["machine"] += f", {os.getloadavg()[0]:.1f} at the end"
  files.write_text(files.join(FLAGS.output, "results.json"), json.dumps(results, indent=1))
  files.write_text(files.join(FLAGS.output, "README.md"), _render(results, command))
  print(files.read_text(files.join(FLAGS.output, "README.md")))


if __name__ == "__main__":
  _define_flags()
  app.run(main)
