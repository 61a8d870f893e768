"""Bitext mining as an Apache Beam pipeline: the in-process miner's pairs, past one machine.

`python -m vmsst.mine` holds both sides in one process; at 10^8 sentences a
side that is a week of one machine. This pipeline runs the same mining as
stages on any Beam runner (the DirectRunner here, Dask on a Slurm or Kubernetes
cluster, Dataflow), each stage writing its files under one output directory
and a `_DONE` marker last, so a rerun skips every finished stage (and every
finished search task of an unfinished one), as facebookresearch/stopes' global
mining resumes from its file cache:

  sentences/   read every file of a side (local or gs:// globs, Beam's
               filesystems; a file per task), drop empty lines, count lines that
               are not UTF-8 or hold a TAB, keep each sentence's first occurrence
               (a part file per input file); rows in file order as `vmsst.mine`
               numbers them (so ties break alike), cut into S contiguous shards,
               one task per shard reading the parts it overlaps
  embeddings/  one task per shard: embedded in batches by a RunInference model handler
               (`SavedModelHandler` for the exported SavedModel), one .npy per shard
  index/       --index=ivf: each side's IVF cells trained once on a sample
               (`approximate.trained_index`, the in-process geometry)
  assign/      --index=ivf: one task per (direction, query shard): each query's
               nprobe cells among the other side's, found once for every key shard
  neighbours/  one task per (direction, key shard): the key shard added to a
               copy of the trained index (or searched exactly), every query
               of the other side searched against it; lists with global rows,
               a file per query shard
  merge/       one task per (direction, query shard): its lists of every key shard
               merged exactly (`approximate.merge_top_k`) and each row's mean
               cosine, its share of the margin
  candidates/  one task per (direction, query shard): each row's best candidate by
               margin (`bitext.margin_scores`, `best_of_rows`), the other side's means
               read for its neighbours' rows only
  pairs.tsv    one task: the candidates in row order, `bitext.retrieved` (one-to-one for
               max, mutual for intersect) and the threshold: the in-process miner's
               functions, one home

This module holds the reading and embedding stages and `run`; the settings, file
layout, markers and runner plumbing are `beam_layout.py`'s, the search stages (index to
pairs) `beam_search.py`'s.

The copies of a trained index share its cells, so the merged lists are what
one index over all keys returns: exact search gives the in-process miner's
pairs, IVF-Flat the pairs of an in-process IVF over the same rows (codes,
--sq8 / --pq, re-rank each shard's candidates, so at least as many true
neighbours). Two steps are single tasks, both bounded: the IVF cells are
trained once a side on a sample (`IvfOptions.train_size`, as stopes trains
its index; assigning and searching are spread), and the last stage holds one
candidate a row, 24 bytes (10^9 a side: 48 GB), for the greedy one-to-one
pass, which is sequential by definition; it reads only the paired sentences.

Beam's Dask runner (2.77) has limits every stage here avoids (`beam_arguments`,
docs/results/beam_mining/): it computes only the last transform a pipeline
applies, so each pipeline is one chain; outputs a DoFn emits in `finish_bundle`
are dropped (RunInference's BatchElements loses each bundle's last batch;
WriteToText writes nothing), so each task writes its own files and the driver
checks they are there; it has no metrics, so the bad-input counts travel as data;
it computes a side input anew in each task that reads it.
"""

import dataclasses
import json
import time
from typing import Any, Sequence

import apache_beam as beam
import numpy as np
from apache_beam.io.filesystems import FileSystems
from apache_beam.ml.inference import base
from apache_beam.utils import shared

from vmsst.base import files
from vmsst.base import text_files
from vmsst.encoding import saved_model
from vmsst.mining import bitext
# What callers reach through this module (`bp.Layout`, `bp.Settings`, ...) lives in these two.
from vmsst.mining.beam_layout import (  # pylint: disable=unused-import
    COUNTERS, DASK_RUNNER, DIRECTIONS, DONE, IVF_ONLY, SIDES, STAGES, Layout, Settings,
    ShardedRows, beam_arguments, mark_done, read_sentence_shard, run_pipeline,
    save_atomically, shard_bounds, stage_done)
from vmsst.mining.beam_search import (  # pylint: disable=unused-import
    assign_stage, candidates_stage, index_stage, merge_stage, merged_neighbourhoods,
    neighbours_stage, pairs_stage)


