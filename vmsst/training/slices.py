"""TPU slices by name: their chips as JAX devices on any machine, HBM and bf16 peak.

Why this exists: the TPU compiler ships on PyPI (libtpu, `pip install -e
'.[tpu]'`) and compiles for a slice it is not running on.
`jax.experimental.topologies.get_topology_desc` turns a topology into that
slice's chips as JAX devices, so `vmsst.compile` builds the run's mesh over
them and compiles the exact train step on a workstation, before a pod is
booked (MaxText's `train_compile.py` does the same).

Names are Cloud TPU accelerator types: `v4-128` and `v5p-128` count
TensorCores (two per chip: 64 chips), `v5e-256` (Cloud: `v5litepod-256`) and
`v6e-64` count chips. An explicit topology (`v4:4x4x2`) is accepted too.

A run file names the slice it is written for with one binding,
`target_slice.accelerator_type = 'v4-64'` (and `target_slice.num_slices` for
several slices over DCN); `vmsst.compile` and `launch/tpu.sh` read it.
"""

import dataclasses
import math
import os
import re

from vmsst.base.gin_utils import gin

GIB = 2.0 ** 30


@dataclasses.dataclass(frozen=True)
class Generation:
  """One TPU generation's figures (Cloud TPU's published per-chip numbers).

  Attributes:
    name: "v4", "v5e", "v5p" or "v6e".
    hbm_gib: HBM per chip.
    bf16_tflops: peak bf16 matrix throughput per chip, TFLOP/s.
    cores_in_name: TensorCores per chip counted by the accelerator type's
      number (v4-8 is 4 chips; v5e-8 is 8).
    torus_dims: 3 for the 3-D torus generations, 2 for the 2-D ones.
    chip_config: libtpu's chip configuration (megacore: one device per chip).
    cloud_prefix: the prefix Cloud's accelerator types use.
  """

  name: str
  hbm_gib: float
  bf16_tflops: float
  cores_in_name: int
  torus_dims: int
  chip_config: str
  cloud_prefix: str


GENERATIONS = {
    "v4": Generation("v4", 32, 275, 2, 3, "megacore", "v4"),
    "v5e": Generation("v5e", 16, 197, 1, 2, "default", "v5litepod"),
    "v5p": Generation("v5p", 95, 459, 2, 3, "megacore", "v5p"),
    "v6e": Generation("v6e", 32, 918, 1, 2, "default", "v6e"),
}
_ALIASES = {"v5litepod": "v5e", "v5lite": "v5e"}
CHIPS_PER_HOST = 4  # every multi-host slice of these generations: 2x2 chips per VM


@dataclasses.dataclass(frozen=True)
class Slice:
  """A TPU slice (or `num_slices` identical slices joined over DCN).

  Attributes:
    generation: its Generation.
    shape: chips along each torus axis, e.g. (4, 4, 4).
    num_slices: slices joined over the data-centre network.
  """

  generation: Generation
  shape: tuple[int, ...]
  num_slices: int = 1

  @property
  def chips_per_slice(self) -> int:
    return math.prod(self.shape)

  @property
  def chips(self) -> int:
    return self.chips_per_slice * self.num_slices

  @property
  def name(self) -> str:
    """The accelerator type of one slice, vmsst's spelling (v5e, not v5litepod)."""
    count = self.chips_per_slice * self.generation.cores_in_name
    slices = f" x {self.num_slices} slices" if self.num_slices > 1 else ""
    return f"{self.generation.name}-{count}{slices}"

  @property
  def cloud_accelerator_type(self) -> str:
    """What `gcloud compute tpus tpu-vm create --accelerator-type` takes for one slice."""
    return (f"{self.generation.cloud_prefix}-"
            f"{self.chips_per_slice * self.generation.cores_in_name}")

  @property
  def topology_name(self) -> str:
    return f"{self.generation.name}:{'x'.join(map(str, self.shape))}"

  @property
  def hbm_bytes(self) -> int:
    return int(self.generation.hbm_gib * GIB)

  @property
  def bf16_flops(self) -> float:
    """Peak bf16 FLOP/s of one chip."""
    return self.generation.bf16_tflops * 1e12

  def chips_per_host_bounds(self) -> tuple[int, int, int]:
    """A host's chips along the torus axes: 2x2 in a pod, the whole slice when it is one VM."""
    if self.chips_per_slice <= 2 * CHIPS_PER_HOST and (
        self.generation.torus_dims == 2 or self.chips_per_slice <= CHIPS_PER_HOST):
      return tuple(self.shape) + (1,) * (3 - len(self.shape))  # v4-8, v5e-8, v6e-8: one VM
    return (2, 2, 1)

  def devices(self) -> list:
    """The slice's chips as JAX devices (compile-only), ordered as `train` orders them.

    Needs libtpu (`pip install -e '.[tpu]'`); nothing runs on them.
    """
    from jax.experimental import topologies  # pylint: disable=g-import-not-at-top
    description = topologies.get_topology_desc(
        platform="tpu", topology_name=self.topology_name,
        chip_config_name=self.generation.chip_config,
        chips_per_host_bounds=self.chips_per_host_bounds(), num_slices=self.num_slices)
    return sorted(description.devices, key=lambda d: (d.process_index, d.id))


