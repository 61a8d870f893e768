r"""The tiled vocabulary head measured: memory by the compilers, time on this CPU.

  .venv/bin/python bench/vocab_tiling.py [--parts=head_tiles,cpu_memory,main_job,paper_cpu] \
      [--output=docs/results/vocab_tiling]

Parts (each writes <output>/<part>.json, the records, and <part>.md, their table):
  head_tiles  the vocabulary head and its loss alone, forward and backward, at the
              6-layer paper run's shape per chip on a v4-16, compiled by the TPU
              compiler for each tile size (NetworkConfig.vocab_tile_tokens; 0 is the
              whole-logit head), and timed on this CPU at a reduced shape: the
              measurement behind the default tile (the memory a tile saves against
              the scan steps it adds). A whole paper step compiles in 5-15 minutes
              here; the head alone in seconds.
  cpu_memory  the same run's step at batch 128 and 1024 in bfloat16 (the device
              check's precision) compiled by XLA:CPU for one device (`memory_analysis()`), whole head against tiled: the proxy for an
              80 GB GPU, which compiled batch 128 to 53.3 GiB with the whole head
              (docs/results/device/).
  main_job    `make train`'s step (gin/runs/vmsst_cpu.gin: the candidate softmax over
              2,048 ids) against the full-vocabulary softmax, whole and tiled, timed
              side by side in interleaved rounds on one random batch.
  paper_cpu   the paper's vocabulary head and loss (3d = 3,072 -> 250,112, float32),
              forward and backward, at a reduced batch's tokens on this CPU, whole logits
              against tiles smaller than the tokens, interleaved: what the tiles cost in
              time. (A whole paper step twice, for side-by-side timing, needs more than
              this machine's 24 GB.)
"""

from vmsst.base import console  # pylint: disable=g-bad-import-order

console.quiet_startup()  # before JAX loads: with libtpu installed, no TPU probe on a CPU machine

import json
import pathlib
import re
import subprocess
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np
from absl import app
from absl import flags

import common
import train_throughput
from vmsst.training import slices as tpu_slices
from vmsst.compiler import step as compiler_step
from vmsst.model import losses
from vmsst.model import vocab_tiling
from vmsst.model import partitioning
from vmsst.training import trainer as trainer_lib

ROOT = pathlib.Path(__file__).resolve().parents[1]
GIB = 2.0 ** 30
PAPER_RUN = "gin/runs/vmsst_6l_paper.gin"
MAIN_RUN = "gin/runs/vmsst_cpu.gin"
TILE = "NetworkConfig.vocab_tile_tokens"
FLAGS = flags.FLAGS


def _define_flags() -> None:
  flags.DEFINE_list("parts", ["head_tiles", "cpu_memory", "main_job", "paper_cpu"], "Parts.")
  flags.DEFINE_string("output", "docs/results/vocab_tiling", "Directory of the results.")
  flags.DEFINE_list("tiles", ["0", "256", "512", "1024", "2048", "4096", "8192"],
                    "head_tiles: tile sizes (0: the whole-logit head).")
  flags.DEFINE_string("topology", "v4-16", "head_tiles: the slice whose chip compiles.")
  flags.DEFINE_list("cpu_batches", ["128", "1024"], "cpu_memory: global batches.")
  flags.DEFINE_integer("paper_tokens", 512, "paper_cpu: decoded tokens (a reduced batch).")
  flags.DEFINE_integer("paper_tile", 128, "paper_cpu: the tile (below the tokens, so the head "
                       "runs in several).")
  flags.DEFINE_string("cpu_dtype", "bfloat16", "cpu_memory: the compute dtype (the device "
                      "check's, which measured the 53.3 GiB).")
  flags.DEFINE_integer("rounds", 3, "Interleaved timing rounds (the median is kept).")
  flags.DEFINE_integer("main_steps", 10, "main_job: steps per timed round.")


def _head_loss(tile: int):
  """Σ NLL of the paper's head (concat(h, z) [3d] -> V, float32, with bias) over tokens."""
  def logits(params, inputs):
    kernel, bias = params
    return inputs[0] @ kernel + bias

  def loss(params, x, targets):
    mask = jnp.ones_like(targets)
    if tile:
      nll, _ = vocab_tiling.sequence_nll(logits, params, (x,), targets, mask, tile)
    else:
      nll, _ = losses.sequence_nll(logits(params, (x,)), targets, mask)
    return jnp.sum(nll)

  return jax.jit(jax.grad(loss, argnums=(0, 1)))


