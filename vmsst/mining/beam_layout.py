"""What every stage of the Beam miner (beam_pipeline.py) shares: its settings, where each
stage keeps its files, the `_DONE` markers, and running a pipeline on any runner.

Beam's Dask runner (2.77) shapes `run_pipeline` and `tasks_stage`: it computes only the last
transform a pipeline applies and drops what a DoFn emits from `finish_bundle`, so a stage is
one chain of tasks that each write their own files, and the driver checks every file is there.
"""

import dataclasses
import json
from typing import Sequence

import apache_beam as beam
import numpy as np

from vmsst.base import files
from vmsst.mining import approximate
from vmsst.mining import bitext

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
    batch_size: sentences per batch of the model handler.
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


def shard_bounds(total: int, shards: int) -> np.ndarray:
  """Row boundaries of contiguous shards whose sizes differ by at most one."""
  return np.linspace(0, total, shards + 1).round().astype(np.int64)


def read_sentence_shard(layout: Layout, side: str, shard: int) -> list[str]:
  text = files.read_text(layout.sentences(side, shard))
  return text.split("\n")[:-1]


def save_atomically(path: str, matrix: np.ndarray) -> None:
  """A crash mid-write leaves no file a rerun would take for done."""
  files.save_npy(path + ".partial.npy", matrix)
  files.rename(path + ".partial.npy", path)


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


def run_pipeline(pipeline):
  """Runs a pipeline to its end; a Dask runner's client (one a run) is closed after it."""
  result = pipeline.run()
  try:
    result.wait_until_finish()
  finally:
    client = getattr(result, "client", None)
    if client is not None:
      client.close()
  return result


def tasks_stage(layout: Layout, stage: str, settings: Settings, options, task, output) -> None:
  """One Beam task per (direction, shard), each skipped when its file exists."""
  tasks = [(d, s) for d in DIRECTIONS for s in range(settings.shards)]
  pipeline = beam.Pipeline(options=options)
  _ = (pipeline | beam.Create(tasks) | beam.Reshuffle() | beam.Map(task, layout, settings))
  run_pipeline(pipeline)
  missing = [output(*t) for t in tasks if not files.exists(output(*t))]
  if missing:
    raise ValueError(f"{len(missing)} {stage} tasks wrote no file ({missing[0]}); rerun to "
                     "do what is missing.")
  mark_done(layout, stage, settings)


def shard_starts(layout: Layout, side: str) -> np.ndarray:
  sizes = json.loads(files.read_text(layout.marker("sentences")))["sizes"][side]
  return np.cumsum([0] + sizes)
