"""Bitext mining as an Apache Beam pipeline: the in-process miner's pairs, past one machine.

`python -m vmsst.mine` holds both sides in one process; at 10^8 sentences a
side that is a week of one machine. This pipeline runs the same mining as
stages on any Beam runner (the DirectRunner here, Dask on a Slurm or Kubernetes
cluster, Dataflow), each
stage writing its files under one output directory and a `_DONE` marker
last, so a rerun skips every finished stage (and every finished search task
of an unfinished one), as facebookresearch/stopes' global mining resumes
from its file cache:

  sentences/   read every file of a side (local or gs:// globs, Beam's
               filesystems; a file per task), drop empty lines, count lines that
               are not UTF-8 or hold a TAB, keep each sentence's first occurrence;
               rows in file order as `vmsst.mine` numbers them (so ties break
               alike), cut into S contiguous shards
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
from typing import Any, Iterable, Sequence

import apache_beam as beam
import numpy as np
from apache_beam.io.filesystems import FileSystems
from apache_beam.ml.inference import base
from apache_beam.utils import shared

from vmsst import files
from vmsst.mining import bitext
from vmsst import text_files
from vmsst.mining import approximate
from vmsst.mining import neighbors
from vmsst.encoding import saved_model

SIDES = ("src", "trg")
DIRECTIONS = {"forward": ("src", "trg"), "backward": ("trg", "src")}  # (queries, keys)
STAGES = ("sentences", "embeddings", "index", "assign", "neighbours", "merge", "candidates",
          "pairs")
IVF_ONLY = ("index", "assign")
DONE = "_DONE"
COUNTERS = ("lines", "empty", "not_utf8", "tab")
DASK_RUNNER = "apache_beam.runners.dask.dask_runner.DaskRunner"


def beam_arguments(argv: Sequence[str]) -> list[str]:
  """Beam's flags as its runners take them: `--runner=DaskRunner` by its module path (Beam 2.77
  knows it by no short name), and unless --dask_npartitions or --dask_partition_size says
  otherwise, one element a Dask partition: the Dask runner puts a Create's first 128
  elements in one partition, one Dask task, and its Reshuffle does nothing, so a stage's
  few tasks (a shard each) would all run on one worker."""
  argv = [f"--runner={DASK_RUNNER}" if a == "--runner=DaskRunner" else a for a in argv]
  dask = any(a == f"--runner={DASK_RUNNER}" for a in argv)
  sized = any(a.startswith(("--dask_npartitions", "--dask_partition_size")) for a in argv)
  return argv + (["--dask_partition_size=1"] if dask and not sized else [])


@dataclasses.dataclass(frozen=True)
class Settings:
  """What the pairs depend on; a stage's marker records its share, so a rerun with other
  settings is an error naming the stage rather than a silent mix.

  Attributes:
    margin, retrieval, k, threshold: as `bitext.mine`.
    index: "exact" or "ivf".
    ivf: the IVF geometry (`shards` must be 1: the pipeline's shards share the cells).
    shards: sentence shards per side, the unit of embedding and of search.
    recall_sample: --index=ivf: queries per direction whose exact neighbours
      measure recall@k in the summary (0 skips it).
    batch_size: sentences per RunInference batch.
  """
  margin: str = "ratio"
  retrieval: str = "max"
  k: int = 4
  threshold: float | None = None
  index: str = "exact"
  ivf: approximate.IvfOptions = approximate.IvfOptions()
  shards: int = 4
  recall_sample: int = 1000
  batch_size: int = 256

  def check(self) -> None:
    """Raises ValueError naming the flag, before any stage runs."""
    bitext.check_scoring(self.margin, self.retrieval)
    if self.index not in bitext.INDEXES:
      raise ValueError(f"--index={self.index}; pick one of {bitext.INDEXES}.")
    if self.shards < 1 or self.k < 1 or self.batch_size < 1:
      raise ValueError(f"--shards={self.shards}, --k={self.k} and --batch_size="
                       f"{self.batch_size} must be >= 1.")
    if self.ivf.shards != 1:
      raise ValueError("the pipeline's --shards share one trained index; the in-process "
                       "miner's separately trained key slices (IvfOptions.shards) do not apply.")

  def stage_settings(self, stage: str) -> dict:
    """The settings a stage's files depend on (its marker's contents)."""
    share = {"sentences": {"shards": self.shards}, "embeddings": {}, "index": {
        "ivf": dataclasses.asdict(self.ivf)}, "assign": {},
             "neighbours": {"k": self.k, "index": self.index}, "merge": {},
             "candidates": {"margin": self.margin}}
    if stage == "pairs":
      return dataclasses.asdict(self)
    settings = {}
    for name in STAGES[:STAGES.index(stage) + 1]:
      settings.update(share[name])
    return json.loads(json.dumps(settings))


class Layout:
  """Where each stage keeps its files under the output directory."""

  def __init__(self, output: str, shards: int):
    self.output, self.shards = output, shards

  def stage(self, stage: str) -> str:
    return files.join(self.output, stage) if stage != "pairs" else self.output

  def sentences(self, side: str, shard: int) -> str:
    return files.join(self.stage("sentences"), f"{side}-{shard:05d}-of-{self.shards:05d}.txt")

  def part(self, side: str, number: int) -> str:
    """Input file `number`'s first occurrences, in line order."""
    return files.join(self.stage("sentences"), "parts", f"{side}-{number:06d}.txt")

  def embeddings(self, side: str, shard: int) -> str:
    return files.join(self.stage("embeddings"), f"{side}-{shard:05d}-of-{self.shards:05d}.npy")

  def index(self, side: str) -> str:
    return files.join(self.stage("index"), f"{side}.faiss")

  def assignments(self, direction: str, shard: int) -> str:
    return files.join(self.stage("assign"), f"{direction}-queries-{shard:05d}.npz")

  def neighbours(self, direction: str, shard: int) -> str:
    """A search task's last file, written after its lists: the task is done."""
    return files.join(self.stage("neighbours"), f"{direction}-keys-{shard:05d}.done")

  def lists(self, direction: str, key_shard: int, query_shard: int) -> str:
    return files.join(self.stage("neighbours"),
                      f"{direction}-keys-{key_shard:05d}-queries-{query_shard:05d}.npz")

  def merged(self, direction: str, shard: int, name: str) -> str:
    """name: "scores", "rows" (the merged lists) or "means" (`bitext.row_means`)."""
    return files.join(self.stage("merge"), f"{direction}-queries-{shard:05d}-{name}.npy")

  def candidates(self, direction: str, shard: int) -> str:
    return files.join(self.stage("candidates"), f"{direction}-queries-{shard:05d}.npz")

  def pairs(self) -> str:
    return files.join(self.output, "pairs.tsv")

  def marker(self, stage: str) -> str:
    return files.join(self.stage(stage), DONE if stage != "pairs" else "pairs.json")


