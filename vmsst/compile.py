r"""Compiles a run for a TPU slice, here: memory, FLOPs.

  python -m vmsst.compile --gin_file=gin/runs/vmsst_24l_paper.gin \
      [--topology=v4-128] [--num_slices=N] [--batch_size=N] [--find_max_batch] \
      [--gin.X=Y] [--output=REPORT.json]

The TPU compiler (libtpu: `pip install -e '.[tpu]'`) runs on this CPU
machine. The step compiled is the one `train` would run on the slice: the
same `Trainer` (shardings, donation, `train.skip_nonfinite_steps`), the run
file's mesh (`make_mesh.*` over the slice's chips, ordered by host as
`train` orders them), its batch and length; state and batch are abstract, so
nothing is allocated and neither data nor vocabulary nor `init_params` is
read. `--topology` defaults to the run file's `target_slice` binding.

Printed per chip: parameters, optimizer state, arguments, outputs,
temporaries and peak against the chip's HBM; FLOPs per step (the model's:
the step as written, layers unrolled and nothing rematerialised, counted by
XLA's cost analysis before any optimisation, divided over the chips; and the
compiler's where its count is complete: it counts a `while` body once, so not
under `scan_layers`); the step time at the chip's bf16 peak, a lower bound
never measured; and the days 100k steps would take at 40% of that peak, an
estimate.

  --find_max_batch   binary-searches the largest global batch (a multiple of
                     the data axis) whose step fits.
  --topology=cpu --mesh=data:16,model:4 [--variants=none,remat,scan,...]
                     XLA:CPU's memory analysis on forced host devices (the
                     remat / scan variants).
  --topology=local   the devices of this machine.
  --topology=smallest  the smallest slice the run file names as fitting its
                     batch (`target_slice.smallest_accelerator_type`).
  --print_slice      prints the run file's slice (`v4-64 1`) and exits: what
                     `launch/tpu.sh` creates.
  --reuse=RECORD.json  lowers the step (seconds) and, when its program is the
                     one RECORD was compiled from (`program`: a fingerprint of
                     the program, the chips, JAX and libtpu), reports RECORD
                     instead of compiling again (minutes); otherwise compiles.

Exit status: 0 the step fits every chip; 3 it does not (the compiler's
out-of-memory message is printed, as the pod would fail); 2 a usage error.
"""

import sys

from absl import flags

from vmsst.base import cli  # pylint: disable=g-bad-import-order
from vmsst.base import path_checks  # pylint: disable=g-bad-import-order
from vmsst.base import console  # pylint: disable=g-bad-import-order
from vmsst.base import gin_utils  # pylint: disable=g-bad-import-order
from vmsst.training import slices as tpu_slices  # pylint: disable=g-bad-import-order
from vmsst.compiler import variants as variants_lib  # pylint: disable=g-bad-import-order

GIN_FLAGS = gin_utils.define_flags()
_TOPOLOGY = flags.DEFINE_string(
    "topology", None, "A TPU slice (v4-128, v5e-256, v5p-128, v6e-64, or v4:4x4x2); 'cpu' for "
    "forced host devices (with --mesh), 'local' for this machine's devices, 'smallest' for the "
    "run file's target_slice.smallest_accelerator_type. Default: the run file's "
    "target_slice.accelerator_type.")
_NUM_SLICES = flags.DEFINE_integer("num_slices", None, "Slices joined over DCN (default: "
                                   "the run file's target_slice.num_slices, else 1).")
_BATCH = flags.DEFINE_integer("batch_size", None, "Global batch (default: the run's).")
_FIND_MAX = flags.DEFINE_bool("find_max_batch", False,
                              "Binary-search the largest global batch that fits.")
_MESH = flags.DEFINE_string("mesh", None, "With --topology=cpu: data:N,model:M.")
_VARIANTS = flags.DEFINE_list("variants", [],
                              f"With --topology=cpu: any of {list(variants_lib.VARIANTS)}.")
_OUTPUT = flags.DEFINE_string("output", None, "Also write the report as JSON to this file.")
_PRINT_SLICE = flags.DEFINE_bool("print_slice", False,
                                 "Print the run file's target slice and exit.")
_REUSE = flags.DEFINE_string("reuse", None, "A report (JSON) of this run: when the step's "
                             "program is the one it was compiled from, report it instead "
                             "of compiling again.")
