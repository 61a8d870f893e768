"""A run's train step compiled for a mesh: its memory per chip, FLOPs and program fingerprint.

The library of `python -m vmsst.compile` (the command's flags and printing stay
there): `load_run` builds the step `train` would run from the run file,
`compile_step` compiles it for a mesh (a TPU slice's chips from
`vmsst.training.slices`, forced CPU devices or this machine's), `find_max_batch`
searches the largest batch that fits, `Report`/`describe` are the per-chip table,
and `program_fingerprint` lets a record stand for a compile of minutes (`--reuse`).
Benchmarks and tests import this module, never the command.
"""

import dataclasses
import functools
import hashlib
import importlib.metadata
import json
import os
import time
from typing import Any, Sequence

import flax.linen as nn
import jax
import numpy as np

from vmsst.base import cli
from vmsst.base import files
from vmsst.training import configurables
from vmsst.base.gin_utils import gin
from vmsst.training import slices as tpu_slices
from vmsst.model import partitioning
from vmsst.training import preflight
from vmsst.training import trainer as trainer_lib


GIB = tpu_slices.GIB
STEPS_FOR_DAYS = 100_000
UTILISATION_FOR_DAYS = 0.4
DOES_NOT_FIT_EXIT_CODE = 3


@dataclasses.dataclass(frozen=True)
class StepMemory:
  """Bytes per device of one compiled train step (and its compile seconds)."""

  params: int
  optimizer_state: int
  arguments: int
  outputs: int
  aliased: int
  temp: int
  generated_code: int
  compile_seconds: float

  @property
  def peak(self) -> int:
    """Live at once: inputs, outputs not written in place, and temporaries."""
    return self.arguments + self.outputs - self.aliased + self.temp


@dataclasses.dataclass(frozen=True)
class Compiled:
  """One compile: its memory per chip, or why it does not fit.

  Attributes:
    memory: None when the compiler ran out of memory.
    compiler_flops: the compiled per-chip program's FLOPs (XLA cost analysis).
    flops_complete: False when the program has a `while` loop, whose body
      the cost analysis counts once (scan_layers).
    oom_message: why it does not fit: the compiler's out-of-memory message,
      or (memory set) a peak over the chip's HBM that the compiler let pass.
    program: the fingerprint of what was compiled (`program_fingerprint`).
  """

  memory: StepMemory | None
  compiler_flops: float | None = None
  flops_complete: bool = False
  oom_message: str | None = None
  program: str | None = None

  @property
  def fits(self) -> bool:
    return self.memory is not None and self.oom_message is None


@dataclasses.dataclass(frozen=True)
class Run:
  """What the step is built from, read once from the parsed gin config."""

  model: Any
  optimizer: Any
  batch_size: int
  sequence_length: int
  skip_nonfinite: bool
  microbatches: int = 1  # train.microbatches: the accumulating step (trainer.train_step)


def bytes_per_device(tree: Any) -> int:
  """Bytes one device holds of a tree of sharded ShapeDtypeStructs (its shard sizes)."""
  return sum(int(np.prod(leaf.sharding.shard_shape(leaf.shape))) * leaf.dtype.itemsize
             for leaf in jax.tree.leaves(tree))


def abstract_key() -> jax.ShapeDtypeStruct:
  """The step's rng as a shape: a concrete key would be placed on a device, which a
  compile-only TPU device cannot hold."""
  return jax.eval_shape(lambda: jax.random.key(0))


def is_out_of_memory(error: Exception) -> bool:
  text = str(error)
  return "RESOURCE_EXHAUSTED" in text or "Ran out of memory" in text


def program_fingerprint(lowered: Any, devices: Sequence[Any]) -> str:
  """What decides the compiled executable: the lowered program (without source
  locations, so a clone elsewhere or a moved line gives the same text), the
  chips' kind and count, the JAX and libtpu versions and the compiler flags.

  Two equal fingerprints compile to the same executable, so a record carrying
  one stands for a compile of minutes (`--reuse`).
  """
  try:
    libtpu = importlib.metadata.version("libtpu")
  except importlib.metadata.PackageNotFoundError:
    libtpu = "none"
  xla_flags = [f for f in os.environ.get("XLA_FLAGS", "").split()
               if not f.startswith("--xla_force_host_platform_device_count")]  # CPU only
  parts = [lowered.as_text(), devices[0].device_kind, str(len(devices)), jax.__version__,
           libtpu, os.environ.get("LIBTPU_INIT_ARGS", ""), " ".join(xla_flags)]
  return hashlib.sha256("\n".join(parts).encode()).hexdigest()


