r"""Scaling: train-step time against batch size and sequence length, and 2 CPU devices vs 1.

  .venv/bin/python bench/scaling.py [--objective=vmsst] [--size=tiny] \
      [--batch_sizes=32,64,128] [--lengths=16,32,64] [--rounds=3] [--quick]

"Linear or better" means doubling the batch (or the length) at most doubles
the step time, i.e. examples/s (tokens/s) at the larger shape is at least
the smaller shape's: each comparison's ratio is throughput(large) /
throughput(small), target 0.95 (linear, within the ~5% noise of interleaved
medians on a shared machine). Attention is quadratic in the length, so at
long lengths its FLOPs per token grow; at these lengths the MLPs dominate.

The mesh comparison runs the same step in a child process with two forced
host devices (XLA_FLAGS=--xla_force_host_platform_device_count=2, the batch
split over the "data" axis) against a child with one; both have the same 2
cores, so the ratio shows the cost (or gain) of partitioning, not more
hardware. Target 1.0.
"""

from vmsst.base import console  # pylint: disable=g-bad-import-order

console.quiet_startup()  # before JAX loads: with libtpu installed, no TPU probe on a CPU machine

import json
import os
import sys

from absl import app
from absl import flags

import common
import train_throughput

FLAGS = flags.FLAGS


def _define_flags() -> None:
  """Defined when run as a script, so tests can import several bench modules."""
  flags.DEFINE_string("objective", "vmsst", "Objective whose step is timed.")
  flags.DEFINE_enum("size", "tiny", list(train_throughput.SIZES), "Network size.")
  flags.DEFINE_list("batch_sizes", ["32", "64", "128"], "Batch sizes at --length.")
  flags.DEFINE_list("lengths", ["16", "32", "64"], "Lengths at --batch_size.")
  flags.DEFINE_integer("batch_size", 64, "Batch of the length sweep and the mesh runs.")
  flags.DEFINE_integer("length", 32, "Length of the batch sweep and the mesh runs.")
  flags.DEFINE_integer("rounds", 3, "Interleaved rounds; the median is kept.")
  flags.DEFINE_bool("quick", False, "Smoke mode: contrastive, smoke size, tiny shapes, one round.")
  flags.DEFINE_integer("child_devices", 0, "Internal: time one step on this many devices.")


def _timers(shapes: list[tuple[int, int]]) -> dict[tuple[int, int], object]:
  cfg = train_throughput.SIZES[FLAGS.size]
  return {shape: train_throughput.ours(
      FLAGS.objective, cfg, train_throughput.random_batch(*shape, cfg.vocab_size))[1]
          for shape in shapes}


def _sweep(kind: str, shapes: list[tuple[int, int]], context: dict) -> list[dict]:
  """Comparisons of each shape's throughput with the previous (smaller) one's."""
  seconds = common.interleaved(_timers(shapes), FLAGS.rounds)
  unit = "examples/s" if kind == "batch" else "tokens/s"
  rate = {s: s[0] * (1 if kind == "batch" else s[1]) / seconds[s] for s in shapes}
  results = []
  for small, large in zip(shapes, shapes[1:]):
    axis = 0 if kind == "batch" else 1
    results.append(common.comparison(
        f"scaling/{kind}/{small[axis]}->{large[axis]}", rate[large], rate[small], unit, 0.95,
        seconds_per_step={f"{b}x{l}": seconds[(b, l)] for b, l in (small, large)}, **context))
  return results


def _mesh(context: dict) -> dict:
  """Examples/s of the step on 2 forced devices (ours) vs 1 (peer), one child each."""
  rates = {}
  for devices in (2, 1):
    flags_ = os.environ.get("XLA_FLAGS", "").replace(
        "--xla_force_host_platform_device_count=8", "")
    command = [sys.executable, __file__, f"--child_devices={devices}",
               f"--objective={FLAGS.objective}", f"--size={FLAGS.size}",
               f"--batch_size={FLAGS.batch_size}", f"--length={FLAGS.length}",
               f"--rounds={FLAGS.rounds}"]
    env = {"XLA_FLAGS": f"{flags_} --xla_force_host_platform_device_count={devices}".strip()}
    rates[devices] = common.run_json(command, env=env)["examples_per_second"]
  return common.comparison("scaling/mesh/2_devices_vs_1", rates[2], rates[1], "examples/s",
                           1.0, batch_size=FLAGS.batch_size, length=FLAGS.length, **context)


def _child() -> dict:
  import jax  # pylint: disable=import-outside-toplevel
  assert jax.device_count() == FLAGS.child_devices, jax.devices()
  shape = (FLAGS.batch_size, FLAGS.length)
  seconds = common.interleaved(_timers([shape]), FLAGS.rounds)[shape]
  return {"devices": jax.device_count(), "examples_per_second": FLAGS.batch_size / seconds}


def main(argv) -> None:
  del argv
  if FLAGS.quick:
    FLAGS.size, FLAGS.rounds, FLAGS.batch_size, FLAGS.length = "smoke", 1, 8, 8
    FLAGS.objective = "contrastive"  # compiles in a fraction of VMSST's time
    FLAGS.batch_sizes, FLAGS.lengths = ["4", "8"], ["8", "16"]
  if FLAGS.child_devices:
    print(json.dumps(_child()))
    return
  context = {"objective": FLAGS.objective, "size": FLAGS.size, **common.machine()}
  batch_shapes = [(int(b), FLAGS.length) for b in FLAGS.batch_sizes]
  length_shapes = [(FLAGS.batch_size, int(l)) for l in FLAGS.lengths]
  results = (_sweep("batch", batch_shapes, context) + _sweep("length", length_shapes, context)
             + [_mesh(context)])
  common.emit(results, f"scaling: {FLAGS.objective} step, size {FLAGS.size}, "
              f"load {context['load_average']}")


if __name__ == "__main__":
  _define_flags()
  app.run(main)