# Stage 1: read and deduplicate.

def input_files(pattern: str, flag: str) -> list[str]:
  """The files of a comma-separated list of paths or globs, in order (a glob's by name).

  Raises:
    ValueError: naming the flag and the part that matches no file.
  """
  paths = []
  for part in pattern.split(","):
    matched = sorted(m.path for m in FileSystems.match([part])[0].metadata_list)
    if not matched:
      raise ValueError(f"--{flag}={part} matches no file; give a file or a glob of UTF-8 "
                       "text files, one sentence per line (local or gs://).")
    if files.isdir(part):
      raise ValueError(f"--{flag}={part} is a directory; give its files as a glob "
                       f"(--{flag}='{part.rstrip('/')}/*').")
    paths.extend(matched)
  return paths


def read_file(element: tuple[int, str]) -> tuple[int, list[tuple[int, str]], dict]:
  """(file, [(line, sentence)] `vmsst.mine` would keep, the file's counts of what it skipped).

  A file is the unit of reading (web crawls come as many files), split on "\n" only
  and cleaned as `text_files.read_lines` does, so the sentences are `mine`'s. The
  counts travel as data, not Beam metrics: the Dask runner has none.
  """
  number, path = element
  counts = dict.fromkeys(COUNTERS + ("kept",), 0)
  with FileSystems.open(path) as f:  # .gz and other suffixes decompressed by Beam
    data = f.read()
  lines = data.split(b"\n")
  if lines and lines[-1] == b"":
    lines.pop()
  kept = []
  for line_number, raw in enumerate(lines):
    try:
      line = text_files.clean_line(raw.decode("utf-8"))
    except UnicodeDecodeError:
      counts["not_utf8"] += 1
      continue
    if "\t" in line or "\0" in line:  # counted as "tab": a TAB would split the columns; NUL: binary
      counts["tab"] += 1
    elif not line.strip():
      counts["empty"] += 1
    else:
      kept.append((line_number, line))
  counts.update(lines=len(lines), kept=len(kept))
  return number, kept, counts


def write_part(element, layout: Layout, side: str) -> tuple[int, int, dict]:
  """A file's first occurrences, in line order, to its part file: (file, how many, counts).

  element: (file, [(line, sentence) first seen in this file] + [its counts dict]); the
  counts ride in the same group so a file whose every line was seen earlier still reports.
  """
  number, values = element
  counts = next(v for v in values if isinstance(v, dict))
  sentences = [sentence for _, sentence in sorted(v for v in values if not isinstance(v, dict))]
  files.write_text(layout.part(side, number), "".join(s + "\n" for s in sentences))
  return number, len(sentences), counts


def write_read_summary(parts: list, layout: Layout, side: str) -> None:
  """The side's per-file sizes and summed counts, the last step of the read pipeline."""
  total = dict.fromkeys(COUNTERS + ("kept",), 0)
  for _, _, counts in parts:
    for name, value in counts.items():
      total[name] += value
  sizes = [n for _, n, _ in sorted(parts)]
  files.write_text(_counts_file(layout, side), json.dumps({"counts": total, "parts": sizes}))


def write_sentence_shard(task: tuple[str, int], layout: Layout, parts: dict) -> None:
  """Shard `shard` of a side's rows (file order, first occurrences), from the part files it
  overlaps (`parts`: each side's sizes of its part files): rows are `vmsst.mine`'s, so ties
  break alike."""
  side, shard = task
  starts = np.cumsum([0] + parts[side])
  bounds = shard_bounds(int(starts[-1]), layout.shards)
  first, last = bounds[shard], bounds[shard + 1]
  sentences = []
  for number in np.flatnonzero((starts[:-1] < last) & (starts[1:] > first)).tolist():
    lines = files.read_text(layout.part(side, number)).split("\n")[:-1]
    sentences += lines[max(first - starts[number], 0):last - starts[number]]
  files.write_text(layout.sentences(side, shard), "".join(s + "\n" for s in sentences))


