"""What every benchmark script shares: the result line, tables, the machine's state.

A comparison is one JSON line (`comparison`):
  {"name", "ours", "peer", "unit", "ratio": ours / peer, "target", "higher_is_better",
   "met", ...context}
where "ratio" is oriented so that higher is better: for a time or a memory
(lower is better) it is peer / ours, i.e. still "how many times better we are".
Scripts print a readable table first and the JSON lines last; bench/run_all.py
collects every line that parses as such an object.
"""

import json
import multiprocessing
import os
import platform
import resource
import statistics
import subprocess
import sys
import time
import traceback
from typing import Any, Callable, Sequence

RESULT_KEYS = ("name", "ours", "peer", "unit", "ratio", "target")


def comparison(name: str, ours: float, peer: float, unit: str, target: float | None, *,
               higher_is_better: bool = True, **context: Any) -> dict[str, Any]:
  """One comparison; `ratio` is ours/peer for rates, peer/ours for times and memory."""
  ratio = ours / peer if higher_is_better else peer / ours
  return {"name": name, "ours": ours, "peer": peer, "unit": unit, "ratio": ratio,
          "target": target, "higher_is_better": higher_is_better,
          "met": None if target is None else bool(ratio >= target), **context}


def emit(results: Sequence[dict[str, Any]], header: str = "") -> None:
  """Prints the table of `results`, then one JSON line each (flushed, for run_all)."""
  print(table(results, header), flush=True)
  for result in results:
    print(json.dumps(result, default=float), flush=True)


def table(results: Sequence[dict[str, Any]], header: str = "") -> str:
  lines = [header] if header else []
  lines.append(f"{'comparison':<62}{'ours':>12}{'peer':>12}  {'unit':<14}{'ratio':>7}"
               f"{'target':>8}  met")
  for r in results:
    target = "" if r["target"] is None else f"{r['target']:.2f}"
    met = {None: "-", True: "yes", False: "NO"}[r["met"]]
    lines.append(f"{r['name']:<62}{r['ours']:>12.4g}{r['peer']:>12.4g}  {r['unit']:<14}"
                 f"{r['ratio']:>7.2f}{target:>8}  {met}")
  return "\n".join(lines)


def machine() -> dict[str, Any]:
  """Context every line carries: when, where, and how busy the machine was."""
  return {"date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
          "machine": platform.machine(), "cores": os.cpu_count(),
          "load_average": round(os.getloadavg()[0], 2)}


def matmul_peak_flops(n: int = 2048, repeats: int = 10, dtype: str = "float32") -> float:
  """Sustained FLOP/s of an n x n JAX matmul in `dtype` (f32-accumulated) on the default device.

  bfloat16 is timed in the form the bf16 network uses
  (layers.projection: bf16 inputs, float32 result).
  """
  import jax  # pylint: disable=import-outside-toplevel
  import jax.numpy as jnp  # pylint: disable=import-outside-toplevel
  a = jnp.ones((n, n), dtype)
  f = jax.jit(lambda x: jnp.dot(x, x, preferred_element_type=jnp.float32))
  f(a).block_until_ready()
  start = time.perf_counter()
  for _ in range(repeats):
    out = f(a)
  out.block_until_ready()
  return 2 * n**3 * repeats / (time.perf_counter() - start)


def interleaved(fns: dict[str, Callable[[], float]], rounds: int,
                settle_seconds: float = 0.0) -> dict[str, float]:
  """Median of each measurement over `rounds`, taken in turn (ours, peer, ours, ...).

  Interleaving spreads a burst of load from other processes over both sides,
  so the ratio stays fair on a shared machine even when absolute rates move.
  `settle_seconds` of sleep before each measurement let the previous one's
  thread pool go idle: PyTorch's OpenMP workers keep spinning after a step,
  and a JAX step started right after one ran up to 1.5x slower (docs/results/benchmarks/README.md).
  """
  samples = {name: [] for name in fns}
  for _ in range(rounds):
    for name, fn in fns.items():
      time.sleep(settle_seconds)
      samples[name].append(fn())
  return {name: statistics.median(values) for name, values in samples.items()}