def stage_done(layout: Layout, stage: str, settings: Settings) -> dict | None:
  """The stage's marker record when it finished with these settings; None when not run.

  Raises:
    ValueError: the stage finished with other settings (naming the directory).
  """
  marker = layout.marker(stage)
  if not files.exists(marker):
    return None
  record = json.loads(files.read_text(marker))
  if record.get("settings") != settings.stage_settings(stage):
    raise ValueError(f"{layout.stage(stage)} was written with {record.get('settings')}, not "
                     f"{settings.stage_settings(stage)}; pass a new --output or remove it.")
  return record


def mark_done(layout: Layout, stage: str, settings: Settings, **record) -> None:
  files.write_text(layout.marker(stage), json.dumps(
      {"settings": settings.stage_settings(stage), **record}, indent=1, sort_keys=True))


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


def shard_bounds(total: int, shards: int) -> np.ndarray:
  """Row boundaries of contiguous shards whose sizes differ by at most one."""
  return np.linspace(0, total, shards + 1).round().astype(np.int64)


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


def write_sentence_shard(shard: int, layout: Layout, side: str, parts: list[int]) -> None:
  """Shard `shard` of the side's rows (file order, first occurrences), from the part files
  it overlaps: rows are `vmsst.mine`'s, so ties break alike."""
  starts = np.cumsum([0] + parts)
  bounds = shard_bounds(int(starts[-1]), layout.shards)
  first, last = bounds[shard], bounds[shard + 1]
  sentences = []
  for number in np.flatnonzero((starts[:-1] < last) & (starts[1:] > first)).tolist():
    lines = files.read_text(layout.part(side, number)).split("\n")[:-1]
    sentences += lines[max(first - starts[number], 0):last - starts[number]]
  files.write_text(layout.sentences(side, shard), "".join(s + "\n" for s in sentences))


