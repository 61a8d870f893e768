"""vmsst.compile: the train step compiled for a mesh, its memory per device and FLOPs.

On forced CPU devices (XLA:CPU, the remat / scan variants) and, in the `tpu`
tier, by the TPU compiler for a slice's compile-only chips (libtpu from PyPI).
"""

import dataclasses
import json
import subprocess
import sys

import jax
import optax
from absl import flags
import pytest

import vmsst_testing
from vmsst_testing import TINY
from vmsst.base import cli
from vmsst.training import configurables
from vmsst.compiler import step as compile_lib
from vmsst.training import slices as tpu_slices
from vmsst.compiler import variants
from vmsst.model import partitioning
from vmsst.training import trainer as trainer_lib
from vmsst.objectives import Distillation, VMSST

# Registering imports TensorFlow, whose import starts a process (h5py asks `uname -p`): done
# once here, while the module loads, so the in-process command cases stay in the unit tier.
configurables.register()

# Small but layer-dominated: 4-layer stacks over 32 tokens, a small vocabulary,
# so the kept activations (not the logits) decide the temp memory.
SMALL = dataclasses.replace(TINY, vocab_size=256, emb_dim=64, num_heads=2, head_dim=32,
                            mlp_dim=256, num_encoder_layers=4, num_language_encoder_layers=4,
                            num_decoder_layers=4, max_length=32)


def _mesh(data, model):
  return partitioning.make_mesh(data, model, devices=jax.devices()[:data * model])


def _measure(cfg):
  return compile_lib.step_memory(VMSST(cfg), optax.adam(1e-3), _mesh(2, 1), batch_size=32,
                                   sequence_length=32)


@pytest.mark.slow
def test_remat_reduces_temp_memory_and_not_the_state():
  """Measured on scanned layers, where the backward loop recomputes one layer per step.

  (On this 4-layer config XLA:CPU reports identical temp bytes for unscanned
  `none` and `remat`: its schedule recomputes unscanned layers early. At 24
  layers unscanned remat does save: 66.8 -> 40.3 GiB, see the report.)
  """
  scanned = dataclasses.replace(SMALL, scan_layers=True)
  plain = _measure(scanned)
  remat = _measure(dataclasses.replace(scanned, remat="full"))
  print(f"temp bytes per device: scan {plain.temp}, scan + remat {remat.temp}")
  assert remat.temp < 0.7 * plain.temp
  assert (remat.params, remat.optimizer_state) == (plain.params, plain.optimizer_state)
  assert plain.peak == plain.arguments + plain.outputs - plain.aliased + plain.temp
  table = compile_lib.markdown_table({"scan": plain, "scan_remat": remat})
  assert table.splitlines()[2].startswith("| scan | ")


def test_factorized_projection_saves_its_parameter_bytes_per_device():
  """On data 2 × model 2 the vocabulary axis is split in two, the bottleneck replicated.

  Unfactorized: a 3d × V kernel, V/2 columns per device. Factorized: d × V
  (V/2 per device) plus a replicated 3d × d bottleneck. Saved float32 bytes
  per device: 4 (3dV/2 − dV/2 − 3d²) = 4 (dV − 3d²).
  """
  d, v = SMALL.emb_dim, SMALL.vocab_size
  state_bytes = lambda cfg: compile_lib.bytes_per_device(trainer_lib.Trainer(
      VMSST(cfg), optax.sgd(0.1), _mesh(2, 2), VMSST(cfg).input_shapes(4, 8)).abstract_state.params)
  full = state_bytes(SMALL)
  factorized = state_bytes(dataclasses.replace(SMALL, factorized_output=True))
  assert full - factorized == 4 * (d * v - 3 * d * d)


def test_mesh_flag_names_both_axes():
  assert compile_lib.parse_mesh("data:16,model:4") == (16, 4)
  assert compile_lib.parse_mesh("model:2,data:1") == (1, 2)
  with pytest.raises(cli.UserError, match="--mesh"):
    compile_lib.parse_mesh("data:8")
  with pytest.raises(cli.UserError, match="--mesh"):
    compile_lib.parse_mesh("data2")


