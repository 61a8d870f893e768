"""The work of bench/device_check.py's children: speed, profile, comparison, and the data they read.

Each function runs in its own process (device_check.run_child starts
`python bench/device_parts.py --child=KIND`) and returns plain JSON. Budgets are seconds of wall clock per part, process starts
included; the full ones add up to 7.5 minutes on one H100 (the check's
limit is 8), the quick ones to under a minute on a 2-core CPU.
"""

import gc
import gzip
import json
import os
import sys
import tempfile
import time
from typing import Any, Sequence

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
  sys.path.insert(0, ROOT)


def _load_vmsst_tasks() -> None:
  """Loads tasks/ under its installed name where the project is not installed (a device image).

  Loaded as `vmsst_tasks` itself (not aliased from a `tasks` import), so its
  modules' own `vmsst_tasks.` imports find the one copy.
  """
  import importlib.util  # pylint: disable=import-outside-toplevel
  if importlib.util.find_spec("vmsst_tasks") is not None:
    return
  folder = os.path.join(ROOT, "tasks")
  spec = importlib.util.spec_from_file_location("vmsst_tasks", os.path.join(folder, "__init__.py"),
                                                submodule_search_locations=[folder])
  module = importlib.util.module_from_spec(spec)
  sys.modules["vmsst_tasks"] = module
  spec.loader.exec_module(module)


_load_vmsst_tasks()

from vmsst.base import console  # pylint: disable=g-import-not-at-top,wrong-import-position

console.quiet_startup()

# objective -> its gin file (the run files' model files). Cheapest first: the speed part
# gives each the time left over by the ones before it.
OBJECTIVES = {"contrastive": "gin/models/contrastive.gin",
              "momentum_contrast": "gin/models/momentum_contrast.gin",
              "bitranslation": "gin/models/bitranslation.gin", "vmsst": "gin/models/vmsst.gin",
              "vmsst_contrastive": "gin/models/vmsst_contrastive.gin"}
COMPARED = ("contrastive", "vmsst", "bitranslation")
BUDGETS = {"speed": 215.0, "peer": 40.0, "profile": 45.0, "comparison": 150.0}
# Quick: limits for a slow CI machine, not what the rehearsal takes.
QUICK_BUDGETS = {"speed": 270.0, "peer": 0.0, "profile": 90.0, "comparison": 240.0}
# Per objective, after its first evaluation. Quick: 0, so each run stops at that evaluation
# (step eval_every = 2), the fewest steps that still give a curve, for the test suite's time.
COMPARISON_TRAIN_SECONDS = {False: 20.0, True: 0.0}
PAPER_VOCABULARY, LENGTH = 250_112, 32
BATCHES = {False: (2048, 1024, 512, 256, 128), True: (16, 8)}
# The paper's batch (VMSST §6.4), timed with --microbatches = N accumulated microbatches
# (quick: the ladder's largest).
PAPER_BATCH = {False: 2048, True: 16}
# The batch search's memory: the device's own limit where it reports one, else an 80 GB
# device's (an H100's or A100's; XLA:CPU in --quick reports none). A batch is expected to
# fit when its step's estimate stays under HEADROOM of it.
ASSUMED_DEVICE_BYTES, HEADROOM = 80e9, 0.85
# --quick estimates VMSST's memory alone (its estimate feeds the paper-batch row): the same
# code as every objective's on a device, two compiles fewer each for the test suite's time;
# the others compile once, at the largest quick batch, which the estimate would pick.
QUICK_ESTIMATED = ("vmsst",)
TIMED_STEPS = {False: 10, True: 2}
# The bf16 peak's matmul size (quick: 512, where a CPU gets about 1.4x the FLOP/s of 256, so
# a toy step's MFU of whole-logit model FLOPs stays well under 1 on a loaded machine).
PEAK_MATMUL = {False: 8192, True: 512}
# The speed part's shape: the 6-layer paper runs' files (quick: tiny.gin made smaller).
SIZE_FILES = {False: ["gin/models/sizes/6l.gin", "gin/models/precision/bf16.gin"],
              True: ["gin/models/sizes/tiny.gin", "gin/models/precision/bf16.gin"]}
QUICK_SIZE = ["NetworkConfig.emb_dim = 32", "NetworkConfig.mlp_dim = 64",
              "NetworkConfig.num_heads = 2", "NetworkConfig.head_dim = 16",
              "NetworkConfig.num_encoder_layers = 1", "MomentumContrast.queue_size = 64"]
# The comparison's shape: the same T5.1.1 layers at 6 layers and d = 512 (mT5-small's
# width), so three objectives train for long enough in the check's few minutes.
COMPARISON_SIZE = ["NetworkConfig.emb_dim = 512", "NetworkConfig.num_heads = 8",
                   "NetworkConfig.head_dim = 64", "NetworkConfig.mlp_dim = 1024"]