def read_sentence_shard(layout: Layout, side: str, shard: int) -> list[str]:
  text = files.read_text(layout.sentences(side, shard))
  return text.split("\n")[:-1]


def _read_pipeline(pipeline, paths: list[str], layout: Layout, side: str) -> None:
  """Read, first occurrences, a part file per input file; one chain, no side input (the
  Dask runner computes only the last step, and a side input anew in every task)."""
  read = (pipeline | beam.Create(list(enumerate(paths))) | "spread files" >> beam.Reshuffle()
          | "read" >> beam.Map(read_file))
  firsts = (read | beam.FlatMap(lambda r: ((line, (r[0], n)) for n, line in r[1]))
            | "first occurrence" >> beam.CombinePerKey(min)
            | beam.Map(lambda kv: (kv[1][0], (kv[1][1], kv[0]))))
  counts = read | "counts" >> beam.Map(lambda r: (r[0], r[2]))
  _ = ((firsts, counts) | beam.Flatten() | "by file" >> beam.GroupByKey()
       | beam.Map(write_part, layout, side) | beam.combiners.ToList()
       | beam.Map(write_read_summary, layout, side))


def _counts_file(layout: Layout, side: str) -> str:
  return files.join(layout.stage("sentences"), f"{side}.counts.json")


def sentences_stage(patterns: dict[str, str], layout: Layout, settings: Settings,
                    options) -> None:
  """Reads, cleans and deduplicates each side into `settings.shards` shard files of rows
  in file order (first occurrences): a pipeline of one task per file, then one of one task
  per shard.

  Raises:
    ValueError: a side with no sentence, or a runner that did not write what it reported.
  """
  paths = {side: input_files(patterns[side], side) for side in SIDES}
  counts, sizes = {}, {}
  for side in SIDES:
    pipeline = beam.Pipeline(options=options)
    _read_pipeline(pipeline, paths[side], layout, side)
    _run(pipeline)
    summary = _written_summary(layout, side, len(paths[side]))
    counts[side], parts = summary["counts"], summary["parts"]
    counts[side]["duplicates"] = counts[side].pop("kept") - sum(parts)
    if not sum(parts):
      raise ValueError(f"--{side}={patterns[side]} holds no sentence to mine ({counts[side]}); "
                       "give UTF-8 text files, one sentence per line.")
    pipeline = beam.Pipeline(options=options)
    _ = (pipeline | beam.Create(range(settings.shards)) | beam.Reshuffle()
         | beam.Map(write_sentence_shard, layout, side, parts))
    _run(pipeline)
    sizes[side] = [len(read_sentence_shard(layout, side, s)) if files.exists(
        layout.sentences(side, s)) else -1 for s in range(settings.shards)]
    if sizes[side] != np.diff(shard_bounds(sum(parts), settings.shards)).tolist():
      raise ValueError(f"{layout.stage('sentences')} holds {side} shards of {sizes[side]} "
                       f"sentences where the pipeline read {sum(parts)}; rerun with a new "
                       "--output.")
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


