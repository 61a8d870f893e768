r"""k-NN and mining throughput and peak memory: JAX blockwise vs faiss exact search.

  .venv/bin/python bench/mine.py [--sizes=50000,200000] [--dim=256] [--queries=8192] \
      [--full_mine=20000]

Every measurement runs in a fresh child process, so its peak resident memory
(VmHWM from /proc, reset through /proc/self/clear_refs after setup) belongs
to that run alone. A child holds both n x d sides of random unit float32
vectors, as mining does, and times `neighbors.knn` of the first --queries
source rows against all n targets after a warm-up compile of the block
kernel. Throughput is query-key pairs per second; the full n x n mining time
(two directions) is extrapolated from it. "working" memory is the peak
minus the resident memory before the search (runtime + the two sides): for
an O(n * d + block^2) search it stays flat as n grows, where a full
similarity matrix would grow as n^2 (glibc keeps some freed block buffers
in its heap; `MALLOC_MMAP_THRESHOLD_=65536 .venv/bin/python bench/mine.py`
shows the search's own working set). --full_mine runs `vmsst.mine.mine`
(both directions, margins, one-to-one selection) end to end at that size.
Prints a table, a 10^6 x 10^6 projection and one JSON line per run; about
3 minutes on 2 busy cores. Results: bench/RESULTS.md.
"""

import json
import os
import platform
import subprocess
import sys
import time

import numpy as np
from absl import app
from absl import flags

FLAGS = flags.FLAGS
flags.DEFINE_list("sizes", ["50000", "200000"], "Sentences per side, n.")
flags.DEFINE_integer("dim", 256, "Embedding width d.")
flags.DEFINE_integer("k", 4, "Neighbours per query.")
flags.DEFINE_integer("queries", 8192, "Queries timed per size (all n keys are searched).")
flags.DEFINE_integer("full_mine", 20000, "n of the end-to-end mining run (0 skips it).")
flags.DEFINE_list("backends", ["jax", "faiss"], "Search backends to compare.")
flags.DEFINE_integer("query_block", 2048, "neighbors.knn query_block.")
flags.DEFINE_integer("key_block", 8192, "neighbors.knn key_block.")
flags.DEFINE_string("child", None, "Internal: run one measurement, 'knn|mine:backend:n'.")


def _memory_mb() -> dict[str, float]:
  """{"VmRSS", "VmHWM"} of this process in MiB (Linux /proc)."""
  with open("/proc/self/status") as f:
    fields = dict(line.split(":", 1) for line in f)
  return {name: int(fields[name].split()[0]) / 1024 for name in ("VmRSS", "VmHWM")}


def _reset_peak() -> bool:
  """Resets VmHWM to the current RSS; False where the kernel does not allow it."""
  try:
    with open("/proc/self/clear_refs", "w") as f:
      f.write("5")
    return True
  except OSError:
    return False


def _unit(n: int, d: int, seed: int) -> np.ndarray:
  x = np.random.default_rng(seed).standard_normal((n, d), dtype=np.float32)
  x /= np.linalg.norm(x, axis=1, keepdims=True)
  return x


def _child(spec: str) -> dict:
  """One measurement in this process: 'knn:jax:50000' or 'mine:faiss:20000'."""
  import jax  # pylint: disable=import-outside-toplevel
  from vmsst import mine  # pylint: disable=import-outside-toplevel
  from vmsst.evaluation import neighbors  # pylint: disable=import-outside-toplevel
  task, backend, n = spec.split(":")
  n, d, k = int(n), FLAGS.dim, FLAGS.k
  source, target = _unit(n, d, 0), _unit(n, d, 1)
  queries = min(FLAGS.queries, n) if task == "knn" else n
  blocks = {"query_block": FLAGS.query_block, "key_block": FLAGS.key_block}
  # Compile the block kernel for the timed shapes outside the timed, measured part.
  warm = neighbors.block_sizes(queries, n, k, num_devices=jax.device_count(), **blocks)
  neighbors.knn(source[:warm[0]], target[:warm[1]], k, backend=backend, **blocks)
  reset = _reset_peak()
  before = _memory_mb()["VmRSS"]
  start = time.perf_counter()
  if task == "knn":
    neighbors.knn(source[:queries], target, k, backend=backend, **blocks)
  else:
    pairs, _ = mine.mine(source, target, k=k, backend=backend, **blocks)
  seconds = time.perf_counter() - start
  peak = _memory_mb()["VmHWM"]
  pair_rate = (2 if task == "mine" else 1) * queries * n / seconds
  return {"name": f"{task}/{backend}/{n}", "task": task, "backend": backend, "n": n, "d": d,
          "k": k, "queries": queries, "seconds": seconds, "pairs_per_second": pair_rate,
          "full_mining_hours": 2 * n * n / pair_rate / 3600, "rss_before_mb": before,
          "peak_mb": peak, "working_mb": peak - before, "data_mb": 2 * n * d * 4 / 2**20,
          "peak_reset": reset, "devices": jax.device_count(),
          **({"mined_pairs": len(pairs)} if task == "mine" else {})}