COMPARISON_BATCH = {False: 512, True: 16}
STREAM_EXAMPLES = 1 << 17


def _jax():
  import jax  # pylint: disable=import-outside-toplevel
  jax.config.update("jax_compilation_cache_dir",  # the profile child reuses speed's compile
                    os.path.join(tempfile.gettempdir(), "vmsst-device-check-cache"))
  return jax


def build_model(objective: str, quick: bool, *, files=None, vocab_size: int | None = None,
                bindings=()):
  """The objective's model as its gin file and the size files define it."""
  from vmsst.training import configurables  # pylint: disable=import-outside-toplevel
  from vmsst.base.gin_utils import gin  # pylint: disable=import-outside-toplevel
  configurables.register()
  gin.clear_config()
  gin.add_config_file_search_path(ROOT)
  vocabulary = [f"VOCAB_SIZE = {vocab_size or (300 if quick else PAPER_VOCABULARY)}"]
  gin.parse_config_files_and_bindings(
      [OBJECTIVES[objective]] + (files or SIZE_FILES[quick]),
      vocabulary + [f"NetworkConfig.max_length = {LENGTH}"] + (QUICK_SIZE if quick else [])
      + list(bindings))
  return gin.query_parameter("train.model").scoped_configurable_fn()


def paper_optimizer():
  """base_paper.gin's Adafactor (a constant rate: the schedule changes no step time)."""
  from vmsst.training import optimizers  # pylint: disable=import-outside-toplevel
  return optimizers.adafactor(learning_rate=1e-3, clipping_threshold=1.0,
                              multiply_by_parameter_scale=True, min_dim_size_to_factor=128)


def synthetic_batch(batch_size: int, length: int, vocab_size: int, extra=None):
  """Full-length random pairs (EOS last), and any extra features at their shapes."""
  import numpy as np  # pylint: disable=import-outside-toplevel
  rng = np.random.default_rng(0)
  batch = {}
  for side in "ab":
    tokens = rng.integers(3, vocab_size, (batch_size, length)).astype(np.int32)
    tokens[:, -1] = 1
    batch[f"tokens_{side}"] = tokens
    batch[f"mask_{side}"] = np.ones((batch_size, length), np.int32)
    batch[f"lang_{side}"] = rng.integers(0, 10, batch_size).astype(np.int32)
  batch["sem_side"] = (np.arange(batch_size) % 2).astype(np.int32)
  for name, shape in (extra or {}).items():
    batch.setdefault(name, np.zeros(shape, np.float32))
  return batch


def bf16_peak_flops(n: int) -> float:
  """FLOP/s of an n x n bf16 matmul (f32 accumulation), best of 5 timed runs."""
  jax = _jax()
  a = jax.numpy.ones((n, n), jax.numpy.bfloat16)
  f = jax.jit(lambda x: jax.numpy.dot(x, x, preferred_element_type=jax.numpy.float32))
  f(a).block_until_ready()
  best = float("inf")
  for _ in range(5):
    start = time.perf_counter()
    f(a).block_until_ready()
    best = min(best, time.perf_counter() - start)
  return 2 * n**3 / best


def _out_of_memory(error: Exception) -> bool:
  text = str(error)
  return "RESOURCE_EXHAUSTED" in text or "out of memory" in text.lower()


class StepRun:
  """One objective's compiled train step at one batch size (in `microbatches` accumulated
  microbatches, trainer.train_step); `start` allocates its state."""

  def __init__(self, model, batch_size: int, microbatches: int = 1):
    jax = _jax()
    from vmsst.model import partitioning  # pylint: disable=import-outside-toplevel
    from vmsst.training import trainer as trainer_lib  # pylint: disable=import-outside-toplevel
    self.batch_size, self.microbatches = batch_size, microbatches
    mesh = partitioning.make_mesh(1, 1, devices=jax.devices()[:1])
    shapes = model.input_shapes(batch_size, LENGTH)
    self.trainer = trainer_lib.Trainer(model, paper_optimizer(), mesh, shapes,
                                       microbatches=microbatches)
    started = time.perf_counter()
    self.compiled = self.trainer.compile_step(jax.random.key(0))
    self.compile_seconds = time.perf_counter() - started
    memory = self.compiled.memory_analysis()
    self.fixed_bytes = memory.argument_size_in_bytes  # the state (and the batch)
    self.compiled_bytes = (memory.argument_size_in_bytes + memory.output_size_in_bytes
                           - memory.alias_size_in_bytes + memory.temp_size_in_bytes)
    self._shapes, self._vocab = shapes, model.network_config.vocab_size
    self.state = self.batch = self.metrics = None
    self.rng = jax.random.key(1)

  def start(self) -> "StepRun":
    jax = _jax()
    self.state = self.trainer.initialize(jax.random.key(0))
    extra = {k: v for k, v in self._shapes.items()
             if not k.startswith(("tokens", "mask", "lang", "sem"))}
    self.batch = self.trainer.global_batch(
        synthetic_batch(self.batch_size, LENGTH, self._vocab, extra))
    return self

  def steps(self, n: int) -> float:
    """Runs n steps (the compiled executable itself); seconds per step."""
    jax = _jax()
    import flax.linen as nn  # pylint: disable=import-outside-toplevel
    from vmsst.model import partitioning  # pylint: disable=import-outside-toplevel
    start = time.perf_counter()
    with jax.set_mesh(self.trainer.mesh), nn.logical_axis_rules(partitioning.LOGICAL_AXIS_RULES):
      for _ in range(n):
        self.state, self.metrics = self.compiled(self.state, self.batch, self.rng)
    jax.block_until_ready(self.metrics)
    return (time.perf_counter() - start) / n