class TimerProcess:
  """A timer that runs in its own (spawned) process: `make_timer(*args)` builds it there.

  Why: neither library's thread pools or allocator then live in the other's
  process. A JAX step run right after a PyTorch step took 30-60% longer, even
  after 10 s of idling (cpu6 bf16 Contrastive: 4.8-6.0 s alone, 6.7-8.3 s
  after the peer, one process); with the peer in its own process the
  slowdown stayed (about 8 s per step), so its cause is outside the process
  (docs/results/benchmarks/README.md). `interleaved` still alternates the sides in time. Calling the
  object times one run over there and returns its seconds.
  """

  def __init__(self, make_timer: Callable[..., Callable[[], float]], *args):
    context = multiprocessing.get_context("spawn")
    self._connection, child = context.Pipe()
    self._process = context.Process(target=_serve_timer, args=(child, make_timer, args),
                                    daemon=True)
    self._process.start()
    self._receive()  # built (and warmed up) in the child

  def __call__(self) -> float:
    self._connection.send("run")
    return self._receive()

  def close(self) -> None:
    if self._process.is_alive():
      self._connection.send("stop")
    self._process.join(timeout=60)

  def _receive(self):
    status, value = self._connection.recv()
    if status != "ok":
      raise RuntimeError(f"timer process failed:\n{value}")
    return value


def _serve_timer(connection, make_timer, args) -> None:
  """The child's loop: build the timer, then time one run per "run" message.

  Ends on "stop" or when the parent has gone (its end of the pipe closed).
  """
  try:
    timer = make_timer(*args)
    connection.send(("ok", None))
    while connection.recv() == "run":
      connection.send(("ok", timer()))
  except EOFError:
    return
  except Exception:  # pylint: disable=broad-except
    connection.send(("error", traceback.format_exc()))


def _status(field: str) -> int:
  """The leading number of one /proc/self/status field (kB for memory fields)."""
  with open("/proc/self/status") as f:
    fields = dict(line.split(":", 1) for line in f)
  return int(fields[field].split()[0])


def peak_rss_mb() -> float:
  """This process's peak resident memory in MiB (VmHWM; ru_maxrss where /proc is absent)."""
  try:
    return _status("VmHWM") / 1024
  except (OSError, KeyError):
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def rss_mb() -> float:
  return _status("VmRSS") / 1024


def rss_resolution_mb() -> float:
  """How far this process's RSS readings can lag its true resident memory, in MiB.

  Linux batches RSS accounting per thread (up to 64 pages each before they
  reach the counters /proc reports), so a difference of two readings smaller
  than threads x 64 pages is noise, and can even come out negative.
  """
  return _status("Threads") * 64 * resource.getpagesize() / 2**20


def reset_peak_rss() -> bool:
  """Sets VmHWM to the current RSS (Linux clear_refs); False where not allowed."""
  try:
    with open("/proc/self/clear_refs", "w") as f:
      f.write("5")
    return True
  except OSError:
    return False


def run_json(command: Sequence[str], env: dict[str, str] | None = None,
             timeout: float | None = None) -> dict[str, Any]:
  """Runs a child process and returns the JSON object on its last stdout line."""
  done = subprocess.run(list(command), capture_output=True, text=True, timeout=timeout,
                        env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3", **(env or {})})
  if done.returncode:
    sys.stderr.write(done.stderr[-4000:])
    raise RuntimeError(f"{' '.join(command)} exited with {done.returncode}")
  return json.loads(done.stdout.strip().splitlines()[-1])


def have_sentence_transformers() -> bool:
  try:
    import sentence_transformers  # pylint: disable=import-outside-toplevel,unused-import
    return True
  except ImportError:
    return False


PEER_MISSING = ("sentence-transformers is not installed: `pip install -e .[bench]` "
                "(PyTorch CPU peer skipped)")


def tiny_vocabulary(data_dir: str, directory: str) -> str:
  """A 2,000-piece SentencePiece model over real lines (tests/conftest.py's tiny_vocab_path):
  16 lines of every NTREX-128 language and 500 of each Multi30k one. Returns its path."""
  import pathlib  # pylint: disable=import-outside-toplevel
  from vmsst.base import text_files  # pylint: disable=import-outside-toplevel
  from vmsst_tasks.sources import pair_readers, vocabulary_training  # pylint: disable=import-outside-toplevel
  sentences = [line for path in pair_readers.ntrex_files(data_dir).values()
               for line in text_files.read_lines(path)[:16]]
  for short in pair_readers.MULTI30K_LANGUAGES:
    sentences += text_files.read_lines(pathlib.Path(data_dir, "multi30k",
                                                    f"train.{short}.gz"))[:500]
  return vocabulary_training.train_vocabulary(sentences, os.path.join(directory, "spm"), 2000,
                                              character_coverage=0.995)