def _run(pipeline):
  """Runs a pipeline to its end; a Dask runner's client (one a run) is closed after it."""
  result = pipeline.run()
  try:
    result.wait_until_finish()
  finally:
    client = getattr(result, "client", None)
    if client is not None:
      client.close()
  return result


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

  def __init__(self, handlers: dict, layout: "Layout", batch_size: int):
    self._handlers, self._layout, self._batch_size = handlers, layout, batch_size
    self._shared = {side: shared.Shared() for side in handlers}

  def setup(self):
    self._models = {side: self._shared[side].acquire(handler.load_model)
                    for side, handler in self._handlers.items()}

  def process(self, element: tuple[str, int]):
    side, shard = element
    sentences = read_sentence_shard(self._layout, side, shard)
    handler, model = self._handlers[side], self._models[side]
    vectors = [np.asarray(result.inference, np.float32)
               for start in range(0, len(sentences), self._batch_size)
               for result in handler.run_inference(
                   sentences[start:start + self._batch_size], model)]
    write_embedding_shard(self._layout, side, shard, np.stack(vectors))
    yield element


def write_embedding_shard(layout: "Layout", side: str, shard: int, matrix: np.ndarray) -> None:
  bad = np.flatnonzero(~np.isfinite(matrix).all(axis=1))
  if len(bad):
    raise ValueError(f"the model embedded sentence {bad[0]} of "
                     f"{layout.sentences(side, shard)} as non-finite numbers.")
  _save_atomically(layout.embeddings(side, shard), matrix)


def _save_atomically(path: str, matrix: np.ndarray) -> None:
  """A crash mid-write leaves no file a rerun would take for done."""
  files.save_npy(path + ".partial.npy", matrix)
  files.rename(path + ".partial.npy", path)


def embeddings_stage(layout: Layout, settings: Settings, handlers: dict, options,
                     sizes: dict) -> None:
  """One task per sentence shard not yet embedded, both sides in one chain."""
  todo = [(side, s) for side in SIDES for s in range(settings.shards)
          if sizes[side][s] and not files.exists(layout.embeddings(side, s))]
  pipeline = beam.Pipeline(options=options)
  _ = (pipeline | beam.Create(todo) | beam.Reshuffle()
       | beam.ParDo(EmbedShard(handlers, layout, settings.batch_size)))
  _run(pipeline)
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


class ShardedRows:
  """A side's embedding shards as one float32 [rows, d] matrix, read lazily by rows (or any
  row-sharded .npy files: `paths`).

  What the in-process search functions (approximate.trained_index,
  sampled_recall) take as a memory-mapped .npy: `len`, `shape`, slices and
  row arrays.
  """

  def __init__(self, layout: Layout | None = None, side: str | None = None, *,
               paths: Sequence[str] = ()):
    paths = paths or [layout.embeddings(side, s) for s in range(layout.shards)]
    self.parts = [files.load_npy(path, mmap=True) for path in paths]
    self.starts = np.cumsum([0] + [len(p) for p in self.parts])
    self.shape = (int(self.starts[-1]), *self.parts[0].shape[1:])

  def __len__(self) -> int:
    return self.shape[0]

  def __getitem__(self, rows) -> np.ndarray:
    if isinstance(rows, slice):
      rows = np.arange(*rows.indices(len(self)))
    rows = np.asarray(rows, np.int64)
    out = np.empty((len(rows), *self.shape[1:]), self.parts[0].dtype)
    part = np.searchsorted(self.starts, rows, side="right") - 1
    for p in np.unique(part):
      picked = part == p
      local = rows[picked] - self.starts[p]
      out[picked] = (self.parts[p][local[0]:local[-1] + 1] if np.all(np.diff(local) == 1)
                     else self.parts[p][local])
    return out


# Stage 3: train the IVF cells.

def train_side(side: str, layout: Layout, settings: Settings) -> None:
  import faiss  # pylint: disable=import-outside-toplevel
  index = approximate.trained_index(ShardedRows(layout, side), settings.ivf)
  files.write_bytes(layout.index(side), faiss.serialize_index(index).tobytes())