_FLOPS: dict[tuple[str, int], float] = {}


def model_flops(objective: str, quick: bool, batch_size: int) -> float:
  """The model's FLOPs of one step of `objective` at `batch_size`, the numerator of MFU.

  vmsst.compiler.step.model_flops of the same model built with
  variants.MODEL_FLOPS_BINDINGS (layers unrolled, nothing recomputed, the
  vocabulary head as whole logits), lowered on the CPU and not compiled. Not
  the compiled step's count: the tiled head is a loop whose body XLA's cost
  analysis counts once (vmsst/model/vocab_tiling.py), as are microbatches.
  """
  key = (objective, batch_size)
  if key not in _FLOPS:
    from vmsst.compiler import step as compile_lib  # pylint: disable=import-outside-toplevel
    from vmsst.compiler import variants  # pylint: disable=import-outside-toplevel
    model = build_model(objective, quick, bindings=variants.MODEL_FLOPS_BINDINGS)
    run = compile_lib.Run(model=model, optimizer=paper_optimizer(), batch_size=batch_size,
                          sequence_length=LENGTH, skip_nonfinite=False)
    _FLOPS[key] = compile_lib.model_flops(run, batch_size)
  return _FLOPS[key]


def estimate_memory(objective: str, model, batches: Sequence[int],
                    limit: float | None) -> tuple[dict[str, Any], dict[int, StepRun]]:
  """(the memory estimate, {batch: its compiled StepRun}) from the two smallest of `batches`.

  The step is compiled (not run: nothing is allocated) at both, by this
  device's own compiler (XLA:CPU in --quick); XLA's memory_analysis of each
  (arguments + outputs - aliased + temporaries) gives a line in the batch:
  the fixed bytes (the state) and the bytes per example. The estimate is the
  largest batch whose line stays under HEADROOM of `limit` (the device's; an
  80 GB device's where it reports none), and of an 80 GB device.
  """
  jax = _jax()
  small, large = sorted(set(batches))[:2]
  probes = {b: StepRun(model, b) for b in (small, large)}
  used = {b: probe.compiled_bytes for b, probe in probes.items()}
  per_example = max((used[large] - used[small]) / (large - small), 1.0)
  fixed = used[small] - per_example * small
  device = jax.devices()[0]
  fits = lambda memory: int((HEADROOM * memory - fixed) // per_example)
  estimate = {"probe_batches": [small, large],
              "probe_gib": [used[small] / 2**30, used[large] / 2**30],
              "probe_compile_s": [probes[b].compile_seconds for b in (small, large)],
              "fixed_gib": fixed / 2**30, "per_example_mib": per_example / 2**20,
              "compiler": f"{device.platform} ({device.device_kind})",
              "limit_gib": (limit or ASSUMED_DEVICE_BYTES) / 2**30,
              "limit_from": "the device" if limit else "an 80 GB device (none reported)",
              "headroom": HEADROOM, "max_batch": fits(limit or ASSUMED_DEVICE_BYTES),
              "max_batch_80gb": fits(ASSUMED_DEVICE_BYTES)}
  print(f"{objective}: compiled at batch {small} ({used[small] / 2**30:.2f} GiB) and {large} "
        f"({used[large] / 2**30:.2f} GiB) in {sum(estimate['probe_compile_s']):.0f} s: "
        f"{estimate['fixed_gib']:.2f} GiB + {estimate['per_example_mib']:.2f} MiB per example, "
        f"estimated to fit up to batch {estimate['max_batch']} in {estimate['limit_gib']:.0f} GiB "
        f"({estimate['max_batch_80gb']} in 80 GB)", flush=True)
  return estimate, probes


def _largest_batch_run(objective: str, model, quick: bool,
                       batches: Sequence[int] | None = None,
                       limit: int | None = None) -> tuple[Any, list[dict], dict | None]:
  """(a StepRun at the largest batch that fits, the sizes that did not, the memory estimate).

  With more than one size to try, `estimate_memory` compiles the step at the
  two smallest first and the search starts at the largest size expected to
  fit, so no compile is spent on one that cannot: on a GPU, compiling a step
  far over the memory autotunes each matmul against allocations that fail,
  for longer than the whole check may take (the first lease lost its time
  so). A size that still does not fit (its compiled estimate over the
  device's limit, or out of memory at its first step) falls to the next.
  """
  ladder = sorted(batches or BATCHES[quick], reverse=True)
  limit = limit or (_jax().devices()[0].memory_stats() or {}).get("bytes_limit")
  tried, estimate, probes = [], None, {}
  if len(set(ladder)) > 1:
    estimate, probes = estimate_memory(objective, model, ladder, limit)
    tried = [{"batch": b, "error": f"estimated over {HEADROOM:.0%} of "
                                   f"{estimate['limit_gib']:.0f} GiB"}
             for b in ladder if b > estimate["max_batch"]]
    ladder = [b for b in ladder if b <= estimate["max_batch"]] or ladder[-1:]
  for batch_size in ladder:
    try:
      run = probes.pop(batch_size, None)
      if run is None:
        run = StepRun(model, batch_size)
        print(f"{objective}: batch {batch_size} compiled in {run.compile_seconds:.0f} s",
              flush=True)
      if limit and run.compiled_bytes > 0.97 * limit:
        raise MemoryError(f"RESOURCE_EXHAUSTED: the compiled step needs "
                          f"{run.compiled_bytes / 2**30:.1f} GiB of {limit / 2**30:.1f}")
      run.start().steps(1)  # warm-up: the first allocation shows a runtime out-of-memory
      return run, tried, estimate
    except Exception as e:  # pylint: disable=broad-except
      if not _out_of_memory(e):
        raise
      tried.append({"batch": batch_size, "error": str(e).splitlines()[0][:200]})
      print(f"{objective}: batch {batch_size} does not fit", flush=True)
      run = None
      gc.collect()
      _jax().clear_caches()
  raise MemoryError(f"{objective}: no batch of {BATCHES[quick]} fits")


def emit(result: dict[str, Any]) -> None:
  """One result line for the parent (device_check.run_child): it survives a later timeout."""
  print("RESULT " + json.dumps(result), flush=True)


def speed(*, quick: bool, objectives, paper_batch: dict[str, Any] | None = None) -> None:
  """Emits a row of examples/s, MFU and memory per objective, at its largest batch that fits;
  then, with `paper_batch` ({"microbatches": N, "estimate": VMSST's, optional}), VMSST's row
  at the paper's batch in N microbatches (`paper_batch_row`)."""
  jax = _jax()
  peak = bf16_peak_flops(PEAK_MATMUL[quick])
  device = jax.devices()[0]
  print(f"{device.device_kind}: bf16 matmul peak {peak / 1e12:.1f} TFLOP/s", flush=True)
  estimates = {}
  for objective in objectives:
    model = build_model(objective, quick)
    tile_tokens = model.network_config.vocab_tile_tokens
    batches = None if not quick or objective in QUICK_ESTIMATED else BATCHES[quick][:1]
    run, did_not_fit, estimates[objective] = _largest_batch_run(objective, model, quick,
                                                                batches)
    if estimates[objective]:  # replaced by the row below
      emit({"objective": objective, "memory_estimate": estimates[objective],
            "error": "estimated only: the step was not timed"})
    seconds = run.steps(TIMED_STEPS[quick])
    stats = device.memory_stats() or {}
    row = {"objective": objective, "batch": run.batch_size, "did_not_fit": did_not_fit,
           "step_s": seconds, "examples_per_s": run.batch_size / seconds,
           "compile_s": run.compile_seconds, "loss": float(run.metrics["loss"]),
           "peak_memory_gib": stats.get("peak_bytes_in_use", float("nan")) / 2**30,
           "compiled_memory_gib": run.compiled_bytes / 2**30,
           "memory_estimate": estimates[objective], "vocab_tile_tokens": tile_tokens,
           "device": device.device_kind, "bf16_peak_tflops": peak / 1e12}
    print(f"{objective}: batch {run.batch_size}, {row['examples_per_s']:.0f} examples/s, "
          f"peak {row['peak_memory_gib']:.1f} GiB", flush=True)
    emit(row)  # the timing survives a failure in the FLOP count below
    del run
    gc.collect()
    row["model_flops"] = model_flops(objective, quick, row["batch"])
    row["mfu"] = row["model_flops"] / seconds / peak
    print(f"{objective}: MFU {row['mfu']:.1%}", flush=True)
    emit(row)
  if paper_batch is not None:
    paper_batch_row(quick=quick, peak=peak, microbatches=paper_batch["microbatches"],
                    estimate=paper_batch.get("estimate") or estimates.get("vmsst"))


def refuse_paper_batch(estimate: dict[str, Any] | None, batch: int,
                       microbatches: int) -> str | None:
  """Why VMSST at `batch` in `microbatches` microbatches is not tried, or None.

  Refused when N does not divide the batch, or when a microbatch is over
  VMSST's memory estimate (its row's `memory_estimate`; the float32 gradient
  sum, one copy of the parameters, is not in it: the compiled step's own
  figure is checked before it runs).
  """
  if batch % microbatches:
    return f"--microbatches={microbatches} does not divide the batch {batch}"
  if estimate is None or batch // microbatches <= estimate["max_batch"]:
    return None
  enough = microbatches
  while batch // enough > estimate["max_batch"] and enough < batch:
    enough *= 2
  return (f"a microbatch of {batch // microbatches} is estimated over "
          f"{estimate['headroom']:.0%} of {estimate['limit_gib']:.0f} GiB (VMSST fits up to "
          f"batch {estimate['max_batch']}); --microbatches={enough} would fit")


def paper_batch_row(*, quick: bool, microbatches: int, estimate: dict[str, Any] | None = None,
                    peak: float | None = None) -> None:
  """Emits VMSST's row at the paper's batch (PAPER_BATCH) in `microbatches` microbatches
  (Trainer(microbatches=N): one update from N accumulated microbatches), or why it did not run.

  The row is marked "paper_batch"; MFU from the model's FLOPs of the whole batch.
  """
  jax = _jax()
  batch, objective = PAPER_BATCH[quick], "vmsst"
  row = {"objective": objective, "paper_batch": True, "batch": batch,
         "microbatches": microbatches, "microbatch": batch // microbatches}
  refused = refuse_paper_batch(estimate, batch, microbatches)
  if refused:
    print(f"{objective}: batch {batch} in {microbatches} microbatches not tried: {refused}",
          flush=True)
    emit({**row, "error": refused})
    return
  peak = peak or bf16_peak_flops(PEAK_MATMUL[quick])
  device = jax.devices()[0]
  limit = (device.memory_stats() or {}).get("bytes_limit")
  model = build_model(objective, quick)
  run = StepRun(model, batch, microbatches)
  row.update(compile_s=run.compile_seconds, compiled_memory_gib=run.compiled_bytes / 2**30,
             vocab_tile_tokens=model.network_config.vocab_tile_tokens,
             device=device.device_kind, bf16_peak_tflops=peak / 1e12)
  print(f"{objective}: batch {batch} in {microbatches} microbatches compiled in "
        f"{run.compile_seconds:.0f} s, {row['compiled_memory_gib']:.1f} GiB", flush=True)
  try:
    if limit and run.compiled_bytes > 0.97 * limit:
      raise MemoryError(f"RESOURCE_EXHAUSTED: the compiled step needs "
                        f"{run.compiled_bytes / 2**30:.1f} GiB of {limit / 2**30:.1f}")
    run.start().steps(1)
  except Exception as e:  # pylint: disable=broad-except
    if not _out_of_memory(e):
      raise
    emit({**row, "error": str(e).splitlines()[0][:200]})
    return
  seconds = run.steps(TIMED_STEPS[quick])
  stats = device.memory_stats() or {}
  row.update(step_s=seconds, examples_per_s=batch / seconds, loss=float(run.metrics["loss"]),
             peak_memory_gib=stats.get("peak_bytes_in_use", float("nan")) / 2**30)
  print(f"{objective}: batch {batch} in {microbatches} microbatches, "
        f"{row['examples_per_s']:.0f} examples/s, peak {row['peak_memory_gib']:.1f} GiB",
        flush=True)
  emit(row)
  del run
  gc.collect()
  row["model_flops"] = model_flops(objective, quick, batch)
  row["mfu"] = row["model_flops"] / seconds / peak
  print(f"{objective}: batch {batch} in {microbatches} microbatches, MFU {row['mfu']:.1%}",
        flush=True)
  emit(row)


def peer(*, quick: bool, batch: int) -> dict[str, Any]:
  """sentence-transformers' MNRL step at the speed part's Contrastive shape, bf16 autocast."""
  del quick
  import torch  # pylint: disable=import-outside-toplevel
  sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
  import train_throughput  # pylint: disable=import-outside-toplevel
  cfg = build_model("contrastive", False).network_config
  device = "cuda" if torch.cuda.is_available() else "cpu"
  run = train_throughput.peer(cfg, synthetic_batch(batch, LENGTH, cfg.vocab_size),
                              cfg.dropout_rate, "bfloat16", length=LENGTH, steps=5, device=device)
  seconds = run()
  return {"peer": "sentence-transformers MultipleNegativesRankingLoss", "device": device,
          "batch": batch, "precision": "bf16 autocast, f32 parameters, AdamW",
          "pairs_per_s": batch / seconds,
          "peak_memory_gib": (torch.cuda.max_memory_allocated() / 2**30
                              if device == "cuda" else None)}


def profile(*, quick: bool, objective: str, batch: int | None = None,
            steps: int = 3) -> dict[str, Any]:
  """A jax.profiler trace of `steps` steps of `objective` (at speed's batch), as its top ops."""
  jax = _jax()
  model = build_model(objective, quick)
  run, _, _ = _largest_batch_run(objective, model, quick, [batch] if batch else None)
  trace_dir = tempfile.mkdtemp(prefix="vmsst-trace-")
  with jax.profiler.trace(trace_dir, create_perfetto_trace=True):
    seconds = run.steps(steps)
  source, ops = top_operations(trace_dir)
  return {"objective": objective, "batch": run.batch_size, "steps": steps, "step_s": seconds,
          "source": source, "top_ops": ops}


def top_operations(trace_dir: str, top: int = 15) -> tuple[str, list[dict[str, Any]]]:
  """(where the times come from, the trace's operations by total time in ms).

  Read from the Chrome-format trace the profiler writes beside its xplane
  (`<host>.trace.json.gz`, else `perfetto_trace.json.gz`). Device time is
  that of the GPU/TPU processes' events; without one (a CPU), that of XLA's
  own threads, not Python's.
  """
  import collections  # pylint: disable=import-outside-toplevel
  from vmsst.base import files  # pylint: disable=import-outside-toplevel
  runs = files.join(trace_dir, "plugins", "profile", "*")
  paths = (files.glob(files.join(runs, "*.trace.json.gz"))
           or files.glob(files.join(runs, "perfetto_trace.json.gz")))
  if not paths:
    found = [name for _, _, names in files.walk(trace_dir) for name in names]
    raise FileNotFoundError(f"no trace.json.gz under {trace_dir}, only {found}")
  events = json.loads(gzip.decompress(files.read_bytes(paths[-1])))["traceEvents"]
  processes = {e["pid"]: e["args"]["name"] for e in events
               if e.get("ph") == "M" and e.get("name") == "process_name"}
  threads = {(e["pid"], e["tid"]): e["args"]["name"] for e in events
             if e.get("ph") == "M" and e.get("name") == "thread_name"}
  devices = {pid for pid, name in processes.items() if "/device:" in name}

  def on_device(event) -> bool:
    if devices:
      return event["pid"] in devices
    return ("XLA" in threads.get((event["pid"], event.get("tid")), "")
            and not event["name"].startswith("ThunkExecutor"))  # the CPU's wrapper, not an op

  total, count = collections.Counter(), collections.Counter()
  for event in events:
    if event.get("ph") == "X" and on_device(event):
      total[event["name"]] += event.get("dur", 0) / 1000
      count[event["name"]] += 1
  whole = sum(total.values()) or 1.0
  source = ("device: " + ", ".join(sorted(processes[p] for p in devices)) if devices
            else "host: XLA's threads")
  return source, [{"op": name, "ms": ms, "share": ms / whole, "count": count[name]}
                  for name, ms in total.most_common(top)]


class WallClock:
  """`train(early_stopping=...)`: stops a run `seconds` after its first evaluation.

  The loop calls `observe` after each evaluation (every eval_every steps),
  so the budget starts once the step is compiled and running; `curve` keeps
  each evaluation's (step, seconds, results).
  """

  def __init__(self, seconds: float):
    self.seconds, self.started, self.curve = seconds, None, []

  def resume(self, evaluator, eval_every: int) -> bool:
    del evaluator, eval_every
    return False

  def observe(self, step: int, results, params) -> bool:
    del params
    now = time.time()
    self.started = self.started or now
    self.curve.append({"step": step, "seconds": now - self.started, **results})
    return now - self.started >= self.seconds

  def save_final(self, manager, step: int, state):
    from vmsst.training import checkpointing  # pylint: disable=import-outside-toplevel
    checkpointing.save(manager, step, state, force=True)
    return state


def comparison(*, quick: bool, data: str, objectives, train_seconds: float) -> None:
  """Emits each objective's run: trained by `train` on DATA's stream for `train_seconds`, scored."""
  from vmsst.base import files  # pylint: disable=import-outside-toplevel
  from vmsst.base import sentencepiece_vocabulary  # pylint: disable=import-outside-toplevel
  from vmsst.evaluation import in_training  # pylint: disable=import-outside-toplevel
  from vmsst.training import loop  # pylint: disable=import-outside-toplevel
  _jax()
  stream = files.join(data, "stream")
  meta = json.loads(files.read_text(files.join(stream, "stream.json")))
  sets = {name: tuple(pair) for name, pair in
          json.loads(files.read_text(files.join(data, "heldout.json"))).items()}
  vocab = sentencepiece_vocabulary.get_vocabulary(files.join(stream, "spm.model"))
  for objective in objectives:
    model_dir = tempfile.mkdtemp(prefix=f"vmsst-{objective}-")
    build_model(objective, quick, vocab_size=vocab.vocab_size, bindings=[
        *([] if quick else COMPARISON_SIZE), *_train_bindings(model_dir, meta, stream, quick)])
    clock = WallClock(train_seconds)
    evaluator = in_training.RetrievalEvaluator(sets, vocab, sequence_length=meta["sequence_length"],
                                               batch_size=64 if quick else 256)
    started = time.time()
    result = loop.train(evaluator=evaluator, early_stopping=clock)
    run = {"objective": objective, "steps": result["step"], "seconds": time.time() - started,
                       "train_seconds": clock.curve[-1]["seconds"] if clock.curve else None,
                       "batch": COMPARISON_BATCH[quick], "curve": clock.curve,
                       "final_retrieval": result["retrieval"],
                       "final_loss": result["final_metrics"].get("loss"),
                       "xsim": _xsim(model_dir, sets)}
    emit(run)
    print(f"{objective}: {result['step']} steps, held-out retrieval "
          f"{result['retrieval'].get('mean')}", flush=True)


def _train_bindings(model_dir: str, meta: dict[str, Any], stream: str, quick: bool) -> list[str]:
  every = 2 if quick else 50
  return [f"train.model_dir = '{model_dir}'", f"train.mixture_name = '{meta['mixture']}'",
          "train.train_steps = 1000000", f"train.batch_size = {COMPARISON_BATCH[quick]}",
          f"train.sequence_length = {meta['sequence_length']}", f"train.seed = {meta['seed']}",
          f"train.log_every = {every}", f"train.eval_every = {every}",
          f"train.pretokenized = '{stream}'",
          "train.optimizer = @adamw()", "adamw.learning_rate = @inverse_sqrt_schedule()",
          "adamw.weight_decay = 0.0", "inverse_sqrt_schedule.peak_learning_rate = 1e-3",
          "inverse_sqrt_schedule.warmup_steps = 100",
          "make_manager.save_interval_steps = 1000000", "make_manager.max_to_keep = 1"]


def _xsim(model_dir: str, sets) -> dict[str, Any]:
  """The checkpoint's μ_sem of each held-out set, scored by the parallel suite's xsim (×100)."""
  from vmsst.encoding import checkpoint  # pylint: disable=import-outside-toplevel
  from vmsst.evaluation import parallel  # pylint: disable=import-outside-toplevel
  encoder = checkpoint.CheckpointEncoder.from_model_dir(model_dir)
  scores = {name: parallel.xsim_errors(encoder.encode(list(src)), encoder.encode(list(trg)))
            for name, (src, trg) in sets.items() if len(src)}
  keys = ("forward", "backward", "forward_margin", "backward_margin")
  scores["average"] = {k: sum(s[k] for s in scores.values()) / len(scores) for k in keys}
  return scores


def prepare(data: str, data_dir: str, *, examples: int = STREAM_EXAMPLES) -> None:
  """DATA for the comparison: vocabulary, NTREX-128 + Multi30k stream, held-out sets (seqio)."""
  import subprocess  # pylint: disable=import-outside-toplevel
  from vmsst.base import files  # pylint: disable=import-outside-toplevel
  from vmsst_tasks.sources import heldout  # pylint: disable=import-outside-toplevel
  from vmsst import pretokenize  # pylint: disable=import-outside-toplevel
  spm = files.join(data, "vocab", "spm")
  if not files.exists(spm + ".model"):
    subprocess.run([sys.executable, "-m", "vmsst.vocabulary", f"--data_dir={data_dir}",
                    f"--output={spm}"], check=True, cwd=ROOT)
  meta = pretokenize.write_run_stream(
      ["gin/runs/contrastive_cpu.gin"],
      [f"DATA_DIR = '{data_dir}'", f"VOCAB_PATH = '{spm}.model'", f"SEQUENCE_LENGTH = {LENGTH}",
       "train.seed = 0"], [ROOT], output=files.join(data, "stream"), examples=examples)
  files.write_text(files.join(data, "heldout.json"),
                   json.dumps({k: list(map(list, v)) for k, v in
                               heldout.retrieval_sets(data_dir, max_pairs=500).items()}))
  print(f"wrote {meta['examples']} examples and the held-out sets into {data}")


CHILDREN = {"speed": speed, "peer": peer, "profile": profile, "comparison": comparison}


def summary(results: dict[str, Any]) -> str:
  """device_check.md: the figures as short tables."""
  lines = ["# Device check", "", f"quick: {results.get('quick')}; total "
           f"{results.get('total_seconds', float('nan')):.0f} s; budgets (s): "
           f"{results.get('budgets_s')}", ""]
  parts = results.get("parts", {})
  if "speed" in parts:
    lines += ["## Speed (paper 6-layer shape, bf16 compute, f32 parameters)", "",
              "| objective | batch | examples/s | MFU | peak GiB | compile s |",
              "|---|---|---|---|---|---|"]
    for row in parts["speed"].get("rows", []):
      if "examples_per_s" in row:
        lines.append(f"| {row['objective']} | {row['batch']} | {row['examples_per_s']:.0f} | "
                     f"{format(row['mfu'], '.1%') if 'mfu' in row else 'not counted'} | "
                     f"{row['peak_memory_gib']:.1f} | {row['compile_s']:.0f} |")
      else:
        lines.append(f"| {row.get('objective')} | – | {row.get('error')} | | | |")
    paper = parts["speed"].get("paper_batch")
    if paper:
      name = (f"vmsst, {paper.get('microbatches')} microbatches of {paper.get('microbatch')}"
              if "microbatches" in paper else "vmsst at the paper's batch")
      if "examples_per_s" in paper:
        lines.append(f"| {name} | {paper['batch']} | {paper['examples_per_s']:.0f} | "
                     f"{format(paper['mfu'], '.1%') if 'mfu' in paper else 'not counted'} | "
                     f"{paper['peak_memory_gib']:.1f} | {paper['compile_s']:.0f} |")
      else:
        lines.append(f"| {name} | {paper.get('batch', '–')} | "
                     f"{paper.get('error') or paper.get('skipped')} | | | |")
    estimates = [(row["objective"], row["memory_estimate"])
                 for row in parts["speed"].get("rows", []) if row.get("memory_estimate")]
    if estimates:
      lines += ["", "Memory estimate before the search (XLA's memory_analysis of the step "
                "compiled at two batches, a line through them):", "",
                "| objective | compiled at | fixed GiB | MiB per example | fits up to | "
                "in 80 GB |", "|---|---|---|---|---|---|"]
      lines += [f"| {name} | {e['probe_batches']} on {e['compiler']} | {e['fixed_gib']:.2f} | "
                f"{e['per_example_mib']:.2f} | {e['max_batch']} ({e['limit_gib']:.0f} GiB, "
                f"{e['headroom']:.0%}) | {e['max_batch_80gb']} |" for name, e in estimates]
    peer_row = parts["speed"].get("peer", {})
    lines += ["", f"sentence-transformers peer: {json.dumps(peer_row)}", ""]
  if "profile" in parts:
    prof = parts["profile"]
    lines += [f"## Profile: {prof.get('objective')} (batch {prof.get('batch')}; "
              f"{prof.get('source')})", "",
              "| op | ms | share | count |", "|---|---|---|---|"]
    lines += [f"| `{o['op'][:60]}` | {o['ms']:.1f} | {o['share']:.1%} | {o['count']} |"
              for o in prof.get("top_ops", [])]
    if "error" in prof:
      lines.append(f"error: {prof['error']}")
    lines.append("")
  if "comparison" in parts:
    comp = parts["comparison"]
    lines += [f"## Comparison ({comp.get('train_seconds_each')} s of training each)", "",
              "| objective | steps | held-out retrieval | xsim (cosine, avg of both ways) |",
              "|---|---|---|---|"]
    for name, run in comp.get("runs", {}).items():
      if "steps" not in run:
        lines.append(f"| {name} | – | {run.get('error')} | |")
        continue
      xsim = run["xsim"]["average"]
      retrieval = run["final_retrieval"].get("mean", float("nan"))
      lines.append(f"| {name} | {run['steps']} | {retrieval:.1f} | "
                   f"{(xsim['forward'] + xsim['backward']) / 2:.1f} |")
  return "\n".join(lines) + "\n"


def child_main(argv: Sequence[str]) -> None:
  """A child of bench/device_check.py: one piece of work, its results as RESULT lines."""
  del argv
  from absl import flags  # pylint: disable=import-outside-toplevel
  from absl import logging  # pylint: disable=import-outside-toplevel
  options = flags.FLAGS
  logging.set_verbosity(logging.WARNING)  # progress is the children's own lines and warnings
  result = CHILDREN[options.child](quick=options.quick, **json.loads(options.child_args))
  if result is not None:
    emit(result)


if __name__ == "__main__":
  from absl import app  # pylint: disable=g-import-not-at-top
  from absl import flags as _flags  # pylint: disable=g-import-not-at-top
  _flags.DEFINE_enum("child", None, list(CHILDREN), "The piece of work to run.", required=True)
  _flags.DEFINE_string("child_args", "{}", "The piece's arguments (JSON).")
  _flags.DEFINE_bool("quick", False, "Tiny shapes: bench/device_check.py --quick.")
  app.run(child_main)
