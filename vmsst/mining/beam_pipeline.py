"""Bitext mining as an Apache Beam pipeline: the in-process miner's pairs, past one machine.

`python -m vmsst.mine` holds both sides in one process; at 10^8 sentences a
side that is a week of one machine. This pipeline runs the same mining as
stages on any Beam runner (the DirectRunner here, Dataflow at scale), each
stage writing its files under one output directory and a `_DONE` marker
last, so a rerun skips every finished stage (and every finished search task
of an unfinished one), as facebookresearch/stopes' global mining resumes
from its file cache:

  sentences/   read every file of a side (local or gs:// globs, Beam's
               filesystems; a file per task), drop empty lines, count lines that
               are not UTF-8 or hold a TAB, keep each sentence's first occurrence;
               rows in file order as `vmsst.mine` numbers them (so ties break
               alike), cut into S contiguous shards
  embeddings/  each shard embedded by Beam's RunInference with the exported
               SavedModel (`SavedModelHandler`), one .npy per shard
  index/       --index=ivf: each side's IVF cells trained once on a sample
               (`approximate.trained_index`, the in-process geometry)
  assign/      --index=ivf: one task per (direction, query shard): each query's
               nprobe cells among the other side's, found once for every key shard
  neighbours/  one task per (direction, key shard): the key shard added to a
               copy of the trained index (or searched exactly), every query
               of the other side searched against it; lists with global rows
  pairs.tsv    the shards' lists merged exactly (`approximate.merge_top_k`),
               margins, candidates, one-to-one and threshold by
               `bitext.mined_pairs`: the in-process miner's functions, one home

The copies of a trained index share its cells, so the merged lists are what
one index over all keys returns: exact search gives the in-process miner's
pairs, IVF-Flat the pairs of an in-process IVF over the same rows (codes,
--sq8 / --pq, re-rank each shard's candidates, so at least as many true
neighbours). The last stage holds both sides' neighbour lists, O((n + m) k),
in one worker: 10^9 a side is 64 GB, the bound of this design.
"""

import dataclasses
import json
from typing import Any, Iterable, Sequence

import apache_beam as beam
import numpy as np
from apache_beam.io.filesystems import FileSystems
from apache_beam.metrics import Metrics
from apache_beam.metrics.metric import MetricsFilter
from apache_beam.ml.inference import base

from vmsst import files
from vmsst.mining import bitext
from vmsst import text_files
from vmsst.mining import approximate
from vmsst.mining import neighbors
from vmsst.encoding import saved_model

SIDES = ("src", "trg")
DIRECTIONS = {"forward": ("src", "trg"), "backward": ("trg", "src")}  # (queries, keys)
STAGES = ("sentences", "embeddings", "index", "assign", "neighbours", "pairs")
IVF_ONLY = ("index", "assign")
DONE = "_DONE"
COUNTERS = ("lines", "empty", "not_utf8", "tab")


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
             "neighbours": {"k": self.k, "index": self.index}}
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

  def embeddings(self, side: str, shard: int) -> str:
    return files.join(self.stage("embeddings"), f"{side}-{shard:05d}-of-{self.shards:05d}.npy")

  def index(self, side: str) -> str:
    return files.join(self.stage("index"), f"{side}.faiss")

  def assignments(self, direction: str, shard: int) -> str:
    return files.join(self.stage("assign"), f"{direction}-queries-{shard:05d}.npz")

  def neighbours(self, direction: str, shard: int) -> str:
    return files.join(self.stage("neighbours"), f"{direction}-keys-{shard:05d}.npz")

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


def numbered_lines(element: tuple[int, str]) -> Iterable[tuple[str, tuple[int, int]]]:
  """(sentence, (file, line)) for each line `vmsst.mine` would keep; the rest counted.

  A file is the unit of reading (web crawls come as many files), split on "\n" only
  and cleaned as `text_files.read_lines` does, so the sentences are `mine`'s.
  """
  number, path = element
  count = lambda name: Metrics.counter("vmsst_mine_beam", name).inc()
  with FileSystems.open(path) as f:  # .gz and other suffixes decompressed by Beam
    data = f.read()
  lines = data.split(b"\n")
  if lines and lines[-1] == b"":
    lines.pop()
  for line_number, raw in enumerate(lines):
    count("lines")
    try:
      line = text_files.clean_line(raw.decode("utf-8"))
    except UnicodeDecodeError:
      count("not_utf8")
      continue
    if "\t" in line or "\0" in line:  # counted as "tab": a TAB would split the columns; NUL: binary
      count("tab")
    elif not line.strip():
      count("empty")
    else:
      yield line, (number, line_number)


def shard_bounds(total: int, shards: int) -> np.ndarray:
  """Row boundaries of contiguous shards whose sizes differ by at most one."""
  return np.linspace(0, total, shards + 1).round().astype(np.int64)