def test_max_batch_search_finds_the_largest_fitting_multiple_of_the_data_axis():
  """The search alone, over a compile stand-in that fits up to a known batch."""
  mesh = _mesh(4, 1)
  for limit, start in ((100, 32), (100, 400), (4, 64), (3, 8), (4096, 4)):
    fit = lambda run, mesh, batch, limit=limit: compile_lib.Compiled(
        memory=compile_lib.StepMemory(0, 0, 0, 0, 0, 0, 0, 0.0) if batch <= limit else None,
        oom_message=None if batch <= limit else "RESOURCE_EXHAUSTED")
    found, tried = compile_lib.find_max_batch(_STAND_IN_RUN, mesh, start, compile_fn=fit)
    assert found == limit // 4 * 4, (limit, start)
    assert len(tried) <= 2 * (max(start, limit) // 4).bit_length() + 2  # logarithmic
  # Microbatches divide over the data axis too: 2 of them, multiples of 8.
  found, _ = compile_lib.find_max_batch(dataclasses.replace(_STAND_IN_RUN, microbatches=2), mesh,
                                        32, compile_fn=fit)
  assert found == 4096 // 8 * 8


_STAND_IN_RUN = compile_lib.Run(model=None, optimizer=None, batch_size=0, sequence_length=0,
                                skip_nonfinite=False)  # what find_max_batch reads of a run


# --- The TPU compiler (the `tpu` tier) ---------------------------------------

def needs_libtpu():
  if not tpu_slices.has_libtpu():
    pytest.skip(f"libtpu is not installed: {tpu_slices.INSTALL_COMMAND}")


RUN = "--gin_file=gin/runs/vmsst_cpu.gin"


def compile_command(*args: str) -> subprocess.CompletedProcess:
  """`python -m vmsst.compile ARGS` as a user runs it."""
  return subprocess.run([sys.executable, "-m", "vmsst.compile", *args], cwd=vmsst_testing.ROOT,
                        capture_output=True, text=True, timeout=900, check=False)


def tiny_run(bindings=()) -> compile_lib.Run:
  return compile_lib.load_run(["gin/runs/contrastive_cpu.gin"], list(bindings))


def test_a_run_reads_train_microbatches_and_refuses_them_for_in_batch_negatives():
  run = compile_lib.load_run(["gin/runs/vmsst_cpu.gin"], ["train.microbatches = 2"])
  assert run.microbatches == 2 and tiny_run().microbatches == 1
  with pytest.raises(cli.UserError, match="train.microbatches = 2.*gradient_cache_chunk"):
    tiny_run(["train.microbatches = 2"])
  with pytest.raises(cli.UserError, match="--batch_size=20 in train.microbatches = 4"):
    compile_lib.check_batch(20, _mesh(2, 1), microbatches=4)


@pytest.mark.slow  # compiles a step twice
def test_the_compiled_step_is_the_accumulating_one():
  """lower_step builds the Trainer with run.microbatches: the tokens as 2 microbatches of 4."""
  text = lambda n: compile_lib.lower_step(compile_lib.Run(
      Distillation(TINY, teacher_dim=5), optax.sgd(0.1), 8, 12, False, microbatches=n),
      _mesh(2, 1), 8)[1].as_text()
  assert "tensor<2x4x12xi32>" in text(2) and "tensor<2x4x12xi32>" not in text(1)


@pytest.mark.tpu
def test_a_run_compiles_for_a_v4_slice_with_memory_and_flops_per_chip(tmp_path, compile_here):
  """The command on v4-8 (4 chips, one host): exit 0, every per-chip figure, and the
  model's FLOP count agreeing with the compiler's where that one is complete. Then,
  in this process through the command's `main`, `--reuse` of its record: the same
  program (lowered by another process) takes the record, another batch compiles."""
  needs_libtpu()
  out = tmp_path / "report.json"
  done = compile_command(RUN, "--topology=v4-8", f"--output={out}")
  assert done.returncode == 0, done.stderr[-2000:]
  report = json.loads(out.read_text())
  memory = report["memory_per_chip"]
  assert (report["slice"], report["chips"], report["mesh"]) == ("v4-8", 4, {"data": 4, "model": 1})
  assert report["fits"] and report["hbm_bytes_per_chip"] == 32 * 2**30
  assert 0 < memory["params"] <= memory["arguments"]
  assert report["peak_bytes_per_chip"] == (memory["arguments"] + memory["outputs"]
                                           - memory["aliased"] + memory["temp"])
  assert report["compiler_flops_complete"]
  assert report["model_flops_per_chip"] == pytest.approx(report["compiler_flops_per_chip"],
                                                         rel=0.05)
  assert report["lower_bound_step_seconds"] == pytest.approx(
      report["model_flops_per_chip"] / 275e12)
  for words in ("lower bound", "estimate", "HBM", "FLOPs per step"):
    assert words in done.stdout
  # The same program again: the record stands, nothing is compiled.
  status, stdout, stderr = compile_here(RUN, "--topology=v4-8", f"--reuse={out}",
                                        f"--output={tmp_path / 'again.json'}")
  assert status == 0, stderr[-2000:]
  assert "its report stands" in stdout
  assert json.loads((tmp_path / "again.json").read_text()) == {**report, "reused": str(out)}
  # Another batch is another program: compiled, with its own fingerprint.
  status, stdout, stderr = compile_here(RUN, "--topology=v4-8", "--batch_size=16",
                                        f"--reuse={out}", f"--output={tmp_path / 'other.json'}")
  assert status == 0, stderr[-2000:]
  assert "compiling" in stdout and "its report stands" not in stdout
  other = json.loads((tmp_path / "other.json").read_text())
  assert other["batch_size"] == 16 and other["fits"] and other["program"] != report["program"]


def test_the_program_fingerprint_follows_the_step_not_the_process():
  """Two lowerings of one step give one fingerprint; another batch size another.

  On TINY: a fingerprint is of any lowered step, and SMALL's four layers took ~3x the
  tracing."""
  run = compile_lib.Run(VMSST(TINY), optax.adam(1e-3), 16, 12, False)
  mesh = _mesh(2, 1)
  first = compile_lib.program_fingerprint(compile_lib.lower_step(run, mesh, 16)[1],
                                          mesh.devices.flat)
  second = compile_lib.program_fingerprint(compile_lib.lower_step(run, mesh, 16)[1],
                                           mesh.devices.flat)
  wider = compile_lib.program_fingerprint(compile_lib.lower_step(run, mesh, 32)[1],
                                          mesh.devices.flat)
  assert first == second != wider


@pytest.mark.tpu
def test_multi_host_v5e_and_multi_slice_v4_meshes_span_every_chip():
  """v5e-16 is 4 hosts of 4 chips; two v4-8 slices over DCN are 8 chips, 2 slices."""
  needs_libtpu()
  run = tiny_run()
  for target, chips, hosts, slices in ((tpu_slices.parse("v5e-16"), 16, 4, 1),
                                       (tpu_slices.parse("v4-8", num_slices=2), 8, 2, 2)):
    devices = target.devices()
    assert len(devices) == chips == target.chips
    assert len({d.process_index for d in devices}) == hosts
    assert len({getattr(d, "slice_index", 0) for d in devices}) == slices
    mesh = compile_lib.target_mesh(devices)
    assert dict(mesh.shape) == {"data": chips, "model": 1}
    compiled = compile_lib.compile_step(run, mesh, run.batch_size)
    assert compiled.fits and compiled.memory.peak < target.hbm_bytes


@pytest.mark.tpu
def test_under_scan_the_compilers_flops_are_incomplete_and_the_models_are_not():
  """XLA counts a while loop's body once: the scanned step's own count is one layer's,
  so the report's FLOPs come from the unrolled step, equal with or without scan."""
  needs_libtpu()
  mesh = compile_lib.target_mesh(tpu_slices.parse("v4-8").devices())
  layers = ["NetworkConfig.num_encoder_layers = 4"]
  scanned = compile_lib.compile_step(tiny_run(layers + variants.VARIANTS["scan"]), mesh, 32)
  unrolled = compile_lib.compile_step(tiny_run(layers + variants.VARIANTS["none"]), mesh, 32)
  assert unrolled.flops_complete and not scanned.flops_complete
  assert scanned.compiler_flops < 0.6 * unrolled.compiler_flops
  model = compile_lib.model_flops(tiny_run(layers + variants.MODEL_FLOPS_BINDINGS), 32) / 4
  # At this size the compiler's own additions (collectives, layout) are ~10%;
  # at the paper's sizes the two agree within 1-2% (docs/results/tpu_compile/).
  assert model == pytest.approx(unrolled.compiler_flops, rel=0.15)


@pytest.mark.tpu
def test_a_step_that_does_not_fit_exits_3_with_the_compilers_message(compile_here):
  """In this process (`compile_here`): a child would spend ~7 s CPU importing JAX first."""
  needs_libtpu()
  done = compile_here("--gin_file=gin/runs/vmsst_cpu.gin", "--topology=v5e-1",
                      "--batch_size=262144")
  assert done.returncode == compile_lib.DOES_NOT_FIT_EXIT_CODE, done.stderr[-2000:]
  assert "memory" in done.stdout.lower() and "v5e-1" in done.stderr


def _one_error_line(status: int, stdout: str, stderr: str) -> str:
  """Exit 2, no traceback, and exactly one `error:` line, which is returned."""
  del stdout
  assert status == 2 and "Traceback" not in stderr, (status, stderr[-2000:])
  errors = [line for line in stderr.splitlines() if line.startswith("error:")]
  assert len(errors) == 1, stderr[-2000:]
  return errors[0]


@pytest.fixture(scope="module")
def compile_module():
  """vmsst.compile imported here; its flags removed again after this module's tests.

  The command defines its flags at import: left defined, another test file in
  this process that defines a flag of the same name (--output) would fail.
  """
  from vmsst import compile as command  # pylint: disable=import-outside-toplevel
  yield command
  defined_here = lambda name: flags.FLAGS.find_module_defining_flag(name) == command.__name__
  for name in [n for n in flags.FLAGS if defined_here(n)]:
    delattr(flags.FLAGS, name)
  sys.modules.pop(command.__name__)


@pytest.fixture
def compile_here(compile_module, monkeypatch, capfd):
  """`compile_here(*args)`: `python -m vmsst.compile ARGS` past its imports, in this process
  (`vmsst_testing.command_here`): (exit status, stdout, stderr)."""
  monkeypatch.chdir(vmsst_testing.ROOT)
  return lambda *args: vmsst_testing.command_here(compile_module.main, "vmsst.compile", args,
                                                  capfd)


@pytest.mark.parametrize("args, flag", [
    (["--topology=v4-6"], "--topology"), (["--topology=v9-8"], "--topology"),
    (["--topology=v4-8", "--mesh=data:2,model:2"], "--mesh"),
    (["--topology=v4-8", "--num_slices=0"], "--num_slices"),
    (["--topology=cpu", "--variants=nonee"], "--variants")])
def test_flag_mistakes_are_one_error_line_naming_the_flag(compile_here, args, flag):
  """Found from the flags alone: the command finds them before JAX and libtpu load."""
  assert flag in _one_error_line(*compile_here(RUN, *args))


def test_print_slice_prints_the_slice_the_run_file_names(compile_here):
  """What launch/tpu.sh reads: `v4-64 1`, from the run file's target_slice alone."""
  done = compile_here("--gin_file=gin/runs/bitranslation_6l_paper.gin", "--print_slice")
  assert done.returncode == 0, done.stderr[-2000:]
  assert done.stdout.split() == ["v4-64", "1"]


def test_the_command_imports_neither_seqio_nor_tensorflow():
  """launch/tpu.sh's `--print_slice`, end to end: a step compiles from shapes, so the task
  families are their stand-ins (configurables.register_without_data), not seqio's tasks."""
  done = subprocess.run([sys.executable, "-X", "importtime", "-m", "vmsst.compile",
                         "--gin_file=gin/runs/bitranslation_6l_paper.gin", "--print_slice"],
                        cwd=vmsst_testing.ROOT, capture_output=True, text=True, timeout=300,
                        check=False)
  assert done.returncode == 0 and done.stdout.split() == ["v4-64", "1"], done.stderr[-2000:]
  imported = {line.rsplit("|", 1)[-1].strip() for line in done.stderr.splitlines()
              if line.startswith("import time:")}
  assert "vmsst_tasks.registry_stand_ins" in imported
  assert not imported & {"seqio", "tensorflow", "vmsst_tasks.registry"}


def test_registering_without_data_after_registering_is_refused():
  """A process that registered the real task families (a test worker, a training run)
  keeps them: the stand-ins are only for a compile process's first registration."""
  configurables.register()
  with pytest.raises(RuntimeError, match="already registered"):
    configurables.register_without_data()


def test_a_run_naming_no_slice_without_topology_is_one_error_line(compile_here):
  assert "target_slice" in _one_error_line(*compile_here(RUN))
  assert "--gin_file" in _one_error_line(*compile_here("--topology=v4-8"))


def test_the_smallest_slice_of_a_run_naming_none_is_one_error_line(compile_here):
  assert "target_slice.smallest_accelerator_type" in _one_error_line(
      *compile_here(RUN, "--topology=smallest"))


@pytest.mark.tpu
def test_a_batch_that_does_not_divide_over_the_slice_names_the_flag(compile_here):
  needs_libtpu()
  assert "--batch_size" in _one_error_line(*compile_here(
      RUN, "--topology=v4-8", "--batch_size=30"))


def test_the_command_answers_a_flag_mistake_before_importing_jax():
  """The whole command, end to end: one error line and exit 2, JAX never imported
  (`-X importtime` lists every module the process imported)."""
  done = subprocess.run([sys.executable, "-X", "importtime", "-m", "vmsst.compile",
                         RUN, "--topology=v4-6"],
                        cwd=vmsst_testing.ROOT, capture_output=True, text=True, timeout=300,
                        check=False)
  assert "--topology" in _one_error_line(done.returncode, done.stdout, done.stderr)
  imported = [line.rsplit("|", 1)[-1].strip() for line in done.stderr.splitlines()
              if line.startswith("import time:")]
  assert "absl.flags" in imported and "jax" not in imported and "libtpu" not in imported


@pytest.mark.tpu
@pytest.mark.tpu_all_runs
@pytest.mark.slow
def test_find_max_batch_stops_where_the_compiler_runs_out_of_memory():
  """A tiny network with mT5's 250k-piece vocabulary on one v5e chip (16 GiB): the
  logits decide, and the largest batch fits while one more row does not."""
  needs_libtpu()
  run = tiny_run(["VOCAB_SIZE = 250112"])
  mesh = compile_lib.target_mesh(tpu_slices.parse("v5e-1").devices())
  found, tried = compile_lib.find_max_batch(run, mesh, 32)
  assert found > 0 and tried[found].fits and not tried[found + 1].fits
  assert tried[found].memory.peak <= 16 * 2**30


def test_a_compiled_step_whose_peak_exceeds_the_chips_hbm_does_not_fit():
  """The TPU compiler let a step through whose own memory analysis exceeded the chip."""
  memory = compile_lib.StepMemory(params=1, optimizer_state=1, arguments=10 * 2**30,
                                  outputs=2**30, aliased=2**30, temp=30 * 2**30,
                                  generated_code=0, compile_seconds=1.0)
  assert compile_lib.over_hbm(memory, 40 * 2**30) is None
  assert compile_lib.over_hbm(memory, None) is None
  why = compile_lib.over_hbm(memory, 32 * 2**30)
  assert "40.00 GiB per chip" in why and "32 GiB of HBM" in why
  compiled = compile_lib.Compiled(memory=memory, oom_message=why)
  assert not compiled.fits and compile_lib.Compiled(memory=memory).fits
  report = compile_lib.Report(run_file="r.gin", slice_name="v4-8", chips=4, mesh={"data": 4},
                              batch_size=8, compiled=compiled, model_flops_per_chip=1e12,
                              hbm_bytes=32 * 2**30, bf16_flops=275e12)
  assert not report.as_dict()["fits"] and report.as_dict()["peak_bytes_per_chip"] == 40 * 2**30
  text = compile_lib.describe(report)
  assert "peak 40.00 GiB of 32 GiB HBM" in text and "does not fit 32 GiB of HBM: compiled" in text