def torus_shape(chips: int, dims: int) -> tuple[int, ...]:
  """Cloud TPU's slice shape for `chips` chips: v4-128 (64 chips) -> (4, 4, 4).

  Starts from one chip (2-D) or a 2x2x1 host (3-D) and doubles the smallest
  axis (the last of equals): 8 -> 2x2x2, 16 -> 2x2x4, 32 -> 2x4x4; 2-D:
  4 -> 2x2, 8 -> 2x4, 16 -> 4x4, 256 -> 16x16.
  """
  shape = [1] * dims if dims == 2 else [2, 2, 1]
  if chips < math.prod(shape) or chips & (chips - 1):
    raise ValueError(f"{chips} chips is not a slice of a {dims}-D torus (a power of two"
                     f"{', at least 4' if dims == 3 else ''})")
  while math.prod(shape) < chips:
    smallest = min(shape)
    axis = max(i for i, n in enumerate(shape) if n == smallest)
    shape[axis] *= 2
  return tuple(shape)


_TYPE = re.compile(r"^(v\d+[a-z]*)-(\d+)$")
_TOPOLOGY = re.compile(r"^(v\d+[a-z]*):(\d+(?:x\d+)*)$")


def parse(name: str, num_slices: int = 1) -> Slice:
  """'v4-128' / 'v5litepod-256' / 'v6e-64' / 'v4:4x4x2' -> Slice.

  Raises:
    ValueError: an unknown generation or a size no slice has, naming the
      accepted forms.
  """
  text = name.strip().lower()
  match = _TYPE.match(text) or _TOPOLOGY.match(text)
  if not match:
    raise ValueError(f"slice {name!r}: give an accelerator type such as v4-128, v5e-256, "
                     "v5p-128 or v6e-64, or a topology such as v4:4x4x2")
  generation = GENERATIONS.get(_ALIASES.get(match.group(1), match.group(1)))
  if generation is None:
    raise ValueError(f"slice {name!r}: unknown TPU generation {match.group(1)!r}; known: "
                     f"{', '.join(GENERATIONS)}")
  if num_slices < 1:
    raise ValueError(f"num_slices = {num_slices}: at least 1")
  if ":" in text:
    shape = tuple(int(n) for n in match.group(2).split("x"))
    if len(shape) != generation.torus_dims:
      raise ValueError(f"slice {name!r}: {generation.name} topologies have "
                       f"{generation.torus_dims} axes")
  else:
    count = int(match.group(2))
    if count % generation.cores_in_name:
      raise ValueError(f"slice {name!r}: {generation.name}-N counts TensorCores, "
                       f"{generation.cores_in_name} per chip")
    shape = torus_shape(count // generation.cores_in_name, generation.torus_dims)
  return Slice(generation, shape, num_slices)


INSTALL_COMMAND = "pip install -e '.[tpu]'"


def has_libtpu() -> bool:
  """Whether the TPU compiler is importable (the `tpu` extra installs it)."""
  import importlib.util  # pylint: disable=g-import-not-at-top
  return importlib.util.find_spec("libtpu") is not None


SMALLEST = "smallest"  # `vmsst.compile --topology=smallest`: the run's smallest_accelerator_type


@gin.configurable
def target_slice(accelerator_type: str | None = None, num_slices: int = 1,
                 smallest_accelerator_type: str | None = None,
                 smallest: bool = False) -> Slice | None:
  """The slice a run file is written for (None: the run names none).

  Bound in each `gin/runs/*_paper.gin`; `train` never reads it (it runs on
  whatever devices it is started on), `vmsst.compile` compiles for it and
  `launch/tpu.sh` creates it. `smallest_accelerator_type` names the smallest
  slice the run's step was compiled to fit at the same batch (a decoding run
  with the tiled vocabulary head: docs/results/tpu_compile/); `smallest=True`
  (`vmsst.compile --topology=smallest`) returns that one, None if unnamed.
  """
  name = smallest_accelerator_type if smallest else accelerator_type
  return parse(name, num_slices) if name else None


def quiet_libtpu() -> None:
  """Before JAX loads: libtpu compiles here without probing for TPU workers.

  On a machine with no TPU, libtpu otherwise prints an INVALID_ARGUMENT error
  about TPU_WORKER_HOSTNAMES at start-up (it still works). The values only
  tell it this host is alone; a variable the user set wins; on a machine with
  an accelerator nothing is set (a TPU VM's libtpu reads its own metadata).
  """
  from vmsst.base import console  # pylint: disable=g-import-not-at-top
  if console.has_accelerator():
    return
  os.environ.setdefault("TPU_ACCELERATOR_TYPE", "v4-8")
  os.environ.setdefault("TPU_WORKER_HOSTNAMES", "localhost")
  os.environ.setdefault("TPU_SKIP_MDS_QUERY", "1")
  # Compiling touches no chip: several processes (pytest-xdist workers, a
  # compile beside a test run) may load libtpu at once without its lockfile.
  os.environ.setdefault("ALLOW_MULTIPLE_LIBTPU_LOAD", "1")
