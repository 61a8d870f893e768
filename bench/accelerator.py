"""Train-step throughput and MFU on whatever device JAX finds (issue 18 part 2).

Synthetic batches at the paper's shapes (d = 1024, 16 heads of 64, MLP 4096,
6 or 24 encoder and decoder layers: docs/papers/vmsst.md), bf16 activations
with f32 parameters, each objective's real train step (vmsst.training.trainer), with
the XLA:CPU tuning switch (vmsst.model.xla_cpu) on and off. Prints one JSON line
per (shape, vocabulary, objective, tuning): examples/s, MFU against the bf16
matmul peak measured in the same run, the model's FLOPs (`model_flops`: the
same step with its layers unrolled and whole logits, lowered, not compiled;
the compiled step counts the vocabulary head's tile loop once), memory per
device (the allocator's peak where the device reports it, beside the
compiled step's estimate that `vmsst.compile --topology=cpu` prints).

Needs only JAX, flax, optax and orbax: no TensorFlow, seqio or gin (an
accelerator image, issue 18). `--quick` shrinks everything to run on CPU in
seconds (tests/bench/test_accelerator_bench.py). Where torch and sentence-transformers
import, the peer runs on the same device (CUDA if torch sees one, else CPU):
the same encoder shape as BERT layers, MultipleNegativesRankingLoss, AdamW,
bf16 autocast with f32 parameters (bench/train_throughput.py's peer), and a
row gives its pairs/s beside our Contrastive's examples/s (one example is one
pair) at matched bf16; the issue's target is >= 1.5x on an H100.

  python bench/accelerator.py --layers=6,24 --vocab_sizes=250112,32000
  python bench/accelerator.py --quick
"""

from vmsst.base import console  # pylint: disable=g-bad-import-order

console.quiet_startup()  # before JAX loads: with libtpu installed, no TPU probe on a CPU machine

import dataclasses
import json
import os
import sys
import time
from typing import Sequence

from absl import app
from absl import flags

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import jax  # pylint: disable=wrong-import-position
import numpy as np  # pylint: disable=wrong-import-position

from vmsst.training import optimizers  # pylint: disable=wrong-import-position
from vmsst.model import partitioning  # pylint: disable=wrong-import-position
from vmsst.training import trainer as trainer_lib  # pylint: disable=wrong-import-position
from vmsst.model import xla_cpu  # pylint: disable=wrong-import-position
from vmsst.model.config import NetworkConfig  # pylint: disable=wrong-import-position
from vmsst.objectives import MODELS  # pylint: disable=wrong-import-position

FLAGS = flags.FLAGS


def _define_flags() -> None:
  """Defined when run as a script, so tests can import several bench modules."""
  flags.DEFINE_list("layers", ["6", "24"], "Encoder/decoder depths (the paper's 6, 24).")
  flags.DEFINE_list("vocab_sizes", ["250112", "32000"],
                    "Vocabulary sizes: 250112 as the paper (mT5), and ours.")
  flags.DEFINE_list("objectives", ["contrastive", "vmsst", "bitranslation", "vmsst_contrastive"],
                    "Keys of vmsst.objectives.MODELS.")
  flags.DEFINE_integer("batch_size", 256, "Pairs per step (global).")
  flags.DEFINE_integer("length", 32, "Tokens per sentence.")
  flags.DEFINE_integer("steps", 10, "Timed steps after one warm-up step.")
  flags.DEFINE_float("dropout_rate", 0.1, "NetworkConfig.dropout_rate (the paper's "
                     "Contrastive and random-init 24-layer runs use 0.1).")
  flags.DEFINE_bool("quick", False, "Tiny shapes and two steps: a CPU smoke run.")