def lower_step(run: Run, mesh: jax.sharding.Mesh, batch_size: int) -> tuple[Any, Any]:
  """`run`'s train step as `train` builds it, lowered for `mesh`: (trainer, lowered)."""
  trainer = trainer_lib.Trainer(run.model, run.optimizer, mesh,
                                run.model.input_shapes(batch_size, run.sequence_length),
                                skip_nonfinite=run.skip_nonfinite,
                                microbatches=run.microbatches)
  return trainer, trainer.lower_step(abstract_key())


# XLA's default optimisation, whatever this process was told (XLA_FLAGS, JAX's
# jax_disable_most_optimizations): a report describes the program the slice's compiler builds
# by default, so a setting meant for this machine's own programs (the test suite compiles its
# tiny models unoptimised) does not change a step's memory or whether it fits.
REPORT_COMPILER_OPTIONS = {"xla_backend_optimization_level": 3,
                           "xla_llvm_disable_expensive_passes": False}


def compile_step(run: Run, mesh: jax.sharding.Mesh, batch_size: int,
                 hbm_bytes: int | None = None) -> Compiled:
  """Compiles `run`'s train step for `mesh` at `batch_size` and measures it.

  With `hbm_bytes` a peak above it does not fit either: the TPU compiler has
  been seen to compile a step whose own memory analysis needs more than the
  chip holds (docs/results/tpu_compile/scan_without_remat/), which the chip
  would not run.
  """
  start = time.perf_counter()
  trainer, lowered = lower_step(run, mesh, batch_size)
  program = program_fingerprint(lowered, mesh.devices.flat)
  try:
    with jax.set_mesh(mesh), nn.logical_axis_rules(partitioning.LOGICAL_AXIS_RULES):
      compiled = lowered.compile(compiler_options=REPORT_COMPILER_OPTIONS)
  except Exception as e:  # pylint: disable=broad-except (XlaRuntimeError: not importable stably)
    if not is_out_of_memory(e):
      raise
    return Compiled(memory=None, oom_message=str(e), program=program)
  seconds = time.perf_counter() - start
  analysis = compiled.memory_analysis()
  state = trainer.abstract_state
  cost = compiled.cost_analysis() or {}
  memory = StepMemory(
      params=bytes_per_device(state.params),
      optimizer_state=bytes_per_device(state.opt_state),
      arguments=analysis.argument_size_in_bytes,
      outputs=analysis.output_size_in_bytes,
      aliased=analysis.alias_size_in_bytes,
      temp=analysis.temp_size_in_bytes,
      generated_code=analysis.generated_code_size_in_bytes,
      compile_seconds=seconds)
  return Compiled(memory=memory, compiler_flops=cost.get("flops"),
                  flops_complete=" while(" not in compiled.as_text(),
                  oom_message=over_hbm(memory, hbm_bytes), program=program)


def over_hbm(memory: StepMemory, hbm_bytes: int | None) -> str | None:
  """Why a compiled step's peak does not fit `hbm_bytes`, or None."""
  if hbm_bytes is None or memory.peak <= hbm_bytes:
    return None
  return (f"its memory analysis needs {memory.peak / GIB:.2f} GiB per chip (arguments + "
          f"outputs - aliased + temporaries) and the chip has {hbm_bytes / GIB:.0f} GiB of HBM")


def step_memory(model, optimizer, mesh: jax.sharding.Mesh, *, batch_size: int,
                sequence_length: int) -> StepMemory:
  """Memory per device of `model`'s compiled train step (the library form of the command)."""
  compiled = compile_step(Run(model, optimizer, batch_size, sequence_length, False), mesh,
                          batch_size)
  if not compiled.fits:
    raise MemoryError(compiled.oom_message)
  return compiled.memory


