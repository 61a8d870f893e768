"""The Beam miner's search stages (beam_pipeline.py runs them): IVF cells trained once a side
on a sample, cells assigned and k-NN searched per shard, the key shards' lists merged and each
row's best candidate per query shard, then one task for one-to-one and the threshold.
"""

import apache_beam as beam
import numpy as np

from vmsst.base import files
from vmsst.mining import approximate
from vmsst.mining import bitext
from vmsst.mining import neighbors
from vmsst.mining.beam_layout import (DIRECTIONS, SIDES, Layout, Settings, ShardedRows,
                                      mark_done, read_sentence_shard, run_pipeline,
                                      save_atomically, shard_starts, tasks_stage)


# Stage 3: train the IVF cells.

def train_side(side: str, layout: Layout, settings: Settings) -> None:
  """One side's IVF cells, trained on a sample (`IvfOptions.train_size`): a single task a side,
  bounded by the sample rather than the side, as stopes trains its index."""
  import faiss  # pylint: disable=import-outside-toplevel
  index = approximate.trained_index(ShardedRows(layout, side), settings.ivf)
  files.write_bytes(layout.index(side), faiss.serialize_index(index).tobytes())


def index_stage(layout: Layout, settings: Settings, options) -> None:
  pipeline = beam.Pipeline(options=options)
  _ = (pipeline | beam.Create(list(SIDES)) | beam.Reshuffle()
       | beam.Map(train_side, layout, settings))
  run_pipeline(pipeline)
  missing = [layout.index(side) for side in SIDES if not files.exists(layout.index(side))]
  if missing:
    raise ValueError(f"the index task wrote no {missing[0]}; rerun to train what is missing.")
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
  tasks_stage(layout, "assign", settings, options, assign_task, layout.assignments)


def neighbours_stage(layout: Layout, settings: Settings, options) -> None:
  tasks_stage(layout, "neighbours", settings, options, search_task, layout.neighbours)


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
    save_atomically(layout.merged(direction, shard, name), array)


def merge_stage(layout: Layout, settings: Settings, options) -> None:
  tasks_stage(layout, "merge", settings, options, merge_task,
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
  first = shard_starts(layout, DIRECTIONS[direction][0])[shard]
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


def candidates_stage(layout: Layout, settings: Settings, options) -> None:
  tasks_stage(layout, "candidates", settings, options, candidates_task, layout.candidates)


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
  """{row: sentence} for the given rows only, reading only the shards that hold them."""
  starts, wanted = shard_starts(layout, side), np.unique(rows)
  cuts = np.searchsorted(wanted, starts)  # wanted[cuts[s]:cuts[s + 1]] lie in shard s
  found = {}
  for shard in range(layout.shards):
    if cuts[shard] < cuts[shard + 1]:
      lines = read_sentence_shard(layout, side, shard)
      for row in wanted[cuts[shard]:cuts[shard + 1]].tolist():
        found[row] = lines[row - starts[shard]]
  return found


def pairs_stage(layout: Layout, settings: Settings, options) -> None:
  pipeline = beam.Pipeline(options=options)
  _ = pipeline | beam.Create([None]) | beam.Map(pairs_task, layout, settings)
  run_pipeline(pipeline)
  if not files.exists(layout.marker("pairs")):
    raise ValueError(f"the runner wrote no {layout.marker('pairs')}: its task did not run; "
                     "rerun, or run with --runner=DirectRunner to see why.")