@beam.ptransform_fn
def _ReadSide(pbegin, paths: list[str], layout: Layout, side: str):  # pylint: disable=invalid-name
  """Read, first occurrences, a part file per input file; one chain, no side input (the
  Dask runner computes only the last step, and a side input anew in every task)."""
  read = (pbegin | beam.Create(list(enumerate(paths))) | "spread files" >> beam.Reshuffle()
          | "read" >> beam.Map(read_file))
  firsts = (read | beam.FlatMap(lambda r: ((line, (r[0], n)) for n, line in r[1]))
            | "first occurrence" >> beam.CombinePerKey(min)
            | beam.Map(lambda kv: (kv[1][0], (kv[1][1], kv[0]))))
  counts = read | "counts" >> beam.Map(lambda r: (r[0], r[2]))
  return ((firsts, counts) | beam.Flatten() | "by file" >> beam.GroupByKey()
          | beam.Map(write_part, layout, side) | beam.combiners.ToList()
          | beam.Map(write_read_summary, layout, side))


def _counts_file(layout: Layout, side: str) -> str:
  return files.join(layout.stage("sentences"), f"{side}.counts.json")


def sentences_stage(patterns: dict[str, str], layout: Layout, settings: Settings,
                    options) -> None:
  """Reads, cleans and deduplicates each side into `settings.shards` shard files of rows
  in file order (first occurrences): a pipeline of one task per file, both sides' chains
  ending in one step, then one of one task per shard.

  Raises:
    ValueError: a side with no sentence, or a runner that did not write what it reported.
  """
  paths = {side: input_files(patterns[side], side) for side in SIDES}
  pipeline = beam.Pipeline(options=options)
  ends = [pipeline | f"read {side}" >> _ReadSide(paths[side], layout, side) for side in SIDES]
  _ = ends | "both sides" >> beam.Flatten()
  run_pipeline(pipeline)
  counts, parts, sizes = {}, {}, {}
  for side in SIDES:
    summary = _written_summary(layout, side, len(paths[side]))
    counts[side], parts[side] = summary["counts"], summary["parts"]
    counts[side]["duplicates"] = counts[side].pop("kept") - sum(parts[side])
    if not sum(parts[side]):
      raise ValueError(f"--{side}={patterns[side]} holds no sentence to mine ({counts[side]}); "
                       "give UTF-8 text files, one sentence per line.")
  pipeline = beam.Pipeline(options=options)
  _ = (pipeline | beam.Create([(side, s) for side in SIDES for s in range(settings.shards)])
       | beam.Reshuffle() | beam.Map(write_sentence_shard, layout, parts))
  run_pipeline(pipeline)
  for side in SIDES:
    sizes[side] = [len(read_sentence_shard(layout, side, s)) if files.exists(
        layout.sentences(side, s)) else -1 for s in range(settings.shards)]
    if sizes[side] != np.diff(shard_bounds(sum(parts[side]), settings.shards)).tolist():
      raise ValueError(f"{layout.stage('sentences')} holds {side} shards of {sizes[side]} "
                       f"sentences where the pipeline read {sum(parts[side])}; rerun with a "
                       "new --output.")
  mark_done(layout, "sentences", settings, sizes=sizes, counts=counts, inputs=paths)


def _written_summary(layout: Layout, side: str, inputs: int) -> dict:
  """The read pipeline's summary, checked against its inputs: a step that did not run is an
  error, not a side with fewer sentences."""
  path = _counts_file(layout, side)
  summary = json.loads(files.read_text(path)) if files.exists(path) else {"parts": []}
  if len(summary["parts"]) != inputs:
    raise ValueError(f"the runner read {len(summary['parts'])} of the {inputs} --{side} "
                     f"files (summary: {path}); rerun, or run with --runner=DirectRunner to "
                     "see why.")
  return summary


# Stage 2: embed.

class SavedModelHandler(base.ModelHandler[str, base.PredictionResult, Any]):
  """RunInference's handler for the SavedModel `python -m vmsst.export` writes.

  Why not Beam's TFModelHandlerTensor: in Beam 2.77 it loads with
  `tf.keras.models.load_model`, and Keras 3 (TensorFlow 2.21's) loads only
  .keras / .h5 files, not a SavedModel directory; its module also imports
  tensorflow_hub, which pins tf-keras (Keras 2) against this stack. The
  export's graph is a `serving_default` signature (strings in, tokenizer in
  the graph), which `saved_model.SavedModelEncoder` calls; a two-tower
  export's side is picked by `language` as `vmsst.mine` picks it.
  """

  def __init__(self, path: str, language: str | None = None, batch_size: int = 256):
    super().__init__(min_batch_size=1, max_batch_size=batch_size)
    self._path, self._language = path, language

  def load_model(self) -> saved_model.SavedModelEncoder:
    return saved_model.SavedModelEncoder(self._path)

  def run_inference(self, batch: Sequence[str], model, inference_args=None):
    vectors = model.encode(list(batch), model.tower_of(self._language) or "a")
    return [base.PredictionResult(s, v) for s, v in zip(batch, vectors)]


