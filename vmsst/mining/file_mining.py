"""Mining translation pairs from two text files: `mine_files` and what it reads and writes.

The library of `python -m vmsst.mine` (whose docstring describes every option):
each side's distinct sentences (`read_side`), their embeddings from a .npy
(`load_embeddings`) or an encoder, the search and margin scores of bitext.py,
approximate.py and quantized.py, and the `score<TAB>src<TAB>trg` lines
written, best first, with a `Summary` of what was done. Kept out of the
command so tests and other code call it without its flags.
"""

import dataclasses
import pathlib
from typing import Callable, Mapping

import numpy as np

from vmsst.base import files
from vmsst.base import text_files
from vmsst.encoding import embed_files
from vmsst.encoding import protocol
from vmsst.mining import approximate
from vmsst.mining import bitext
from vmsst.mining import quantized

MARGINS, RETRIEVALS, INDEXES = bitext.MARGINS, bitext.RETRIEVALS, bitext.INDEXES
OUTPUT_FORMATS = ("text", "indices")
STREAM_BLOCK = 65_536  # rows of a memory-mapped .npy checked at a time
LOW_RECALL = 0.98  # an IVF recall@k below this is reported with the fix


@dataclasses.dataclass(frozen=True)
class Side:
  """One input file reduced to its distinct sentences.

  Attributes:
    path: the file.
    sentences: distinct non-blank lines, in order of first occurrence.
    rows: int64 [len(sentences)], the 0-based line of each sentence's first
      occurrence (its row in the file's --*_embeddings matrix).
    num_lines: lines in the file.
    empty: lines skipped as empty or whitespace only.
  """
  path: pathlib.Path
  sentences: list[str]
  rows: np.ndarray
  num_lines: int
  empty: int

  @property
  def duplicates(self) -> int:
    """Lines skipped as repeats of an earlier line: every line not empty nor a sentence."""
    return self.num_lines - self.empty - len(self.sentences)

  def __str__(self) -> str:
    return (f"{self.path}: {self.num_lines} lines, {len(self.sentences)} distinct sentences "
            f"({self.empty} empty and {self.duplicates} repeated lines skipped)")


def read_side(path: str | pathlib.Path) -> Side:
  """The file's distinct non-blank sentences, with counts of what was skipped.

  Raises:
    ValueError: naming file and 1-based line, for a TAB inside a sentence or
      a byte that is not UTF-8.
  """
  first_line: dict[str, int] = {}
  empty = 0
  lines = text_files.read_lines(path)
  for number, line in enumerate(lines, 1):
    if "\t" in line:
      raise ValueError(f"{path}:{number}: the sentence holds a TAB, which would split the "
                       "output's columns; replace TABs by spaces (e.g. `tr '\\t' ' '`).")
    if not line.strip():
      empty += 1
    else:
      first_line.setdefault(line, number - 1)
  return Side(files.as_path(path), list(first_line),
              np.fromiter(first_line.values(), np.int64, len(first_line)), len(lines), empty)