def index_stage(layout: Layout, settings: Settings, options) -> None:
  pipeline = beam.Pipeline(options=options)
  _ = (pipeline | beam.Create(list(SIDES)) | beam.Reshuffle()
       | beam.Map(train_side, layout, settings))
  _run(pipeline)
  mark_done(layout, "index", settings)


# Stages 4 and 5: cells assigned, k-NN both ways, one task per (direction, shard).

def search_task(task: tuple[str, int], layout: Layout, settings: Settings) -> None:
  """The queries' k nearest keys within one key shard, as global key rows: a file per query
  shard (what a merge task reads), then the task's `.done` file."""
  direction, shard = task
  if files.exists(layout.neighbours(direction, shard)):  # resumption inside the stage
    return
  query_side, key_side = DIRECTIONS[direction]
  queries = ShardedRows(layout, query_side)
  keys_all = ShardedRows(layout, key_side)
  keys = np.asarray(keys_all.parts[shard], np.float32)
  k = min(settings.k, len(keys))
  search = _shard_search(layout, settings, key_side, keys, k)
  for query_shard, part in enumerate(queries.parts):
    scores, rows = (search(np.asarray(part, np.float32),
                           _assigned(layout, settings, direction, query_shard)) if len(part)
                    else (np.zeros((0, k)), np.zeros((0, k), np.int64)))
    rows = np.where(rows < 0, -1, rows + keys_all.starts[shard])  # -1: not in its cells
    path = layout.lists(direction, shard, query_shard)
    files.save_npz(path + ".partial.npz", scores=scores, rows=rows)
    files.rename(path + ".partial.npz", path)
  files.write_text(layout.neighbours(direction, shard), "")


def _shard_search(layout: Layout, settings: Settings, key_side: str, keys: np.ndarray, k: int):
  """(query shard, its cells) -> (float64 [q, k] cosines, int64 [q, k] shard rows)."""
  if not k:
    return lambda q, _: (np.zeros((len(q), 0), np.float64), np.zeros((len(q), 0), np.int64))
  if settings.index == "exact":
    return lambda q, _: neighbors.knn(q, keys, k, backend="faiss")
  index = _load_index(layout, key_side)
  options = settings.ivf
  for start in range(0, len(keys), options.block):
    index.add(approximate.similarity.normalize(keys[start:start + options.block]))
  index.nprobe = min(options.nprobe, index.nlist)
  return lambda q, cells: approximate.knn(q, keys, k, options, index=index, assignments=cells)


def _assigned(layout: Layout, settings: Settings, direction: str, shard: int):
  if settings.index == "exact":
    return None
  saved = files.load_npz(layout.assignments(direction, shard))
  return saved["scores"], saved["cells"]


def _load_index(layout: Layout, side: str):
  import faiss  # pylint: disable=import-outside-toplevel
  return faiss.deserialize_index(np.frombuffer(files.read_bytes(layout.index(side)), np.uint8))


def assign_task(task: tuple[str, int], layout: Layout, settings: Settings) -> None:
  """One query shard's nprobe nearest cells of the other side's index, to one file."""
  direction, shard = task
  path = layout.assignments(direction, shard)
  if files.exists(path):
    return
  query_side, key_side = DIRECTIONS[direction]
  queries = files.load_npy(layout.embeddings(query_side, shard))
  index = _load_index(layout, key_side)
  nprobe = min(settings.ivf.nprobe, index.nlist)
  scores = np.zeros((len(queries), nprobe), np.float32)
  cells = np.zeros((len(queries), nprobe), np.int64)
  for start in range(0, len(queries), settings.ivf.block):
    rows = slice(start, start + settings.ivf.block)
    scores[rows], cells[rows] = index.quantizer.search(
        approximate.similarity.normalize(queries[rows]), nprobe)
  files.save_npz(path + ".partial.npz", scores=scores, cells=cells)
  files.rename(path + ".partial.npz", path)


def assign_stage(layout: Layout, settings: Settings, options) -> None:
  _tasks_stage(layout, "assign", settings, options, assign_task, layout.assignments)