class EmbedShard(beam.DoFn):
  """One sentence shard embedded in batches by its side's model handler, to one .npy.

  Why not RunInference: its BatchElements emits each bundle's last batch from
  `finish_bundle`, which the Dask runner drops (sentences silently missing); a
  shard task also needs no shuffle of vectors. The handlers are RunInference's
  (`load_model`, `run_inference`), and the model is shared by the threads of a
  worker process as RunInference shares it (`apache_beam.utils.shared`).
  """

  def __init__(self, handlers: dict, layout: Layout, batch_size: int):
    self._handlers, self._layout, self._batch_size = handlers, layout, batch_size
    self._shared = {side: shared.Shared() for side in handlers}

  def setup(self):
    self._models = {}

  def _model(self, side: str):
    """A side's model, loaded at its first shard: a task of one side loads only its model."""
    if side not in self._models:
      self._models[side] = self._shared[side].acquire(self._handlers[side].load_model)
    return self._models[side]

  def process(self, element: tuple[str, int]):
    side, shard = element
    sentences = read_sentence_shard(self._layout, side, shard)
    handler, model = self._handlers[side], self._model(side)
    vectors = [np.asarray(result.inference, np.float32)
               for start in range(0, len(sentences), self._batch_size)
               for result in handler.run_inference(
                   sentences[start:start + self._batch_size], model)]
    write_embedding_shard(self._layout, side, shard, np.stack(vectors))
    yield element


def write_embedding_shard(layout: Layout, side: str, shard: int, matrix: np.ndarray) -> None:
  bad = np.flatnonzero(~np.isfinite(matrix).all(axis=1))
  if len(bad):
    raise ValueError(f"the model embedded sentence {bad[0]} of "
                     f"{layout.sentences(side, shard)} as non-finite numbers.")
  save_atomically(layout.embeddings(side, shard), matrix)


def embeddings_stage(layout: Layout, settings: Settings, handlers: dict, options,
                     sizes: dict) -> None:
  """One task per sentence shard not yet embedded, both sides in one chain."""
  todo = [(side, s) for side in SIDES for s in range(settings.shards)
          if sizes[side][s] and not files.exists(layout.embeddings(side, s))]
  pipeline = beam.Pipeline(options=options)
  _ = (pipeline | beam.Create(todo) | beam.Reshuffle()
       | beam.ParDo(EmbedShard(handlers, layout, settings.batch_size)))
  run_pipeline(pipeline)
  missing = [layout.embeddings(*t) for t in todo if not files.exists(layout.embeddings(*t))]
  if missing:
    raise ValueError(f"{len(missing)} embedding tasks wrote no file ({missing[0]}); rerun to "
                     "do what is missing.")
  widths = {files.load_npy(layout.embeddings(side, s), mmap=True).shape[1]
            for side in SIDES for s in range(settings.shards) if sizes[side][s]}
  if len(widths) != 1:
    raise ValueError(f"the sides' embeddings have widths {sorted(widths)}; embed both sides "
                     "with the same model.")
  for side in SIDES:  # empty shards: zero rows of the common width
    for shard in range(settings.shards):
      if not sizes[side][shard]:
        files.save_npy(layout.embeddings(side, shard), np.zeros((0, *widths), np.float32))
  mark_done(layout, "embeddings", settings, width=widths.pop())


