r"""Mining: time and peak memory of `vmsst.mine.mine` against faiss-cpu IndexFlatIP.

  .venv/bin/python bench/mining.py [--sizes=10000,100000] [--slice_sizes=1000000] \
      [--dim=512] [--slice=1024] [--quick]

Both sides mine the same synthetic unit vectors (d = 512; mining time does
not depend on the values) with the same code after the search: k = 4
neighbours in both directions, ratio margin, max retrieval, one-to-one
(`vmsst.mine.mine`, backend "jax" = ours: one blockwise pass of matrix
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

Every measurement runs in a fresh child process; its peak resident memory
(VmHWM, reset after the inputs exist) minus the resident memory before the
search is its "working" memory (at least the resolution of the kernel's RSS
counters, `common.rss_resolution_mb`): it must not grow like n^2 (the n x n cosine
matrix is 40 GB at 10^5 and 4 TB at 10^6).
"""

import json
import sys
import time

import numpy as np
from absl import app
from absl import flags

import common

FLAGS = flags.FLAGS
flags.DEFINE_list("sizes", ["10000", "100000"], "Sentences per side mined end to end.")
flags.DEFINE_list("slice_sizes", ["1000000"], "Sentences per side projected from a slice.")
flags.DEFINE_integer("dim", 512, "Embedding width d.")
flags.DEFINE_integer("k", 4, "Neighbours per direction.")
flags.DEFINE_integer("slice", 1024, "Source rows timed at --slice_sizes.")
flags.DEFINE_integer("repeats", 3, "Slice timings per size; the median is used.")
flags.DEFINE_bool("quick", False, "Smoke mode: n = 2000 end to end, a 10000 slice.")
flags.DEFINE_string("child", None, "Internal: one measurement, 'mine|slice:jax|faiss:n'.")


def _unit(n: int, d: int, seed: int) -> np.ndarray:
  x = np.random.default_rng(seed).standard_normal((n, d), dtype=np.float32)
  x /= np.linalg.norm(x, axis=1, keepdims=True)
  return x


def _child(spec: str) -> dict:
  """One measurement in this process (its memory is this run's alone)."""
  import jax  # pylint: disable=import-outside-toplevel
  from vmsst import mine  # pylint: disable=import-outside-toplevel
  from vmsst.evaluation import neighbors  # pylint: disable=import-outside-toplevel
  task, backend, n = spec.split(":")
  n, k = int(n), FLAGS.k
  source, target = _unit(n, FLAGS.dim, 0), _unit(n, FLAGS.dim, 1)
  warm = min(n, 2048)
  mine.mine(source[:warm], target[:warm], k=k, backend=backend)  # compile outside the timing
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
    pairs, _ = mine.mine(source, target, k=k, backend=backend)
    seconds, extra = time.perf_counter() - start, {"mined_pairs": len(pairs)}
  else:
    # Medians of --repeats: one slice run on this VM varied 1.1-1.9 s.
    setup = float(np.median([search(k) for _ in range(FLAGS.repeats)]))
    sliced = float(np.median([search(FLAGS.slice) for _ in range(FLAGS.repeats)]))
    if sliced <= setup:
      raise ValueError(f"{spec}: {FLAGS.slice} queries took {sliced:.3f} s, no longer than "
                       f"the setup ({setup:.3f} s): the slice is too small to project "
                       "from; pass a larger --slice.")
    directions = 1 if backend == "jax" else 2
    seconds = directions * (setup + (sliced - setup) * n / FLAGS.slice)
    extra = {"slice": FLAGS.slice, "slice_seconds": sliced, "setup_seconds": setup}
  peak, resolution = max(common.peak_rss_mb(), common.rss_mb()), common.rss_resolution_mb()
  # Below the counters' resolution the difference is noise: report the resolution
  # (an upper bound of what was used) and say so.
  working = max(peak - before, resolution)
  return {"task": task, "backend": backend, "n": n, "seconds": seconds,
          "working_mb": working, "working_below_resolution": peak - before < resolution,
          "resolution_mb": resolution, "peak_mb": peak, "rss_before_mb": before,
          "inputs_mb": 2 * n * FLAGS.dim * 4 / 2**20, "peak_reset": reset, **extra}


def _measure(spec: str) -> dict:
  command = [sys.executable, __file__, f"--child={spec}", f"--dim={FLAGS.dim}",
             f"--k={FLAGS.k}", f"--slice={FLAGS.slice}", f"--repeats={FLAGS.repeats}"]
  run = common.run_json(command)
  print(f"  {spec}: {run['seconds']:.1f} s, working {run['working_mb']:.0f} MB", flush=True)
  return run


def main(argv) -> None:
  del argv
  if FLAGS.child:
    print(json.dumps(_child(FLAGS.child)))
    return
  if FLAGS.quick:
    FLAGS.sizes, FLAGS.slice_sizes = ["2000"], ["10000"]
  context = {"dim": FLAGS.dim, "k": FLAGS.k, **common.machine()}
  results = []
  for task, sizes in (("mine", FLAGS.sizes), ("slice", FLAGS.slice_sizes)):
    for n in map(int, sizes):
      ours, faiss = _measure(f"{task}:jax:{n}"), _measure(f"{task}:faiss:{n}")
      how = "end to end" if task == "mine" else f"projected from {FLAGS.slice} queries"
      size = f"{n:.0e}".replace("+0", "")
      results.append(common.comparison(
          f"mining/{size}/time", ours["seconds"], faiss["seconds"], "s", 2.0,
          higher_is_better=False, n=n, how=how, ours_run=ours, peer_run=faiss, **context))
      results.append(common.comparison(
          f"mining/{size}/working_memory", ours["working_mb"], faiss["working_mb"], "MB", None,
          higher_is_better=False, n=n, how=how, cosine_matrix_mb=n * n * 4 / 2**20,
          resolution_mb={"ours": ours["resolution_mb"], "peer": faiss["resolution_mb"]},
          **context))
  common.emit(results, f"mining: vmsst.mine (jax) vs faiss IndexFlatIP, d={FLAGS.dim}, "
              f"k={FLAGS.k}, load {context['load_average']}")


if __name__ == "__main__":
  app.run(main)