def _tasks_stage(layout: Layout, stage: str, settings: Settings, options, task, output) -> None:
  """One Beam task per (direction, shard), each skipped when its file exists."""
  tasks = [(d, s) for d in DIRECTIONS for s in range(settings.shards)]
  pipeline = beam.Pipeline(options=options)
  _ = (pipeline | beam.Create(tasks) | beam.Reshuffle() | beam.Map(task, layout, settings))
  _run(pipeline)
  missing = [output(*t) for t in tasks if not files.exists(output(*t))]
  if missing:
    raise ValueError(f"{len(missing)} {stage} tasks wrote no file ({missing[0]}); rerun to "
                     "do what is missing.")
  mark_done(layout, stage, settings)


def neighbours_stage(layout: Layout, settings: Settings, options) -> None:
  _tasks_stage(layout, "neighbours", settings, options, search_task, layout.neighbours)


# Stage 6: the key shards' lists merged, one task per (direction, query shard).

def merge_task(task: tuple[str, int], layout: Layout, settings: Settings) -> None:
  """One query shard's k best over every key shard, and each row's mean cosine."""
  direction, shard = task
  if files.exists(layout.merged(direction, shard, "means")):  # written last: the task is done
    return
  lists = [files.load_npz(layout.lists(direction, key_shard, shard))
           for key_shard in range(settings.shards)]
  scores, rows = approximate.merge_top_k([(l["scores"], l["rows"]) for l in lists], settings.k)
  if (rows < 0).any():
    name = "src->trg" if direction == "forward" else "trg->src"
    raise ValueError(f"a {name} query found fewer than k={settings.k} neighbours in its "
                     f"{settings.ivf.nprobe} cells; raise --nprobe or lower --nlist.")
  for name, array in (("scores", scores), ("rows", rows), ("means", bitext.row_means(scores))):
    _save_atomically(layout.merged(direction, shard, name), array)


def merge_stage(layout: Layout, settings: Settings, options) -> None:
  _tasks_stage(layout, "merge", settings, options, merge_task,
               lambda d, s: layout.merged(d, s, "means"))


def merged_neighbourhoods(layout: Layout, settings: Settings) -> bitext.Neighbourhoods:
  """Both directions' merged lists, whole (for tests and small runs: O((n + m) k))."""
  whole = lambda d, name: np.concatenate([files.load_npy(layout.merged(d, s, name))
                                          for s in range(settings.shards)])
  return bitext.Neighbourhoods(whole("forward", "scores"), whole("forward", "rows"),
                               whole("backward", "scores"), whole("backward", "rows"))


# Stage 7: each row's best candidate, one task per (direction, query shard).

def candidates_task(task: tuple[str, int], layout: Layout, settings: Settings) -> None:
  """`bitext`'s best candidate of each of the shard's rows; the other side's means are read
  (memory-mapped) at its neighbours' rows only."""
  direction, shard = task
  path = layout.candidates(direction, shard)
  if files.exists(path):
    return
  cosines = files.load_npy(layout.merged(direction, shard, "scores"))
  others = files.load_npy(layout.merged(direction, shard, "rows"))
  first = _shard_starts(layout, DIRECTIONS[direction][0])[shard]
  rows = np.broadcast_to(first + np.arange(len(others))[:, None], others.shape)
  scoring = bitext.MARGINS[settings.margin]
  means = (None, None)
  if scoring != "cosine":
    own = files.load_npy(layout.merged(direction, shard, "means"))[:, None]
    other = "backward" if direction == "forward" else "forward"
    gathered = ShardedRows(paths=[layout.merged(other, s, "means")
                                  for s in range(settings.shards)])[others.ravel()]
    means = (own, gathered.reshape(others.shape))
  backward = direction == "backward"
  sources, targets = (others, rows) if backward else (rows, others)
  pairs, scores = bitext.best_of_rows(bitext.margin_scores(
      cosines, *(means[::-1] if backward else means), scoring), sources, targets)
  files.save_npz(path + ".partial.npz", pairs=pairs, scores=scores)
  files.rename(path + ".partial.npz", path)


