"""TPU slices by name: chips, torus shape, HBM and peak; every paper run names one."""

import re

import pytest

import vmsst_testing
from vmsst.training import slices as tpu_slices
from vmsst.base.gin_utils import gin


@pytest.mark.parametrize("name, shape, chips, cloud", [
    ("v4-8", (2, 2, 1), 4, "v4-8"),
    ("v4-64", (2, 4, 4), 32, "v4-64"),
    ("v4-128", (4, 4, 4), 64, "v4-128"),
    ("v4-512", (4, 8, 8), 256, "v4-512"),
    ("v5e-1", (1, 1), 1, "v5litepod-1"),
    ("v5litepod-256", (16, 16), 256, "v5litepod-256"),
    ("v5p-128", (4, 4, 4), 64, "v5p-128"),
    ("v6e-64", (8, 8), 64, "v6e-64"),
    ("v4:4x4x2", (4, 4, 2), 32, "v4-64"),
])
def test_accelerator_types_are_cloud_tpus_slices(name, shape, chips, cloud):
  target = tpu_slices.parse(name)
  assert (target.shape, target.chips, target.cloud_accelerator_type) == (shape, chips, cloud)
  assert tpu_slices.parse(target.cloud_accelerator_type).chips == chips


def test_each_generation_has_its_hbm_and_bf16_peak():
  figures = {g: (tpu_slices.parse(f"{g}-8").hbm_bytes / 2**30,
                 tpu_slices.parse(f"{g}-8").bf16_flops / 1e12) for g in ("v4", "v5e", "v5p", "v6e")}
  assert figures == {"v4": (32, 275), "v5e": (16, 197), "v5p": (95, 459), "v6e": (32, 918)}


def test_hosts_hold_four_chips_and_single_vm_slices_all_of_theirs():
  assert tpu_slices.parse("v4-128").chips_per_host_bounds() == (2, 2, 1)
  assert tpu_slices.parse("v4-8").chips_per_host_bounds() == (2, 2, 1)
  assert tpu_slices.parse("v5e-8").chips_per_host_bounds() == (2, 4, 1)
  assert tpu_slices.parse("v6e-256").chips_per_host_bounds() == (2, 2, 1)
  two = tpu_slices.parse("v5p-128", num_slices=2)
  assert (two.chips, two.name) == (128, "v5p-128 x 2 slices")


@pytest.mark.parametrize("name, words", [
    ("v4-6", "power of two"), ("v4-2", "at least 4"), ("v4-7", "TensorCores"),
    ("v9-8", "unknown TPU generation"), ("tpu", "accelerator type"), ("v4:4x4", "3 axes")])
def test_a_name_no_slice_has_says_why(name, words):
  with pytest.raises(ValueError, match=words):
    tpu_slices.parse(name)


def test_every_paper_run_names_a_slice_that_exists():
  folder = vmsst_testing.ROOT / "gin" / "runs"
  runs = [p for p in sorted(folder.glob("*_paper.gin")) + sorted(folder.glob("*_pretrained.gin"))
          if p.name != "base_paper.gin"]  # the shared body, not a run
  assert len(runs) >= 20
  binding = re.compile(r"^target_slice\.accelerator_type = '([^']+)'$", re.M)
  for path in runs:
    named = binding.findall(path.read_text())
    assert named, f"{path.name} names no slice"
    tpu_slices.parse(named[-1])


def test_a_run_names_its_smallest_slice_beside_its_paper_slice():
  gin.clear_config()
  gin.parse_config(["target_slice.accelerator_type = 'v4-64'",
                    "target_slice.smallest_accelerator_type = 'v4-16'"])
  try:
    assert tpu_slices.target_slice().name == "v4-64"
    assert tpu_slices.target_slice(smallest=True).name == "v4-16"
  finally:
    gin.clear_config()
  assert tpu_slices.target_slice(smallest=True) is None