def _head_shapes(tokens: int, width: int, vocab: int, sharding=None):
  struct = lambda shape, dtype: jax.ShapeDtypeStruct(shape, dtype, sharding=sharding)
  return ((struct((width, vocab), jnp.float32), struct((vocab,), jnp.float32)),
          struct((tokens // 32, 32, width), jnp.float32), struct((tokens // 32, 32), jnp.int32))


def _random_head_inputs(tokens: int, width: int, vocab: int):
  """(head parameters, inputs, targets) of `_head_shapes`, random, on the CPU."""
  cpu = jax.sharding.SingleDeviceSharding(jax.devices("cpu")[0])
  rng = np.random.default_rng(0)
  return (jax.tree.map(lambda s: jnp.asarray(
      rng.integers(0, vocab, s.shape) if s.dtype == jnp.int32 else
      0.02 * rng.standard_normal(s.shape, np.float32), s.dtype), tree)
      for tree in _head_shapes(tokens, width, vocab, cpu))


def _head_timer(tile: int, args):
  """Seconds of one call of `_head_loss(tile)` on `args`, compiled first."""
  step = _head_loss(tile)
  jax.block_until_ready(step(*args))  # compiles

  def timed() -> float:
    start = time.perf_counter()
    jax.block_until_ready(step(*args))
    return time.perf_counter() - start
  return timed


def head_tiles(_: pathlib.Path) -> list[dict]:
  """The head alone at the paper's per-chip shape on a v4-16 (256 pairs a chip: 4 decodes
  x 32 positions = 32,768 tokens, 3d = 3,072, V = 250,112, float32), compiled by the TPU
  compiler for one chip; then its time on this CPU at a reduced shape, interleaved."""
  chip = tpu_slices.parse(FLAGS.topology).devices()[0]
  sharding = jax.sharding.SingleDeviceSharding(chip)
  records = []
  tiles = [int(t) for t in FLAGS.tiles]
  for tile in tiles:
    lowered = _head_loss(tile).lower(*_head_shapes(32768, 3072, 250112, sharding))
    try:
      compiled = lowered.compile(compiler_options=compiler_step.REPORT_COMPILER_OPTIONS)
    except Exception as e:  # pylint: disable=broad-except (the compiler's out-of-memory)
      if not compiler_step.is_out_of_memory(e):
        raise
      needed = re.search(r"temporaries \(([0-9.]+)G\)", str(e))
      records.append({"tile_tokens": tile, "tpu_fits": False, "tpu_flops": None,
                      "tpu_temp_bytes": float(needed.group(1)) * 1e9 if needed else None})
    else:
      records.append({"tile_tokens": tile, "tpu_fits": True,
                      "tpu_temp_bytes": compiled.memory_analysis().temp_size_in_bytes,
                      "tpu_flops": (compiled.cost_analysis() or {}).get("flops")})
    print(records[-1], flush=True)
  params, x, targets = _random_head_inputs(4096, 512, 32768)

  seconds = common.interleaved({t: _head_timer(t, (params, x, targets)) for t in tiles},
                               FLAGS.rounds, settle_seconds=1.0)
  for record in records:
    record["cpu_seconds_4096_tokens_512_to_32768"] = seconds[record["tile_tokens"]]
  return records


def head_table(records: list[dict]) -> str:
  lines = ["| tile (tokens per device) | TPU temporaries, one v4 chip (32,768 tokens, V = 250,112) "
           "| TPU FLOPs | CPU seconds (4,096 tokens, 512 -> 32,768) |", "|---:|---:|---:|---:|"]
  for r in records:
    temp = f"{r['tpu_temp_bytes'] / GIB:.2f} GiB" if r["tpu_temp_bytes"] else "-"
    temp += "" if r["tpu_fits"] else " (does not fit: the compiler's need)"
    flops = f"{r['tpu_flops']:.3e}" if r["tpu_flops"] else "-"
    lines.append(f"| {r['tile_tokens'] or 'whole logits'} | {temp} | {flops} | {r['cpu_seconds_4096_tokens_512_to_32768']:.3f} |")
  return "\n".join(lines)


def cpu_memory(_: pathlib.Path) -> list[dict]:
  """XLA:CPU's memory analysis of the paper step on one device, whole head and tiled."""
  mesh = partitioning.make_mesh(1, 1, devices=jax.devices("cpu")[:1])
  records = []
  for batch in map(int, FLAGS.cpu_batches):
    for tile in (0, None):
      bindings = ([f"train.batch_size={batch}", f"NetworkConfig.dtype='{FLAGS.cpu_dtype}'"]
                  + ([f"{TILE}={tile}"] if tile == 0 else []))
      run = compiler_step.load_run([PAPER_RUN], bindings)
      compiled = compiler_step.compile_step(run, mesh, batch)
      memory = compiled.memory
      records.append({"batch_size": batch, "dtype": FLAGS.cpu_dtype,
                      "tile_tokens": run.model.network_config.vocab_tile_tokens,
                      "temp_bytes": memory.temp, "peak_bytes": memory.peak,
                      "arguments_bytes": memory.arguments,
                      "compile_seconds": round(memory.compile_seconds)})
      print(records[-1], flush=True)
  return records


def cpu_memory_table(records: list[dict]) -> str:
  lines = ["| batch | head | temporaries | peak (arguments + outputs − aliased + temporaries) |",
           "|---:|---|---:|---:|"]
  for r in records:
    head = f"tiled, {r['tile_tokens']} tokens" if r["tile_tokens"] else "whole logits"
    lines.append(f"| {r['batch_size']} | {head} | {r['temp_bytes'] / GIB:.2f} GiB "
                 f"| {r['peak_bytes'] / GIB:.2f} GiB |")
  return "\n".join(lines)


def _timer(run_file: str, bindings: list[str], steps: int):
  """A timer of `run_file`'s compiled step (with `bindings`) on one random batch."""
  run = compiler_step.load_run([run_file], bindings)
  cfg = run.model.network_config
  batch = train_throughput.random_batch(run.batch_size, run.sequence_length, cfg.vocab_size)
  trainer = trainer_lib.Trainer(run.model, run.optimizer, partitioning.make_mesh(),
                                {k: v.shape for k, v in batch.items()})
  return train_throughput.step_timer(trainer, batch, steps)


def timed_variants(run_file: str, variants: dict[str, list[str]], steps: int) -> list[dict]:
  timers = {name: _timer(run_file, bindings, steps) for name, bindings in variants.items()}
  seconds = common.interleaved(timers, FLAGS.rounds, settle_seconds=1.0)
  return [{"variant": name, "bindings": variants[name], "seconds_per_step": s,
           **common.machine()} for name, s in seconds.items()]


def main_job(_: pathlib.Path) -> list[dict]:
  full = ["VMSST.softmax_candidates=0"]
  return timed_variants(MAIN_RUN, {
      "candidate softmax (make train)": [],
      "full softmax, tiled head": full,
      "full softmax, whole logits": full + [f"{TILE}=0"]}, FLAGS.main_steps)


def paper_cpu(_: pathlib.Path) -> list[dict]:
  """The paper's head and loss (3d = 3,072 -> 250,112, float32), forward and backward, on
  `paper_tokens` tokens: whole logits against `paper_tile`-token tiles, interleaved."""
  params, x, targets = _random_head_inputs(FLAGS.paper_tokens, 3072, 250112)

  names = {f"tiled head, {FLAGS.paper_tile}-token tiles": FLAGS.paper_tile, "whole logits": 0}
  seconds = common.interleaved({name: _head_timer(tile, (params, x, targets))
                                for name, tile in names.items()},
                               FLAGS.rounds, settle_seconds=1.0)
  return [{"variant": name, "tokens": FLAGS.paper_tokens, "seconds_per_step": seconds[name],
           **common.machine()} for name in names]


def time_table(records: list[dict]) -> str:
  fastest = min(r["seconds_per_step"] for r in records)
  lines = ["| variant | seconds per step (median) | against the fastest |", "|---|---:|---:|"]
  for r in records:
    lines.append(f"| {r['variant']} | {r['seconds_per_step']:.3f} "
                 f"| {r['seconds_per_step'] / fastest:.2f}× |")
  return "\n".join(lines)


PARTS = {"head_tiles": (head_tiles, head_table), "cpu_memory": (cpu_memory, cpu_memory_table),
         "main_job": (main_job, time_table), "paper_cpu": (paper_cpu, time_table)}


def main(argv) -> None:
  del argv
  output = (ROOT / FLAGS.output).resolve()
  output.mkdir(parents=True, exist_ok=True)
  for part in FLAGS.parts:
    measure, tabulate = PARTS[part]
    records = measure(output)
    (output / f"{part}.json").write_text(json.dumps(records, indent=1, default=float))
    (output / f"{part}.md").write_text(tabulate(records) + "\n")
    print(tabulate(records), flush=True)


if __name__ == "__main__":
  _define_flags()
  app.run(main)