def _shard_starts(layout: Layout, side: str) -> np.ndarray:
  sizes = json.loads(files.read_text(layout.marker("sentences")))["sizes"][side]
  return np.cumsum([0] + sizes)


def candidates_stage(layout: Layout, settings: Settings, options) -> None:
  _tasks_stage(layout, "candidates", settings, options, candidates_task, layout.candidates)


# Stage 8: one-to-one and threshold, one task over one candidate a row.

def pairs_task(_, layout: Layout, settings: Settings) -> None:
  """`bitext.mined_pairs` over the shards' candidates in row order: the one-task pairs."""
  best = {d: [files.load_npz(layout.candidates(d, s)) for s in range(settings.shards)]
          for d in DIRECTIONS}
  forward, backward = ((np.concatenate([c["pairs"] for c in best[d]]),
                        np.concatenate([c["scores"] for c in best[d]])) for d in DIRECTIONS)
  pairs, scores = bitext.selected(*bitext.retrieved(
      forward, backward, bitext.RETRIEVALS[settings.retrieval]), settings.threshold)
  sentences = [_sentences_at(layout, side, pairs[:, i]) for i, side in enumerate(SIDES)]
  with files.open(layout.pairs() + ".partial", "w") as f:
    f.writelines(f"{score:.6f}\t{sentences[0][i]}\t{sentences[1][j]}\n"
                 for score, (i, j) in zip(scores.tolist(), pairs.tolist()))
  files.rename(layout.pairs() + ".partial", layout.pairs())
  recall = None
  if settings.index == "ivf" and settings.recall_sample:
    x, y = ShardedRows(layout, "src"), ShardedRows(layout, "trg")
    found = {d: ShardedRows(paths=[layout.merged(d, s, "rows") for s in range(settings.shards)])
             for d in DIRECTIONS}
    recall = {"forward": approximate.sampled_recall(x, y, found["forward"],
                                                    settings.recall_sample),
              "backward": approximate.sampled_recall(y, x, found["backward"],
                                                     settings.recall_sample)}
  mark_done(layout, "pairs", settings, written=len(pairs), recall=recall)


def _sentences_at(layout: Layout, side: str, rows: np.ndarray) -> dict[int, str]:
  """{row: sentence} for the given rows only, a shard at a time (not the whole side)."""
  wanted, starts, found = set(rows.tolist()), _shard_starts(layout, side), {}
  for shard in range(layout.shards):
    if any(starts[shard] <= r < starts[shard + 1] for r in wanted):
      for row, sentence in enumerate(read_sentence_shard(layout, side, shard), starts[shard]):
        if row in wanted:
          found[row] = sentence
  return found


def pairs_stage(layout: Layout, settings: Settings, options) -> None:
  pipeline = beam.Pipeline(options=options)
  _ = pipeline | beam.Create([None]) | beam.Map(pairs_task, layout, settings)
  _run(pipeline)
  if not files.exists(layout.marker("pairs")):
    raise ValueError(f"the runner wrote no {layout.marker('pairs')}: its task did not run; "
                     "rerun, or run with --runner=DirectRunner to see why.")


def run(patterns: dict[str, str], output: str, settings: Settings, options,
        handlers: dict | None = None) -> dict:
  """Runs every stage not yet done; the summary: each stage's seconds (None: skipped), the
  sentence counts, pairs written and recall.

  Args:
    patterns: {"src": ..., "trg": ...}: comma-separated files or globs, local or gs://.
    output: the directory of the stages' files and pairs.tsv.
    settings: the mining settings.
    options: Beam's PipelineOptions (the runner and its settings).
    handlers: {"src": ..., "trg": ...} RunInference model handlers (SavedModelHandler);
      needed only while the embeddings stage is not done.

  Raises:
    ValueError: bad settings, a pattern matching no file, a side with no
      sentence, a stage written with other settings (each naming the fix).
  """
  import time  # pylint: disable=import-outside-toplevel
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