def rows_of_file(element, per_file: dict, shards: int):
  """A file's first occurrences in line order, as (shard, (row, sentence)); rows count up
  in file order over all files, so row order is `vmsst.mine`'s (ties to the earlier)."""
  number, lines = element
  offset = sum(n for f, n in per_file.items() if f < number)
  bounds = shard_bounds(sum(per_file.values()), shards)
  for rank, (_, sentence) in enumerate(sorted(lines)):
    row = offset + rank
    yield int(np.searchsorted(bounds, row, side="right") - 1), (row, sentence)


def write_sentence_shard(element, layout: Layout, side: str) -> None:
  shard, rows = element
  sentences = [sentence for _, sentence in sorted(rows)]
  files.write_text(layout.sentences(side, shard), "".join(s + "\n" for s in sentences))


def read_sentence_shard(layout: Layout, side: str, shard: int) -> list[str]:
  text = files.read_text(layout.sentences(side, shard))
  return text.split("\n")[:-1]


def _side_pipeline(pipeline, paths: list[str], layout: Layout, side: str, shards: int) -> None:
  numbered = (pipeline | beam.Create(list(enumerate(paths))) | "spread files" >> beam.Reshuffle()
              | "read" >> beam.FlatMap(numbered_lines))
  _ = (numbered | "kept" >> beam.combiners.Count.Globally()
       | beam.Map(lambda n: files.write_text(_kept_file(layout, side), str(n))))
  by_file = (numbered | "first occurrence" >> beam.CombinePerKey(min)
             | beam.Map(lambda kv: (kv[1][0], (kv[1][1], kv[0]))))
  per_file = by_file | "per file" >> beam.combiners.Count.PerKey()
  _ = (by_file | "by file" >> beam.GroupByKey()
       | beam.FlatMap(rows_of_file, beam.pvalue.AsDict(per_file), shards)
       | "by shard" >> beam.GroupByKey()
       | beam.Map(write_sentence_shard, layout, side))


def _kept_file(layout: Layout, side: str) -> str:
  return files.join(layout.stage("sentences"), f"{side}.kept")


def sentences_stage(patterns: dict[str, str], layout: Layout, settings: Settings,
                    options) -> None:
  """Reads, cleans and deduplicates each side into `settings.shards` shard files of rows
  in file order (first occurrences)."""
  paths = {side: input_files(patterns[side], side) for side in SIDES}
  counts = {}
  for side in SIDES:
    pipeline = beam.Pipeline(options=options)
    _side_pipeline(pipeline, paths[side], layout, side, settings.shards)
    counts[side] = _counters(_run(pipeline))
  for side in SIDES:  # a shard of no rows (fewer sentences than shards) still gets its file
    for shard in range(settings.shards):
      if not files.exists(layout.sentences(side, shard)):
        files.write_text(layout.sentences(side, shard), "")
  sizes = {side: [len(read_sentence_shard(layout, side, s)) for s in range(settings.shards)]
           for side in SIDES}
  for side in SIDES:
    kept = int(files.read_text(_kept_file(layout, side))) if files.exists(
        _kept_file(layout, side)) else 0
    counts[side]["duplicates"] = kept - sum(sizes[side])
    if not sum(sizes[side]):
      raise ValueError(f"--{side}={patterns[side]} holds no sentence to mine ({counts[side]}); "
                       "give UTF-8 text files, one sentence per line.")
  mark_done(layout, "sentences", settings, sizes=sizes, counts=counts, inputs=paths)


def _run(pipeline):
  result = pipeline.run()
  result.wait_until_finish()
  return result


def _counters(result) -> dict:
  """The stage's bad-input counts from Beam's metrics (zeros for counters never bumped)."""
  counts = dict.fromkeys(COUNTERS, 0)
  for counter in result.metrics().query(MetricsFilter().with_namespace(
      "vmsst_mine_beam"))["counters"]:
    counts[counter.key.metric.name] += counter.committed or counter.attempted or 0
  return counts


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


def _keyed_sentences(shard: int, layout: Layout, side: str):
  for row, sentence in enumerate(read_sentence_shard(layout, side, shard)):
    yield (shard, row), sentence