def load_embeddings(path: str | pathlib.Path, side: Side) -> np.ndarray:
  """float32 [len(side.sentences), d]: the rows of `path` for the side's distinct sentences.

  A local file is memory-mapped, so only those rows are read into memory (a
  bucket file is read whole).

  Raises:
    ValueError: naming the file, when it is not a float [lines, d] .npy
      matching the side's line count, or holds a non-finite value.
  """
  redo = f"re-create it with `python -m vmsst.embed --input={side.path} --output={path}`"
  try:
    matrix = files.load_npy(path, mmap=True)
  except FileNotFoundError:
    raise
  except (ValueError, OSError) as e:
    raise ValueError(f"{path} is not a .npy array ({e}); {redo}.") from e
  if matrix.ndim != 2 or not np.issubdtype(matrix.dtype, np.floating):
    raise ValueError(f"{path} holds {matrix.dtype} {matrix.shape}, not float [lines, d]; "
                     f"{redo}.")
  if len(matrix) != side.num_lines:
    raise ValueError(f"{path} has {len(matrix)} rows but {side.path} has {side.num_lines} "
                     f"lines; row i must embed line i, {redo}.")
  every_line = len(side.rows) == side.num_lines  # rows are then 0..lines-1
  embeddings = matrix if every_line and matrix.dtype == np.float32 else None
  for start in range(0, len(side.rows), STREAM_BLOCK):  # one block resident at a time
    rows = side.rows[start:start + STREAM_BLOCK]
    block = np.asarray(matrix[rows[0]:rows[-1] + 1] if every_line else matrix[rows], np.float32)
    bad = np.flatnonzero(~np.isfinite(block).all(axis=1))
    if len(bad):
      raise ValueError(f"{path}: row {rows[bad[0]]} (line {rows[bad[0]] + 1} of "
                       f"{side.path}) is not finite; {redo}.")
  # Without repeated or empty lines a float32 file stays memory-mapped (streamed by the
  # search); otherwise only the distinct rows are read.
  return embeddings if embeddings is not None else np.asarray(matrix[side.rows], np.float32)


def _encode_side(encoder: protocol.UniqueSentences, side: Side, name: str,
                 other_width: int | None, language: str | None) -> np.ndarray:
  """The side's embeddings, by its language's tower (a two-tower model's); against the
  other side's width, one sentence is embedded first."""
  if other_width is not None:
    probe = encoder.encode(side.sentences[:1], desc=f"{name} width", language=language)
    widths = (probe.shape[1], other_width) if name == "src" else (other_width, probe.shape[1])
    _check_widths(*widths)
  return encoder.encode(side.sentences, desc=f"{name} {side.path.name}", language=language)


def _check_widths(source_width: int, target_width: int) -> None:
  if source_width != target_width:
    raise ValueError(f"source embeddings are {source_width}-wide but target ones "
                     f"{target_width}; embed both sides with the same encoder.")


@dataclasses.dataclass(frozen=True)
class Summary:
  """What `mine_files` did: both sides' counts, the pairs written and the options."""
  source: Side
  target: Side
  written: int
  options: str
  truncated: str = ""  # embed_files.truncation_note of the sides this run embedded

  def __str__(self) -> str:
    return (f"source {self.source}\ntarget {self.target}\n"
            f"{self.written} pairs written ({self.options}{self.truncated})")