def model_flops(run: Run, batch_size: int) -> float:
  """FLOPs of one whole train step as written, before XLA optimises it.

  Lowered for one CPU device (the global batch, no sharding: nothing is
  compiled or allocated) and counted by XLA's HLO cost analysis. Every input
  is placed on that CPU device, so the lowering is the CPU's also where the
  default backend is a GPU, whose lowered programs carry no FLOP count.
  `run` must be built with `variants.MODEL_FLOPS_BINDINGS`: under scan the count would
  hold one layer. For the same reason the step is lowered without
  `run.microbatches`: the accumulating step does the same arithmetic (plus
  one add per parameter and microbatch) in a scan whose body the analysis
  would count once (measured: half the FLOPs at 2 microbatches).
  """
  shapes = run.model.input_shapes(batch_size, run.sequence_length)
  dtypes = run.model.feature_dtypes()
  cpu_device = jax.devices("cpu")[0]
  cpu = jax.sharding.SingleDeviceSharding(cpu_device)
  on_cpu = lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=cpu)
  batch = {k: on_cpu(jax.ShapeDtypeStruct(s, dtypes[k])) for k, s in shapes.items()}
  mesh = partitioning.make_mesh(1, 1, devices=[cpu_device])
  trainer = trainer_lib.Trainer(run.model, run.optimizer, mesh, shapes)
  state = jax.tree.map(on_cpu, trainer.abstract_state)
  step = jax.jit(functools.partial(trainer_lib.train_step, run.model, run.optimizer))
  with nn.logical_axis_rules(partitioning.LOGICAL_AXIS_RULES):
    lowered = step.lower(state, batch, on_cpu(abstract_key()))
  costs = lowered.cost_analysis() or {}
  if "flops" not in costs:
    raise ValueError(f"XLA's cost analysis of the lowered step has no 'flops' ({sorted(costs)})")
  return float(costs["flops"])


def _bound(name: str, default: Any = None) -> Any:
  try:
    value = gin.query_parameter(name)
  except ValueError:
    return default
  return value.scoped_configurable_fn() if isinstance(
      value, gin.config.ConfigurableReference) else value


# What the step is built from: a macro these read must be set (an unset TEACHER_DIM is one
# error line naming it); MODEL_DIR, VOCAB_PATH, OPUS_DIR and the like may stay unset.
STEP_NEEDS = ("train.model", "train.optimizer", "train.batch_size", "train.sequence_length")


def load_run(gin_files: Sequence[str], bindings: Sequence[str]) -> Run:
  """Parses the run file(s) with `bindings` and builds its model and optimizer.

  Macros the step does not depend on (MODEL_DIR, OPUS_DIR, INIT_PARAMS, ...)
  may stay unbound: they are never read.

  Raises:
    cli.UserError: the files do not name a train run, or building the model
      needs a macro left unbound.
  """
  gin.clear_config()
  configurables.parse_gin(gin_files, bindings, needs=STEP_NEEDS)
  try:
    model, optimizer = _bound("train.model"), _bound("train.optimizer")
  except Exception as e:  # gin re-raises the configurable's own error with its context
    raise cli.UserError(f"building the model of {list(gin_files)} failed: {e}; bind what "
                        "it names with --gin.X=Y") from e
  batch, length = _bound("train.batch_size"), _bound("train.sequence_length")
  if model is None or optimizer is None or batch is None or length is None:
    raise cli.UserError(f"{list(gin_files)} binds no train.model / optimizer / batch_size / "
                        "sequence_length: give a run file (gin/runs/*.gin), not a model file")
  microbatches = int(_bound("train.microbatches", 1))
  preflight.check_microbatches(model, int(batch), microbatches)  # an in-batch objective: refused
  return Run(model, optimizer, int(batch), int(length),
             skip_nonfinite=bool(_bound("train.skip_nonfinite_steps", 0)),
             microbatches=microbatches)