def _run_child(spec: str) -> dict:
  command = [sys.executable, __file__, f"--child={spec}"] + [
      f"--{name}={FLAGS[name].value}"
      for name in ("dim", "k", "queries", "query_block", "key_block")]
  done = subprocess.run(command, capture_output=True, text=True, check=True,
                        env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"})
  return json.loads(done.stdout.strip().splitlines()[-1])


def _table(runs: list[dict]) -> str:
  lines = [f"{'run':<20}{'queries':>8}{'s':>8}{'Mpairs/s':>10}{'vs jax':>8}{'data MB':>9}"
           f"{'working MB':>11}{'peak MB':>9}{'n x n mining h':>16}"]
  rates = {(r["task"], r["n"]): r["pairs_per_second"] for r in runs if r["backend"] == "jax"}
  for r in runs:
    ratio = r["pairs_per_second"] / rates.get((r["task"], r["n"]), float("nan"))
    lines.append(f"{r['name']:<20}{r['queries']:>8}{r['seconds']:>8.1f}"
                 f"{r['pairs_per_second'] / 1e6:>10.1f}{ratio:>8.2f}{r['data_mb']:>9.0f}"
                 f"{r['working_mb']:>11.0f}{r['peak_mb']:>9.0f}{r['full_mining_hours']:>16.2f}")
  return "\n".join(lines)


def _projection(runs: list[dict], n: int = 10**6) -> str:
  """Memory and time of n x n mining from the largest measured knn runs."""
  lines = [f"projection to {n:.0e} x {n:.0e}, d={FLAGS.dim}, k={FLAGS.k}:"]
  for backend in FLAGS.backends:
    measured = [r for r in runs if r["backend"] == backend and r["task"] == "knn"]
    if not measured:
      continue
    largest = max(measured, key=lambda r: r["n"])
    runtime = largest["rss_before_mb"] - largest["data_mb"]
    data = 2 * n * FLAGS.dim * 4 / 2**20
    # faiss.IndexFlatIP keeps a normalized copy of the keys (one side).
    copy = data / 2 if backend == "faiss" else 0
    hoods = 2 * n * FLAGS.k * (4 + 8) / 2**20
    total = runtime + data + copy + largest["working_mb"] + hoods
    lines.append(
        f"  {backend}: runtime {runtime:.0f} + sides {data:.0f} + key copy {copy:.0f} + "
        f"working {largest['working_mb']:.0f} + neighbourhoods {hoods:.0f} = {total / 1024:.1f}"
        f" GiB peak; {2 * n * n / largest['pairs_per_second'] / 3600:.1f} h at the measured "
        "rate")
  lines.append(f"  (the full cosine matrix alone would be {n * n * 4 / 2**40:.1f} TiB)")
  return "\n".join(lines)


def main(argv) -> None:
  del argv
  if FLAGS.child:
    print(json.dumps(_child(FLAGS.child)))
    return
  import faiss  # pylint: disable=import-outside-toplevel
  print(f"{time.strftime('%Y-%m-%d')} {platform.machine()} {os.cpu_count()} cores, "
        f"{platform.python_version()}, faiss {faiss.__version__}, d={FLAGS.dim}, k={FLAGS.k}")
  specs = [f"knn:{b}:{n}" for n in FLAGS.sizes for b in FLAGS.backends]
  if FLAGS.full_mine:
    specs += [f"mine:{b}:{FLAGS.full_mine}" for b in FLAGS.backends]
  runs = []
  for spec in specs:
    runs.append(_run_child(spec))
    print(f"  {spec}: {runs[-1]['seconds']:.1f} s", file=sys.stderr, flush=True)
  print(f"jax devices: {runs[0]['devices']}; peak reset via clear_refs: {runs[0]['peak_reset']}")
  print(_table(runs))
  print(_projection(runs))
  for run in runs:
    print(json.dumps(run))


if __name__ == "__main__":
  app.run(main)
