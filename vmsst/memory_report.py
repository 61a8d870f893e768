r"""Memory per device of a run's compiled train step, with and without remat.

  python -m vmsst.memory_report --gin_file=gin/runs/vmsst_24l_paper.gin \
      --mesh=data:16,model:4 [--batch_size=2048] [--gin.X=Y] \
      [--variants=none,remat,remat_factorized,scan,scan_remat]

Builds the Trainer of the gin run from an abstract state (jax.eval_shape: the
24-layer model is never allocated), compiles the train step ahead of time for
the mesh and prints, per variant, XLA's `compiled.memory_analysis()` of the
per-device program next to the parameter and optimizer-state bytes read off
the abstract state's shardings. By default the mesh is made of forced CPU
devices (`--devices=cpu`), so a pod's layout is checked on a workstation;
`--devices=real` uses the machine's accelerators instead.

Temp bytes (activations kept for the backward pass, gradients, workspace)
scale with the per-device batch, batch_size / data; arguments (state + batch)
and outputs (new state, aliased to the donated arguments) do not. Peak is
arguments + outputs − aliased + temp. CPU compilation of the 24-layer step
takes minutes per unscanned variant (scan compiles one layer per stack).
"""

from vmsst import cli  # pylint: disable=g-bad-import-order

if __name__ == "__main__":  # the command, not an import: before TensorFlow and JAX load
  cli.quiet_startup()

# pylint: disable=wrong-import-position
import dataclasses
import sys
import time
from typing import Any, Sequence

import gin
import jax
import numpy as np
from absl import flags

from vmsst import partitioning
from vmsst import trainer as trainer_lib

# name -> gin bindings applied after the run's own (variants of one run).
VARIANTS = {
    "none": ["NetworkConfig.remat = 'none'", "NetworkConfig.scan_layers = False"],
    "remat": ["NetworkConfig.remat = 'full'", "NetworkConfig.scan_layers = False"],
    "remat_factorized": ["NetworkConfig.remat = 'full'", "NetworkConfig.scan_layers = False",
                         "NetworkConfig.factorized_output = True"],
    "scan": ["NetworkConfig.remat = 'none'", "NetworkConfig.scan_layers = True"],
    "scan_remat": ["NetworkConfig.remat = 'full'", "NetworkConfig.scan_layers = True"],
}
GIB = 2.0 ** 30


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


def bytes_per_device(tree: Any) -> int:
  """Bytes one device holds of a tree of sharded ShapeDtypeStructs (its shard sizes)."""
  return sum(int(np.prod(leaf.sharding.shard_shape(leaf.shape))) * leaf.dtype.itemsize
             for leaf in jax.tree.leaves(tree))


def step_memory(model, optimizer, mesh: jax.sharding.Mesh, *, batch_size: int,
                sequence_length: int) -> StepMemory:
  """Compiles `model`'s train step for `mesh` (abstract state) and measures it.

  Args:
    model: an EmbeddingModel; optimizer: its optax transformation.
    mesh: the ("data", "model") mesh the step is compiled for.
    batch_size: global pairs per step (divisible by the data axis).
    sequence_length: tokens per sentence.
  """
  trainer = trainer_lib.Trainer(model, optimizer, mesh,
                                model.input_shapes(batch_size, sequence_length))
  start = time.perf_counter()
  compiled = trainer.compile_step(jax.random.key(0))
  seconds = time.perf_counter() - start
  analysis = compiled.memory_analysis()
  state = trainer.abstract_state
  return StepMemory(
      params=bytes_per_device(state.params),
      optimizer_state=bytes_per_device(state.opt_state),
      arguments=analysis.argument_size_in_bytes,
      outputs=analysis.output_size_in_bytes,
      aliased=analysis.alias_size_in_bytes,
      temp=analysis.temp_size_in_bytes,
      generated_code=analysis.generated_code_size_in_bytes,
      compile_seconds=seconds)


def markdown_table(rows: dict[str, StepMemory]) -> str:
  """One line per variant, GiB per device."""
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
  """'data:16,model:4' -> (16, 4); anything else is a cli.UserError naming the form."""
  parts = [part.split(":") for part in text.split(",")]
  sizes = dict(p for p in parts if len(p) == 2)
  if (len(sizes) != len(parts) or set(sizes) != set(partitioning.MESH_AXES)
      or not all(v.isdigit() and int(v) > 0 for v in sizes.values())):
    raise cli.UserError(f"--mesh={text}: give both axes' sizes, e.g. --mesh=data:16,model:4.")
  return int(sizes["data"]), int(sizes["model"])


def _bound(name: str) -> Any:
  value = gin.query_parameter(name)
  return value.scoped_configurable_fn() if isinstance(
      value, gin.config.ConfigurableReference) else value


def run_variant(gin_files: Sequence[str], bindings: Sequence[str], variant: str,
                mesh: jax.sharding.Mesh, batch_size: int | None) -> StepMemory:
  """Parses the run with the variant's bindings, then `step_memory`."""
  from vmsst import train  # pylint: disable=g-import-not-at-top (registers train's configurables)
  gin.clear_config()
  train.parse_gin(gin_files, list(bindings) + VARIANTS[variant])
  return step_memory(_bound("train.model"), _bound("train.optimizer"), mesh,
                     batch_size=batch_size or _bound("train.batch_size"),
                     sequence_length=_bound("train.sequence_length"))


_MESH = flags.DEFINE_string("mesh", "data:1,model:1", "Mesh axes sizes, data:N,model:M.")
_BATCH = flags.DEFINE_integer("batch_size", None, "Global batch (default: the run's).")
_VARIANTS = flags.DEFINE_list("variants", list(VARIANTS), f"Any of {list(VARIANTS)}.")
_DEVICES = flags.DEFINE_enum("devices", "cpu", ["cpu", "real"],
                             "cpu: N×M forced host devices; real: the machine's devices.")


def main(argv: Sequence[str]) -> None:
  del argv
  from vmsst import train  # pylint: disable=g-import-not-at-top (defines --gin_file)
  data, model = parse_mesh(_MESH.value)
  for variant in _VARIANTS.value:
    if variant not in VARIANTS:
      raise cli.UserError(f"--variants: no variant {variant}; "
                          f"{cli.did_you_mean(variant, VARIANTS, 'the variants')}")
  if _DEVICES.value == "cpu":  # before the first backend use
    jax.config.update("jax_platforms", "cpu")
    jax.config.update("jax_num_cpu_devices", data * model)
  mesh = partitioning.make_mesh(data, model, devices=jax.devices()[:data * model])
  flags_ = train.FLAGS
  rows = {}
  for variant in _VARIANTS.value:
    rows[variant] = run_variant(flags_.gin_file, flags_.gin_bindings, variant, mesh,
                                _BATCH.value)
    # The whole table after every variant: a slow compile still leaves results.
    print(f"Memory per device (GiB), mesh data:{data},model:{model}, "
          f"batch {_BATCH.value or _bound('train.batch_size')}:", flush=True)
    print(markdown_table(rows), flush=True)


if __name__ == "__main__":
  from vmsst import train as _train  # pylint: disable=g-import-not-at-top
  cli.run(main, argv=_train.rewrite_gin_args(sys.argv))