def mine_files(get_encoder: Callable[[], protocol.UniqueSentences] | None,
               src: str | pathlib.Path, trg: str | pathlib.Path,
               output: str | pathlib.Path, *, src_embeddings: str | None = None,
               trg_embeddings: str | None = None, margin: str = "ratio",
               retrieval: str = "max", k: int = 4, threshold: float | None = None,
               progress: bool = True, output_format: str = "text",
               shard: int | None = None, merge_shards: bool = False,
               recall_sample: int = 1000, src_language: str | None = None,
               trg_language: str | None = None, **knn_options) -> Summary:
  """Reads both sides, embeds (or loads) them, mines, writes `score<TAB>src<TAB>trg` lines.

  Over machines (index="ivf" with `ivf.shards` = S > 1): each of S runs with
  `shard` = i searches key slice i of both sides and saves its neighbour
  lists beside `output` (`approximate.save_shard`; no pairs yet);
  one run with `merge_shards` merges the S files and mines from them, without
  embeddings.

  Args:
    get_encoder: builds the encoder for a side without precomputed
      embeddings; called at most once, after both files are read and checked.
      May be None when both embeddings are given.
    src, trg: UTF-8 files, one sentence per line.
    output: the TSV to write (parents created).
    src_embeddings, trg_embeddings: optional float [lines, d] .npy per side.
    margin, retrieval, k, threshold, progress, **knn_options: as for `mine`.
    output_format: "text" writes the sentences, "indices" their 0-based
      line numbers in `src` and `trg`.
    shard: search only key slice `shard` and save its lists (needs both
      embeddings files, so no machine embeds a whole side again).
    merge_shards: mine from the S saved shards instead of searching.
    recall_sample: with index="ivf", sentences per side whose exact
      neighbours measure the search's recall@k (in the summary); 0 skips it.
    src_language, trg_language: each side's language, which picks a two-tower
      model's tower for it (`protocol.tower_of`; None: tower a).

  Returns:
    The summary to print.
  """
  source, target = read_side(src), read_side(trg)
  for side in (source, target):
    if not side.sentences:
      raise ValueError(f"{side.path} has no sentences to mine ({side.num_lines} lines, none "
                       "with text); give a file with one sentence per line.")
  bitext.check_k(k, len(source.sentences), len(target.sentences))
  bitext.check_scoring(margin, retrieval)
  if output_format not in OUTPUT_FORMATS:
    raise ValueError(f"--output_format={output_format}; pick one of {OUTPUT_FORMATS}.")
  ivf = knn_options.get("ivf") or approximate.IvfOptions()
  if shard is not None or merge_shards:
    _check_sharding(shard, merge_shards, knn_options, src_embeddings, trg_embeddings)
    meta = {"k": k, "num_sources": len(source.sentences), "num_targets": len(target.sentences),
            **{f: getattr(ivf, f) for f in ("shards", "nlist", "nprobe", "pq", "sq8",
                                           "train_size", "seed")}}
  if merge_shards:
    forward, backward = approximate.load_shards(output, meta, k)
    hood = bitext.Neighbourhoods(*forward, *backward)
    pairs, scores = bitext.mined_pairs(hood, margin=margin, retrieval=retrieval,
                                       threshold=threshold)
    return _write_pairs(source, target, output, pairs, scores, output_format, "", _options_note(
        margin, retrieval, k, threshold, ivf, len(target.sentences), merged=True))
  # Every given .npy is read and checked before anything is embedded.
  x, y = (load_embeddings(path, side) if path else None
          for path, side in ((src_embeddings, source), (trg_embeddings, target)))
  truncated = ""
  if x is not None and y is not None:
    _check_widths(x.shape[1], y.shape[1])
  else:
    name, side = ("src", source) if x is None else ("trg", target)
    if get_encoder is None:
      raise ValueError(f"no --{name}_embeddings and no encoder to embed {side.path}.")
    encoder = get_encoder()
    if x is None:
      x = _encode_side(encoder, source, "src", None if y is None else y.shape[1],
                       src_language)
    if y is None:
      y = _encode_side(encoder, target, "trg", x.shape[1] if src_embeddings else None,
                       trg_language)
    truncated = embed_files.truncation_note(
        encoder, (source.sentences if not src_embeddings else [])
        + (target.sentences if not trg_embeddings else []))
  if shard is not None:
    path = approximate.shard_file(output, shard, ivf.shards)
    forward, backward = (
        approximate.shard_knn(queries, keys, k, ivf, shard, name if progress else None)
        for queries, keys, name in ((x, y, "src->trg"), (y, x, "trg->src")))
    approximate.save_shard(path, forward, backward, {**meta, "shard": shard})
    return Summary(source, target, 0, f"shard {shard} of {ivf.shards}: neighbour lists of both "
                   f"directions written to {path}; mine with --merge_shards once all "
                   f"{ivf.shards} are written", truncated)
  hood = bitext.neighbourhoods(x, y, k, progress=progress, **knn_options)
  pairs, scores = bitext.mined_pairs(hood, margin=margin, retrieval=retrieval,
                                     threshold=threshold)
  note = _options_note(margin, retrieval, k, threshold,
                       ivf if knn_options.get("index", "exact") != "exact" else None, len(y))
  if knn_options.get("quantized_search") is not None:
    note += _quantized_note(knn_options["quantized_search"])
  elif knn_options.get("index", "exact") != "exact" and recall_sample:
    note += _recall_note(x, y, hood, recall_sample)
  return _write_pairs(source, target, output, pairs, scores, output_format, truncated, note)