def run(patterns: dict[str, str], output: str, settings: Settings, options,
        handlers: dict | None = None) -> dict:
  """Runs every stage not yet done; the summary: each stage's seconds (None: skipped), the
  sentence counts, pairs written and recall.

  Args:
    patterns: {"src": ..., "trg": ...}: comma-separated files or globs, local or gs://.
    output: the directory of the stages' files and pairs.tsv.
    settings: the mining settings.
    options: Beam's PipelineOptions (the runner and its settings), built from
      `beam_arguments(argv)`: the Dask runner needs what it adds.
    handlers: {"src": ..., "trg": ...} RunInference model handlers (SavedModelHandler);
      needed only while the embeddings stage is not done.

  Raises:
    ValueError: bad settings, a pattern matching no file, a side with no
      sentence, a stage written with other settings (each naming the fix).
  """
  settings.check()
  layout = Layout(output, settings.shards)
  seconds = {}
  for stage in STAGES:
    if stage in IVF_ONLY and settings.index == "exact":
      continue
    if stage_done(layout, stage, settings) is not None:
      seconds[stage] = None
      continue
    start = time.perf_counter()
    _run_stage(stage, patterns, layout, settings, options, handlers)
    seconds[stage] = time.perf_counter() - start
    record = json.loads(files.read_text(layout.marker(stage)))
    files.write_text(layout.marker(stage), json.dumps({**record, "seconds": seconds[stage]},
                                                      indent=1, sort_keys=True))
  sentences = stage_done(layout, "sentences", settings)
  done = stage_done(layout, "pairs", settings)
  recorded = {stage: (stage_done(layout, stage, settings) or {}).get("seconds")
              for stage in seconds}
  return {"seconds": seconds, "recorded_seconds": recorded, "counts": sentences["counts"],
          "sentences": {side: sum(sentences["sizes"][side]) for side in SIDES},
          "written": done["written"], "recall": done["recall"], "pairs": layout.pairs()}


def describe(summary: dict) -> str:
  """`run`'s summary as `python -m vmsst.mine_beam` prints it.

  Stages run or skipped, what was read, the pairs written, the recall.
  """
  stages = ", ".join(f"{stage} {'skipped (done)' if s is None else f'{s:.1f} s'}"
                     for stage, s in summary["seconds"].items())
  lines = [f"stages: {stages}"]
  for side, counts in summary["counts"].items():
    lines.append(f"{side}: {counts['lines']} lines, {summary['sentences'][side]} distinct "
                 f"sentences ({counts['empty']} empty, {counts['duplicates']} repeated, "
                 f"{counts['not_utf8']} not UTF-8, {counts['tab']} with a TAB skipped)")
  recall = summary["recall"]
  if recall:
    lines.append(f"recall@k against exact on a sample: {recall['forward']:.3f} (src->trg) / "
                 f"{recall['backward']:.3f} (trg->src)")
  lines.append(f"{summary['written']} pairs written to {summary['pairs']}")
  return "\n".join(lines)


def _run_stage(stage: str, patterns, layout: Layout, settings: Settings, options,
               handlers) -> None:
  if stage == "sentences":
    return sentences_stage(patterns, layout, settings, options)
  sizes = stage_done(layout, "sentences", settings)["sizes"]
  if stage == "embeddings":
    if handlers is None:
      raise ValueError("the embeddings stage needs a model: pass --saved_model.")
    return embeddings_stage(layout, settings, handlers, options, sizes)
  bitext.check_k(settings.k, sum(sizes["src"]), sum(sizes["trg"]))
  if stage == "index":
    width = stage_done(layout, "embeddings", settings)["width"]
    for side in SIDES:
      settings.ivf.check(sum(sizes[side]), width)
    return index_stage(layout, settings, options)
  if stage == "assign":
    return assign_stage(layout, settings, options)
  stage_functions = {"neighbours": neighbours_stage, "merge": merge_stage,
                     "candidates": candidates_stage, "pairs": pairs_stage}
  return stage_functions[stage](layout, settings, options)


class PrecomputedHandler(base.ModelHandler[str, base.PredictionResult, Any]):
  """RunInference over a {sentence: vector} table: embeddings computed elsewhere (planted
  pairs, a cache of another encoder's vectors) go through the same stages as a model's."""

  def __init__(self, table: dict, batch_size: int = 256):
    super().__init__(min_batch_size=1, max_batch_size=batch_size)
    self._table = table

  def load_model(self) -> "_Table":
    return _Table(self._table)  # RunInference keeps its model by weak reference: not a dict

  def run_inference(self, batch: Sequence[str], model, inference_args=None):
    return [base.PredictionResult(s, np.asarray(model.vectors[s], np.float32)) for s in batch]


@dataclasses.dataclass
class _Table:
  vectors: dict
