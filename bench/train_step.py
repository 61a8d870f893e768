r"""Train-step throughput and model-FLOP utilisation of each objective.

  .venv/bin/python bench/train_step.py [--size=tiny|cpu6] [--batch_size=64] [--steps=5]

For every objective: examples/s of the compiled step on random batches, the
FLOPs XLA counts for one step (cost analysis of the compiled program), and MFU
against the float32 matmul peak measured in this same process (so the ratio
means the same on any machine). Prints a table and one JSON line per objective.
"""

import json
import time

import jax
import jax.numpy as jnp
import numpy as np
from absl import app
from absl import flags

from vmsst import models
from vmsst import optimizers
from vmsst import partitioning
from vmsst import trainer as trainer_lib
from vmsst.config import NetworkConfig
from vmsst.objectives import MODELS

SIZES = {
    # gin/models/sizes/tiny.gin
    "tiny": NetworkConfig(vocab_size=8000, emb_dim=128, num_heads=4, head_dim=32, mlp_dim=512,
                          num_encoder_layers=2, num_language_encoder_layers=1,
                          num_decoder_layers=1, max_length=64, factorized_output=True),
    # The CPU comparison size of the benchmarks issue: 6 layers, d = 512.
    "cpu6": NetworkConfig(vocab_size=8000, emb_dim=512, num_heads=8, head_dim=64, mlp_dim=2048,
                          num_encoder_layers=6, num_language_encoder_layers=6,
                          num_decoder_layers=6, max_length=64),
}

FLAGS = flags.FLAGS
flags.DEFINE_enum("size", "tiny", list(SIZES), "Network size.")
flags.DEFINE_integer("batch_size", 64, "Translation pairs per step.")
flags.DEFINE_integer("length", 32, "Tokens per sentence.")
flags.DEFINE_integer("steps", 5, "Timed steps (after one compile/warm-up step).")
flags.DEFINE_list("objectives", sorted(MODELS), "Objectives to time.")


def matmul_peak_flops(n: int = 2048, repeats: int = 10) -> float:
  """Sustained float32 FLOP/s of an n×n matmul on this machine's devices."""
  a = jnp.ones((n, n), jnp.float32)
  f = jax.jit(lambda x: x @ x)
  f(a).block_until_ready()
  start = time.perf_counter()
  for _ in range(repeats):
    out = f(a)
  out.block_until_ready()
  return 2 * n**3 * repeats / (time.perf_counter() - start)


def random_batch(batch_size: int, length: int, vocab_size: int) -> dict[str, np.ndarray]:
  rng = np.random.default_rng(0)
  batch = {}
  for side in "ab":
    lengths = rng.integers(length // 2, length + 1, batch_size)
    tokens = rng.integers(3, vocab_size, (batch_size, length)).astype(np.int32)
    tokens[np.arange(length)[None, :] >= lengths[:, None]] = 0
    batch[f"tokens_{side}"], batch[f"mask_{side}"] = tokens, (tokens != 0).astype(np.int32)
    batch[f"lang_{side}"] = rng.integers(3, 200, batch_size).astype(np.int32)
  batch["sem_side"] = (np.arange(batch_size) % 2).astype(np.int32)
  return batch


def time_objective(name: str, cfg: NetworkConfig, peak: float) -> dict:
  shapes = models.batch_shapes(FLAGS.batch_size, FLAGS.length)
  trainer = trainer_lib.Trainer(MODELS[name](cfg), optimizers.adafactor(learning_rate=1e-3),
                                partitioning.make_mesh(), shapes)
  rng = jax.random.key(0)
  flops = trainer.compile_step(rng).cost_analysis()["flops"]
  state = trainer.initialize(rng)
  batch = trainer.global_batch(random_batch(FLAGS.batch_size, FLAGS.length, cfg.vocab_size))
  state, metrics = trainer.step(state, batch, rng)
  jax.block_until_ready(metrics)
  start = time.perf_counter()
  for _ in range(FLAGS.steps):
    state, metrics = trainer.step(state, batch, rng)
  jax.block_until_ready(metrics)
  seconds = (time.perf_counter() - start) / FLAGS.steps
  return {"name": f"train_step/{name}/{FLAGS.size}", "examples_per_second":
          FLAGS.batch_size / seconds, "seconds_per_step": seconds, "step_gflops": flops / 1e9,
          "mfu": flops / seconds / peak, "peak_gflops": peak / 1e9,
          "batch_size": FLAGS.batch_size, "length": FLAGS.length, "devices": jax.device_count()}


def main(argv):
  del argv
  cfg = SIZES[FLAGS.size]
  peak = matmul_peak_flops()
  rows = [time_objective(name, cfg, peak) for name in FLAGS.objectives]
  print(f"size={FLAGS.size} batch={FLAGS.batch_size} length={FLAGS.length} "
        f"f32 matmul peak={peak / 1e9:.1f} GFLOP/s on {jax.device_count()} device(s)")
  print(f"{'objective':22s} {'ex/s':>9s} {'s/step':>8s} {'GFLOP/step':>11s} {'MFU':>6s}")
  for row in rows:
    print(f"{row['name'].split('/')[1]:22s} {row['examples_per_second']:9.1f} "
          f"{row['seconds_per_step']:8.3f} {row['step_gflops']:11.1f} {row['mfu']:6.1%}")
  for row in rows:
    print(json.dumps(row))


if __name__ == "__main__":
  app.run(main)