def _quantized_note(search: quantized.QuantizedSearch) -> str:
  """The summary's account of a search over codes."""
  ranges = ("" if not search.precision.endswith("int8") else
            ", ranges of the model's calibration" if search.ranges is not None else
            ", ranges measured on the two sides")
  return (f"; {search.precision} codes searched, {search.rescore_multiplier} x k candidates "
          f"re-ranked by float cosine{ranges}")


def _recall_note(x: np.ndarray, y: np.ndarray, hood: bitext.Neighbourhoods, sample: int) -> str:
  """recall@k of both directions' IVF neighbours on a sample, with the fix when it is low."""
  recalls = (approximate.sampled_recall(x, y, hood.forward_indices, sample),
             approximate.sampled_recall(y, x, hood.backward_indices, sample))
  k = hood.forward_indices.shape[1]
  note = (f"; recall@{k} of the IVF neighbours against exact on {min(sample, len(x))} / "
          f"{min(sample, len(y))} sampled sentences: {recalls[0]:.3f} (src->trg) / "
          f"{recalls[1]:.3f} (trg->src)")
  if min(recalls) < LOW_RECALL:
    note += f", below {LOW_RECALL}: raise --nprobe (or --nlist for finer cells)"
  return note


def _check_sharding(shard: int | None, merge_shards: bool, knn_options: Mapping,
                    src_embeddings: str | None, trg_embeddings: str | None) -> None:
  """Raises ValueError naming the flag, for --shard / --merge_shards used the wrong way."""
  ivf = knn_options.get("ivf")
  if knn_options.get("index") != "ivf" or ivf is None or ivf.shards < 2:
    raise ValueError("--shard and --merge_shards split an IVF search over machines: pass "
                     "--index=ivf and --shards=S > 1.")
  if shard is not None and merge_shards:
    raise ValueError(f"--shard={shard} searches one slice and --merge_shards mines from all "
                     "of them; pass one.")
  if shard is not None and not 0 <= shard < ivf.shards:
    raise ValueError(f"--shard={shard} must be in 0..{ivf.shards - 1} (--shards={ivf.shards}).")
  if shard is not None and not (src_embeddings and trg_embeddings):
    raise ValueError("--shard needs --src_embeddings and --trg_embeddings: embed each side "
                     "once (python -m vmsst.embed) rather than on every machine.")


def _options_note(margin: str, retrieval: str, k: int, threshold: float | None,
                  ivf: approximate.IvfOptions | None, num_keys: int,
                  merged: bool = False) -> str:
  """The summary's account of how the pairs were mined (approximate search named as such)."""
  above = "" if threshold is None else f", score >= {threshold:g}"
  if ivf is not None:
    shards = f"{ivf.shards} key shards of " if ivf.shards > 1 else ""
    cells = ivf.cells(num_keys // ivf.shards)
    above += (f", approximate IVF neighbours ({shards}{cells} cells, nprobe {ivf.nprobe}"
              f"{f', PQ {ivf.pq} bytes' if ivf.pq else ''}{', SQ8' if ivf.sq8 else ''}"
              f"{', merged from the shard files' if merged else ''})")
  return f"{margin} margin, {retrieval} retrieval, k={k}{above}"


def _write_pairs(source: Side, target: Side, output, pairs: np.ndarray, scores: np.ndarray,
                 output_format: str, truncated: str, options: str) -> Summary:
  """Writes `score<TAB>src<TAB>trg` lines (sentences or line numbers), best first."""
  columns = ((source.sentences, target.sentences) if output_format == "text"
             else (source.rows.tolist(), target.rows.tolist()))
  with embed_files.open_output(output) as f:
    f.writelines(f"{score:.6f}\t{columns[0][i]}\t{columns[1][j]}\n"
                 for score, (i, j) in zip(scores.tolist(), pairs.tolist()))
  return Summary(source, target, len(pairs), options, truncated)