def network_config(layers: int, vocab_size: int, quick: bool) -> NetworkConfig:
  """The paper's random-init architecture at `layers` depth (quick: a toy width)."""
  if quick:
    return NetworkConfig(vocab_size=vocab_size, emb_dim=32, num_heads=2, head_dim=16,
                         mlp_dim=64, num_encoder_layers=layers, num_language_encoder_layers=1,
                         num_decoder_layers=layers, max_length=16, dtype="bfloat16",
                         dropout_rate=FLAGS.dropout_rate)
  return NetworkConfig(vocab_size=vocab_size, emb_dim=1024, num_heads=16, head_dim=64,
                       mlp_dim=4096, num_encoder_layers=layers, num_language_encoder_layers=1,
                       num_decoder_layers=layers, max_length=FLAGS.length, dtype="bfloat16",
                       dropout_rate=FLAGS.dropout_rate)


def synthetic_batch(batch_size: int, length: int, vocab_size: int) -> dict[str, np.ndarray]:
  """Full-length random pairs (EOS last), as the train step takes them."""
  rng = np.random.default_rng(0)
  batch = {}
  for side in "ab":
    tokens = rng.integers(3, vocab_size, (batch_size, length)).astype(np.int32)
    tokens[:, -1] = 1
    batch[f"tokens_{side}"] = tokens
    batch[f"mask_{side}"] = np.ones((batch_size, length), np.int32)
    batch[f"lang_{side}"] = rng.integers(0, 10, batch_size).astype(np.int32)
  batch["sem_side"] = (np.arange(batch_size) % 2).astype(np.int32)
  return batch


def bf16_peak_flops(n: int) -> float:
  """FLOP/s of an n x n bf16 matmul (f32 accumulation), best of 5 timed runs."""
  a = jax.numpy.ones((n, n), jax.numpy.bfloat16)
  f = jax.jit(lambda x: jax.numpy.dot(x, x, preferred_element_type=jax.numpy.float32))
  f(a).block_until_ready()
  best = float("inf")
  for _ in range(5):
    start = time.perf_counter()
    f(a).block_until_ready()
    best = min(best, time.perf_counter() - start)
  return 2 * n**3 / best


def model_flops(objective: str, cfg: NetworkConfig, batch_size: int, length: int) -> float:
  """The model's FLOPs of one train step: vmsst.compiler.step.model_flops of the same model
  with its layers unrolled, nothing recomputed and the vocabulary head as whole logits
  (what variants.MODEL_FLOPS_BINDINGS binds), lowered on the CPU, not compiled. The
  compiled step's own count holds the tiled head's loop body once (vmsst/model/vocab_tiling.py).
  """
  from vmsst.compiler import step as compile_lib  # pylint: disable=import-outside-toplevel
  whole = dataclasses.replace(cfg, vocab_tile_tokens=0, remat="none", scan_layers=False)
  run = compile_lib.Run(model=MODELS[objective](whole),
                        optimizer=optimizers.adafactor(learning_rate=1e-4),
                        batch_size=batch_size, sequence_length=length, skip_nonfinite=False)
  return compile_lib.model_flops(run, batch_size)


def measure(objective: str, cfg: NetworkConfig, batch_size: int, length: int, steps: int,
            peak: float, tuned: bool, flops: float) -> dict:
  """One objective's step with the tuning switch set to `tuned`: rate, MFU (of the model's
  `flops`, `model_flops`), memory."""
  with xla_cpu.tuning(tuned):
    mesh = partitioning.make_mesh(1, 1, devices=jax.devices()[:1])
    model = MODELS[objective](cfg)
    trainer = trainer_lib.Trainer(model, optimizers.adafactor(learning_rate=1e-4), mesh,
                                  model.input_shapes(batch_size, length))
    estimate = trainer.compile_step(jax.random.key(0)).memory_analysis()
    state = trainer.initialize(jax.random.key(0))
    batch = synthetic_batch(batch_size, length, cfg.vocab_size)
    state, metrics = trainer.step(state, batch, jax.random.key(1))
    jax.block_until_ready(metrics)
    start = time.perf_counter()
    for _ in range(steps):
      state, metrics = trainer.step(state, batch, jax.random.key(1))
    jax.block_until_ready(metrics)
    seconds = (time.perf_counter() - start) / steps
  stats = jax.devices()[0].memory_stats() or {}
  estimated = (estimate.argument_size_in_bytes + estimate.output_size_in_bytes
               - estimate.alias_size_in_bytes + estimate.temp_size_in_bytes)
  return {"objective": objective, "layers": cfg.num_encoder_layers, "vocab": cfg.vocab_size,
          "xla_cpu_tuning": tuned, "examples_per_s": batch_size / seconds,
          "step_s": seconds, "model_flops": flops, "mfu": flops / seconds / peak,
          "loss": float(metrics["loss"]),
          "memory_peak_gib": stats.get("peak_bytes_in_use", float("nan")) / 2**30,
          "memory_estimate_gib": estimated / 2**30}