_HOST = ("cpu", "local")  # the --topology values that are not a TPU slice


def check_flags() -> None:
  """The mistakes the flags alone show, found before JAX and libtpu load (seconds).

  Run by the command before its imports (`cli.check_early`) and again by
  `main`; what needs the run file (its slice, its mesh, a batch that divides
  over it) is checked once it is parsed.

  Raises:
    cli.UserError: naming the flag and the fix.
  """
  if not GIN_FLAGS.gin_file.value:
    raise cli.UserError("give the run to compile: --gin_file=gin/runs/<run>.gin")
  if _OUTPUT.value:  # before minutes of compiling
    path_checks.check_output_path("output", _OUTPUT.value)
  if _NUM_SLICES.value is not None and _NUM_SLICES.value < 1:
    raise cli.UserError(f"--num_slices={_NUM_SLICES.value}: give at least 1")
  if _TOPOLOGY.value not in (None, tpu_slices.SMALLEST, *_HOST):
    try:
      tpu_slices.parse(_TOPOLOGY.value, _NUM_SLICES.value or 1)
    except ValueError as e:
      raise cli.UserError(f"--topology: {e}") from e
  if (_MESH.value or _VARIANTS.value) and _TOPOLOGY.value not in _HOST:
    raise cli.UserError("--mesh and --variants go with --topology=cpu or local; on a TPU "
                        "slice the run file's make_mesh bindings decide the mesh")
  for variant in _VARIANTS.value:
    if variant not in variants_lib.VARIANTS:
      raise cli.UserError(f"--variants: no variant {variant}; "
                          f"{cli.did_you_mean(variant, variants_lib.VARIANTS, 'the variants')}")


if __name__ == "__main__":  # the command, not an import: before JAX and libtpu load
  console.quiet_startup()
  tpu_slices.quiet_libtpu()
  cli.check_early(lambda: (gin_utils.check_gin_files(sys.argv), check_flags()))

# pylint: disable=wrong-import-position
import dataclasses
import functools
import json
from typing import Sequence

import jax

from vmsst.base import files
from vmsst.compiler import step as step_lib
from vmsst.model import partitioning
from vmsst.training import configurables


def run_slice(gin_files: Sequence[str], bindings: Sequence[str]) -> tpu_slices.Slice:
  """--topology / --num_slices, else the run file's target_slice."""
  step_lib.load_gin_only(gin_files, bindings)
  smallest = _TOPOLOGY.value == tpu_slices.SMALLEST
  named = tpu_slices.target_slice(smallest=smallest)  # the run file's binding (gin supplies it)
  if smallest and named is None:
    raise cli.UserError(f"{list(gin_files)} names no smallest slice "
                        "(target_slice.smallest_accelerator_type); pass --topology=v4-16 or "
                        "similar")
  if _TOPOLOGY.value is None and named is None:
    raise cli.UserError(f"{list(gin_files)} names no slice (target_slice.accelerator_type); "
                        "pass --topology=v4-128 or similar")
  try:
    if _TOPOLOGY.value is None or smallest:
      return dataclasses.replace(named, num_slices=_NUM_SLICES.value or named.num_slices)
    return tpu_slices.parse(_TOPOLOGY.value, _NUM_SLICES.value or 1)
  except ValueError as e:
    raise cli.UserError(f"--topology: {e}") from e