def write_embedding_shard(element, layout: Layout, side: str) -> None:
  shard, rows = element
  rows = sorted(rows, key=lambda r: r[0])
  matrix = np.stack([np.asarray(v, np.float32) for _, v in rows])
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
  """Each sentence shard embedded by RunInference; shards already written are skipped."""
  from apache_beam.ml.inference.base import KeyedModelHandler, RunInference  # pylint: disable=import-outside-toplevel
  pipeline = beam.Pipeline(options=options)
  for side in SIDES:
    todo = [s for s in range(settings.shards)
            if sizes[side][s] and not files.exists(layout.embeddings(side, s))]
    _ = (pipeline | f"{side} shards" >> beam.Create(todo) | f"{side} spread" >> beam.Reshuffle()
         | f"{side} sentences" >> beam.FlatMap(_keyed_sentences, layout, side)
         | f"{side} embed" >> RunInference(KeyedModelHandler(handlers[side]))
         | f"{side} by shard" >> beam.Map(lambda kv: (kv[0][0], (kv[0][1], kv[1].inference)))
         | f"{side} group" >> beam.GroupByKey()
         | f"{side} write" >> beam.Map(write_embedding_shard, layout, side))
  _run(pipeline)
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
  """A side's embedding shards as one float32 [rows, d] matrix, read lazily by rows.

  What the in-process search functions (approximate.trained_index,
  sampled_recall) take as a memory-mapped .npy: `len`, `shape`, slices and
  sorted row arrays.
  """

  def __init__(self, layout: Layout, side: str):
    self.parts = [files.load_npy(layout.embeddings(side, s), mmap=True)
                  for s in range(layout.shards)]
    self.starts = np.cumsum([0] + [len(p) for p in self.parts])
    self.shape = (int(self.starts[-1]), self.parts[0].shape[1])

  def __len__(self) -> int:
    return self.shape[0]

  def __getitem__(self, rows) -> np.ndarray:
    if isinstance(rows, slice):
      rows = np.arange(*rows.indices(len(self)))
    rows = np.asarray(rows, np.int64)
    out = np.empty((len(rows), self.shape[1]), np.float32)
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
  """The queries' k nearest keys within one key shard, as global key rows, to one file."""
  direction, shard = task
  path = layout.neighbours(direction, shard)
  if files.exists(path):  # resumption inside the stage
    return
  query_side, key_side = DIRECTIONS[direction]
  queries = ShardedRows(layout, query_side)
  keys_all = ShardedRows(layout, key_side)
  keys = np.asarray(keys_all.parts[shard], np.float32)
  k = min(settings.k, len(keys))
  search = _shard_search(layout, settings, key_side, keys, k)
  lists = [search(np.asarray(part, np.float32), _assigned(layout, settings, direction, s))
           for s, part in enumerate(queries.parts) if len(part)]
  scores = np.concatenate([s for s, _ in lists])
  rows = np.concatenate([r for _, r in lists])
  rows = np.where(rows < 0, -1, rows + keys_all.starts[shard])  # -1: not in this shard's cells
  files.save_npz(path + ".partial.npz", scores=scores, rows=rows)
  files.rename(path + ".partial.npz", path)


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


# Stage 6: margins, candidates, one-to-one, threshold (bitext.mined_pairs).

def merged_neighbourhoods(layout: Layout, settings: Settings) -> bitext.Neighbourhoods:
  """Both directions' lists over every key shard, merged exactly."""
  merged = []
  for direction in DIRECTIONS:
    lists = [files.load_npz(layout.neighbours(direction, s)) for s in range(settings.shards)]
    merged.extend(approximate.merge_top_k([(l["scores"], l["rows"]) for l in lists],
                                          settings.k))
  hood = bitext.Neighbourhoods(*merged)
  for name, rows in (("src->trg", hood.forward_indices), ("trg->src", hood.backward_indices)):
    if (rows < 0).any():
      raise ValueError(f"a {name} query found fewer than k={settings.k} neighbours in its "
                       f"{settings.ivf.nprobe} cells; raise --nprobe or lower --nlist.")
  return hood


def pairs_task(_, layout: Layout, settings: Settings) -> None:
  hood = merged_neighbourhoods(layout, settings)
  pairs, scores = bitext.mined_pairs(hood, margin=settings.margin,
                                     retrieval=settings.retrieval, threshold=settings.threshold)
  sentences = [sum((read_sentence_shard(layout, side, s) for s in range(settings.shards)), [])
               for side in SIDES]
  with files.open(layout.pairs() + ".partial", "w") as f:
    f.writelines(f"{score:.6f}\t{sentences[0][i]}\t{sentences[1][j]}\n"
                 for score, (i, j) in zip(scores.tolist(), pairs.tolist()))
  files.rename(layout.pairs() + ".partial", layout.pairs())
  recall = None
  if settings.index == "ivf" and settings.recall_sample:
    x, y = ShardedRows(layout, "src"), ShardedRows(layout, "trg")
    recall = {"forward": approximate.sampled_recall(x, y, hood.forward_indices,
                                                    settings.recall_sample),
              "backward": approximate.sampled_recall(y, x, hood.backward_indices,
                                                     settings.recall_sample)}
  mark_done(layout, "pairs", settings, written=len(pairs), recall=recall)


def pairs_stage(layout: Layout, settings: Settings, options) -> None:
  pipeline = beam.Pipeline(options=options)
  _ = pipeline | beam.Create([None]) | beam.Map(pairs_task, layout, settings)
  _run(pipeline)


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
  if stage == "neighbours":
    return neighbours_stage(layout, settings, options)
  return pairs_stage(layout, settings, options)


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