def main(argv: Sequence[str]) -> None:
  del argv
  quick = FLAGS.quick
  batch_size, length, steps = (8, 16, 2) if quick else (FLAGS.batch_size, FLAGS.length,
                                                        FLAGS.steps)
  vocabs = [300] if quick else [int(v) for v in FLAGS.vocab_sizes]
  layers = [1] if quick else [int(n) for n in FLAGS.layers]
  peak = bf16_peak_flops(256 if quick else 8192)
  contrastive = {}  # (layers, vocab) -> our Contrastive examples/s, tuning as on this backend
  print(json.dumps({"device": str(jax.devices()[0].device_kind), "backend": jax.default_backend(),
                    "jax": jax.__version__, "bf16_peak_tflops": peak / 1e12}), flush=True)
  for depth in layers:
    for vocab in vocabs:
      cfg = network_config(depth, vocab, quick)
      for objective in FLAGS.objectives:
        flops = model_flops(objective, cfg, batch_size, length)  # one count for both rows
        rows = [measure(objective, cfg, batch_size, length, steps, peak, tuned, flops)
                for tuned in (True, False)]
        for row in rows:
          print(json.dumps(row), flush=True)
        print(json.dumps({"objective": objective, "layers": depth, "vocab": vocab,
                          "tuning_on_over_off": rows[0]["examples_per_s"]
                          / rows[1]["examples_per_s"]}), flush=True)
        if objective == "contrastive":
          contrastive[(depth, vocab)] = rows[0]["examples_per_s"]
  try:
    import sentence_transformers  # pylint: disable=import-outside-toplevel,unused-import
    import torch  # pylint: disable=import-outside-toplevel
  except ImportError:
    print(json.dumps({"sentence_transformers": "skipped",
                      "why": "torch or sentence-transformers is not importable"}), flush=True)
    return
  device = "cuda" if torch.cuda.is_available() else "cpu"
  for depth in layers:
    for vocab in vocabs:
      print(json.dumps(peer_row(network_config(depth, vocab, quick), batch_size, length, steps,
                                device, contrastive.get((depth, vocab)))), flush=True)


def peer_row(cfg: NetworkConfig, batch_size: int, length: int, steps: int, device: str,
             ours_examples_per_s: float | None) -> dict:
  """sentence-transformers' Contrastive step (MNRL, bf16 autocast) on `device`: pairs/s."""
  sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # bench/, also under runpy
  import train_throughput  # pylint: disable=import-outside-toplevel
  run = train_throughput.peer(cfg, synthetic_batch(batch_size, length, cfg.vocab_size),
                              FLAGS.dropout_rate, "bfloat16", length=length, steps=steps,
                              device=device)
  pairs_per_s = batch_size / run()
  return {"peer": "sentence_transformers", "device": device, "layers": cfg.num_encoder_layers,
          "vocab": cfg.vocab_size, "precision": "bf16 autocast, f32 parameters",
          "pairs_per_s": pairs_per_s,
          "contrastive_vs_peer": (ours_examples_per_s / pairs_per_s
                                  if ours_examples_per_s else None), "target": 1.5}


if __name__ == "__main__":
  _define_flags()
  app.run(main)