def report_slice(gin_files: Sequence[str], bindings: Sequence[str]) -> int:
  """The TPU path: one compile (or the max-batch search) and the model's FLOPs."""
  target = run_slice(gin_files, bindings)
  devices = step_lib.tpu_devices(target)
  run = step_lib.load_run(gin_files, bindings)
  mesh = step_lib.target_mesh(devices)
  batch = _BATCH.value or run.batch_size
  step_lib.check_batch(batch, mesh, run.microbatches)
  if _REUSE.value and not _FIND_MAX.value:
    record = step_lib.reusable_record(_REUSE.value, run, mesh, batch)
    if record is not None:
      return report_record(record)
  if _FIND_MAX.value:
    batch, tried = step_lib.find_max_batch(run, mesh, batch, compile_fn=functools.partial(
        step_lib.compile_step, hbm_bytes=target.hbm_bytes))
    print(f"largest global batch that fits {target.name}: {batch}", flush=True)
    if not batch:
      compiled = tried[min(tried)]
      batch = min(tried)
    else:
      compiled = tried[batch]
  else:
    compiled = step_lib.compile_step(run, mesh, batch, hbm_bytes=target.hbm_bytes)
  flops_run = step_lib.load_run(gin_files, list(bindings) + variants_lib.MODEL_FLOPS_BINDINGS)
  report = step_lib.Report(
      run_file=",".join(gin_files), slice_name=target.name, chips=target.chips,
      mesh=dict(mesh.shape), batch_size=batch, compiled=compiled,
      model_flops_per_chip=step_lib.model_flops(flops_run, batch) / target.chips,
      hbm_bytes=target.hbm_bytes, bf16_flops=target.bf16_flops)
  if _OUTPUT.value:  # first: minutes of compiling are kept whatever happens to stdout
    files.write_text(_OUTPUT.value, json.dumps(report.as_dict(), indent=1))
  print(step_lib.describe(report), flush=True)
  if not compiled.fits:
    print(f"error: the step does not fit {target.name}: raise the model axis, add remat/scan "
          "(gin/models/memory/), lower the batch, or take a bigger slice", file=sys.stderr)
    return step_lib.DOES_NOT_FIT_EXIT_CODE
  return 0


def report_record(record: dict) -> int:
  """Prints (and with --output writes) a reused report; its exit status."""
  if _OUTPUT.value:
    files.write_text(_OUTPUT.value, json.dumps(record, indent=1))
  gib = step_lib.GIB
  verdict = (f"peak {record['peak_bytes_per_chip'] / gib:.1f} of "
             f"{record['hbm_bytes_per_chip'] / gib:.0f} GiB per chip" if record["fits"]
             else f"does not fit: {record['oom_message']}")
  print(f"the step's program is the one {record['reused']} was compiled from: its report "
        f"stands ({verdict})", flush=True)
  return 0 if record["fits"] else step_lib.DOES_NOT_FIT_EXIT_CODE


def report_host_variants(gin_files: Sequence[str], bindings: Sequence[str]) -> int:
  """--topology=cpu|local: the memory table of each variant (XLA:CPU or this machine)."""
  data, model = step_lib.parse_mesh(_MESH.value or "data:1,model:1")
  if _TOPOLOGY.value == "cpu":  # before the first backend use
    jax.config.update("jax_platforms", "cpu")
    jax.config.update("jax_num_cpu_devices", data * model)
  devices = jax.devices()
  if len(devices) < data * model:
    raise cli.UserError(f"--mesh={_MESH.value} needs {data * model} devices; this machine "
                        f"shows {len(devices)}")
  mesh = partitioning.make_mesh(data, model, devices=devices[:data * model])
  rows = {}
  for variant in _VARIANTS.value or ["as_run"]:
    run = step_lib.load_run(gin_files, list(bindings) + variants_lib.VARIANTS.get(variant, []))
    batch = _BATCH.value or run.batch_size
    step_lib.check_batch(batch, mesh, run.microbatches)
    compiled = step_lib.compile_step(run, mesh, batch)
    if not compiled.fits:
      print(compiled.oom_message, file=sys.stderr)
      return step_lib.DOES_NOT_FIT_EXIT_CODE
    rows[variant] = compiled.memory
    # The whole table after every variant: a slow compile still leaves results.
    print(f"Memory per device (GiB), mesh data:{data},model:{model}, batch {batch}:",
          flush=True)
    print(step_lib.markdown_table(rows), flush=True)
  return 0


def main(argv: Sequence[str]) -> None:
  del argv
  check_flags()  # again: the command checked them before its imports, an importer has not
  gin_files, bindings = GIN_FLAGS.gin_file.value, GIN_FLAGS.gin_bindings.value
  if _PRINT_SLICE.value:
    target = run_slice(gin_files, bindings)
    print(target.cloud_accelerator_type, target.num_slices)
    return
  if _TOPOLOGY.value in _HOST:
    sys.exit(report_host_variants(gin_files, bindings))
  sys.exit(report_slice(gin_files, bindings))


if __name__ == "__main__":
  configurables.register_without_data()  # a step compiles from shapes: no seqio, no TensorFlow
  cli.run(main, argv=gin_utils.rewrite_gin_args(sys.argv))