def target_mesh(devices: Sequence[Any]) -> jax.sharding.Mesh:
  """The run file's mesh (make_mesh.* bindings) over `devices`; a misfit is a UserError."""
  try:
    return partitioning.make_mesh(devices=devices)
  except ValueError as e:
    raise cli.UserError(f"the run's mesh does not fit {len(devices)} chips: {e}") from e


def check_batch(batch_size: int, mesh: jax.sharding.Mesh, microbatches: int = 1) -> None:
  """The batch divides over the data axis, and each of `microbatches` microbatches too."""
  data = mesh.shape["data"]
  if batch_size % data:
    raise cli.UserError(f"--batch_size={batch_size} does not divide over the data axis "
                        f"({data}); pick a multiple of {data}")
  if batch_size % (data * microbatches):
    raise cli.UserError(f"--batch_size={batch_size} in train.microbatches = {microbatches} "
                        f"microbatches does not divide over the data axis ({data}); pick a "
                        f"multiple of {data * microbatches}")


def find_max_batch(run: Run, mesh: jax.sharding.Mesh, start: int,
                   compile_fn=compile_step) -> tuple[int, dict[int, Compiled]]:
  """The largest global batch (a multiple of the data axis × run.microbatches) whose step fits.

  Doubles from `start` until a step does not fit (or halves until one does),
  then bisects between the last that fit and the first that did not. Returns
  (the batch, 0 if not even one row per data shard fits; every compile tried).
  """
  unit = mesh.shape["data"] * run.microbatches
  tried: dict[int, Compiled] = {}

  def fits(rows: int) -> bool:
    tried[rows * unit] = compile_fn(run, mesh, rows * unit)
    print(f"  batch {rows * unit}: {'fits' if tried[rows * unit].fits else 'does not fit'}",
          flush=True)
    return tried[rows * unit].fits

  rows = max(1, start // unit)
  if fits(rows):
    low, high = rows, None
    while high is None:
      if fits(2 * low):
        low *= 2
      else:
        high = 2 * low
  else:
    high, low = rows, 0
    while low == 0 and high > 1:
      if fits(high // 2):
        low = high // 2
      else:
        high //= 2
    if low == 0:
      return 0, tried
  while high - low > 1:
    middle = (low + high) // 2
    if fits(middle):
      low = middle
    else:
      high = middle
  return low * unit, tried


@dataclasses.dataclass(frozen=True)
class Report:
  """One run on one slice: what the README's paper-scale table shows."""

  run_file: str
  slice_name: str
  chips: int
  mesh: dict[str, int]
  batch_size: int
  compiled: Compiled
  model_flops_per_chip: float
  hbm_bytes: int
  bf16_flops: float

  @property
  def lower_bound_step_seconds(self) -> float:
    return self.model_flops_per_chip / self.bf16_flops

  @property
  def estimated_days(self) -> float:
    return (STEPS_FOR_DAYS * self.lower_bound_step_seconds / UTILISATION_FOR_DAYS / 86400)

  def as_dict(self) -> dict[str, Any]:
    memory = self.compiled.memory
    return {
        "run_file": self.run_file, "slice": self.slice_name, "chips": self.chips,
        "mesh": self.mesh, "batch_size": self.batch_size, "fits": self.compiled.fits,
        "memory_per_chip": dataclasses.asdict(memory) if memory else None,
        "peak_bytes_per_chip": memory.peak if memory else None,
        "hbm_bytes_per_chip": self.hbm_bytes,
        "model_flops_per_chip": self.model_flops_per_chip,
        "compiler_flops_per_chip": self.compiled.compiler_flops,
        "compiler_flops_complete": self.compiled.flops_complete,
        "lower_bound_step_seconds": self.lower_bound_step_seconds,
        "estimated_days_100k_steps_at_40pct": self.estimated_days,
        "oom_message": self.compiled.oom_message,
        "program": self.compiled.program,
    }


def describe(report: Report) -> str:
  """The per-chip lines the command prints."""
  memory = report.compiled.memory
  head = (f"{report.run_file} on {report.slice_name} ({report.chips} chips, mesh "
          f"{report.mesh}), global batch {report.batch_size}, per chip:")
  flops = f"  FLOPs per step: {report.model_flops_per_chip:.3g} (the model's count)"
  if report.compiled.compiler_flops is not None:
    note = ("complete" if report.compiled.flops_complete
            else "incomplete: a while loop's body counted once")
    flops += f"; the compiler's {report.compiled.compiler_flops:.3g} ({note})"
  lines = [head]
  if memory is not None:
    lines += [
        f"  parameters {memory.params / GIB:.2f} GiB, optimizer state "
        f"{memory.optimizer_state / GIB:.2f} GiB",
        f"  arguments {memory.arguments / GIB:.2f} GiB, outputs {memory.outputs / GIB:.2f} "
        f"GiB (aliased {memory.aliased / GIB:.2f}), temporaries {memory.temp / GIB:.2f} GiB",
        f"  peak {memory.peak / GIB:.2f} GiB of {report.hbm_bytes / GIB:.0f} GiB HBM "
        f"({100 * memory.peak / report.hbm_bytes:.0f}%); compiled in "
        f"{memory.compile_seconds:.0f} s"]
  if not report.compiled.fits:
    lines.append(f"  does not fit {report.hbm_bytes / GIB:.0f} GiB of HBM: "
                 + ("the compiler said:" if memory is None else "compiled, but"))
    lines += ["    " + line for line in report.compiled.oom_message.strip().splitlines()[:12]]
  lines += [flops,
            f"  step time at the bf16 peak ({report.bf16_flops / 1e12:.0f} TFLOP/s): at least "
            f"{1e3 * report.lower_bound_step_seconds:.3g} ms (a lower bound, not measured)",
            f"  {STEPS_FOR_DAYS:,} steps at {UTILISATION_FOR_DAYS:.0%} of that peak: about "
            f"{report.estimated_days:.3g} days (an estimate)"]
  return "\n".join(lines)


def markdown_table(rows: dict[str, StepMemory]) -> str:
  """One line per variant, GiB per device (the XLA:CPU variants table)."""
  head = ("| variant | params | optimizer state | arguments | outputs | aliased | temp "
          "| peak | code (MiB) | compile (s) |")
  lines = [head, "|" + "---|" * 10]
  for name, m in rows.items():
    gib = [f"{x / GIB:.2f}" for x in (m.params, m.optimizer_state, m.arguments, m.outputs,
                                      m.aliased, m.temp, m.peak)]
    lines.append(f"| {name} | " + " | ".join(gib)
                 + f" | {m.generated_code / 2**20:.1f} | {m.compile_seconds:.0f} |")
  return "\n".join(lines)


def parse_mesh(text: str) -> tuple[int, int]:
  """'data:16,model:4' -> (16, 4)."""
  try:
    sizes = {k: int(v) for k, v in (part.split(":") for part in text.split(","))}
  except ValueError:
    sizes = {}
  if set(sizes) != set(partitioning.MESH_AXES) or min(sizes.values()) < 1:
    raise cli.UserError(f"--mesh={text}: give both axes as positive sizes, e.g. "
                        "--mesh=data:16,model:4")
  return sizes["data"], sizes["model"]


def load_gin_only(gin_files: Sequence[str], bindings: Sequence[str]) -> None:
  gin.clear_config()
  configurables.parse_gin(gin_files, bindings, needs=())  # the slice only: nothing is built


def tpu_devices(target: tpu_slices.Slice) -> list:
  """The slice's chips; without libtpu, one line saying how to install it."""
  if not tpu_slices.has_libtpu():
    raise cli.UserError("the TPU compiler (libtpu) is not installed; install it with "
                        f"{tpu_slices.INSTALL_COMMAND}")
  return target.devices()


def reusable_record(path: str, run: Run, mesh: jax.sharding.Mesh,
                    batch: int) -> dict | None:
  """The report at `path` when it was compiled from the program this step lowers to."""
  if not files.exists(path):
    print(f"{path} does not exist: compiling", flush=True)
    return None
  record = json.loads(files.read_text(path))
  _, lowered = lower_step(run, mesh, batch)
  if record.get("program") != program_fingerprint(lowered, mesh.devices.flat):
    print(f"the step's program is not the one {path} was compiled from: compiling", flush=True)
    return None
  return {**record, "reused": path}
