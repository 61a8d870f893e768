r"""Training throughput: examples/s and MFU per objective, and the sentence-transformers peer.

  .venv/bin/python bench/train_throughput.py [--size=cpu6] [--batch_size=128] [--length=32] \
      [--dtype=bfloat16] [--rounds=3] [--steps=1] [--quick]

Every objective's compiled train step (vmsst.training.trainer.Trainer: jit with
shardings, donated state) runs on one fixed random batch; the peer is the
same contrastive model in sentence-transformers on PyTorch CPU, in a process
of its own (common.TimerProcess) (BERT layers
of the same depth, d, heads, MLP width, vocabulary and length, mean pooling,
MultipleNegativesRankingLoss, AdamW; dropout 0.1 on both sides, the paper's
Contrastive setting), fed the same token ids (tokenization
is excluded on both sides). All timings are interleaved in rounds (ours,
peer, ours, ...) with an idle pause before each, and the median is kept, so
a burst of load from other processes hits both sides. MFU = XLA's FLOP
count of the compiled step (its vocabulary head as whole logits: the tiled
head's loop would be counted once) / step time / the matmul peak of the same
precision measured in this process. The optimizer is AdamW on both sides
(its update is < 0.1% of a step's FLOPs).

Precision: every objective runs at --dtype (bfloat16 activations and
matmuls with float32 parameters, as T5X trains, or float32); Contrastive and
the peer also run at the other precision (the peer's bfloat16 is
torch.autocast), so the like-for-like rows and the defaults row
(ours at --dtype, the peer in its default float32) are all reported.

Comparisons (JSON lines, bench/common.py):
  train/contrastive_vs_sentence_transformers/<ours>_vs_<peer dtype>  examples/s, target 1.5
  train/<objective>[@dtype]/mfu                  achieved vs peak GFLOP/s, target 0.5
  train/vmsst_step_vs_contrastive_step           seconds per step, target 0.5 (<= 2x)
  train/vmsst_light_step_vs_contrastive_step     the same with Table 4's cheap settings
"""

from vmsst.base import console  # pylint: disable=g-bad-import-order

console.quiet_startup()  # before JAX loads: with libtpu installed, no TPU probe on a CPU machine

import dataclasses
import functools
import time

import jax
import numpy as np
from absl import app
from absl import flags

import common
from vmsst.training import optimizers
from vmsst.model import partitioning
from vmsst.training import trainer as trainer_lib
from vmsst.model.config import NetworkConfig
from vmsst.objectives import MODELS

SIZES = {
    # gin/models/sizes/tiny.gin's shape with V = 8000.
    "tiny": NetworkConfig(vocab_size=8000, emb_dim=128, num_heads=4, head_dim=32, mlp_dim=512,
                          num_encoder_layers=2, num_language_encoder_layers=1,
                          num_decoder_layers=1, max_length=64, factorized_output=True),
    # The stated CPU size: 6 layers everywhere, d = 512, 8 heads, MLP 2048.
    "cpu6": NetworkConfig(vocab_size=8000, emb_dim=512, num_heads=8, head_dim=64, mlp_dim=2048,
                          num_encoder_layers=6, num_language_encoder_layers=6,
                          num_decoder_layers=6, max_length=64),
    # --quick: seconds, for the smoke test.
    "smoke": NetworkConfig(vocab_size=1000, emb_dim=32, num_heads=2, head_dim=16, mlp_dim=64,
                           num_encoder_layers=1, num_language_encoder_layers=1,
                           num_decoder_layers=1, max_length=16),
}
OBJECTIVES = ("vmsst", "bitranslation", "contrastive", "momentum_contrast")

FLAGS = flags.FLAGS


def _define_flags() -> None:
  flags.DEFINE_enum("size", "cpu6", list(SIZES), "Network size.")
  flags.DEFINE_integer("batch_size", 128, "Translation pairs per step.")
  flags.DEFINE_integer("length", 32, "Tokens per sentence.")
  flags.DEFINE_integer("steps", 1, "Timed steps per round.")
  flags.DEFINE_integer("rounds", 3, "Interleaved rounds; the median round is kept.")
  flags.DEFINE_list("objectives", list(OBJECTIVES), "Objectives to time.")
  flags.DEFINE_integer("queue_size", 4096, "MomentumContrast queue (gin: 409,600; a smaller "
                       "queue keeps the step comparable to the in-batch objectives).")
  flags.DEFINE_bool("peer", True, "Also time the sentence-transformers peer.")
  flags.DEFINE_enum("dtype", "bfloat16", ["bfloat16", "float32"],
                    "Activation/matmul precision of every objective (parameters, optimizer "
                    "state and losses stay float32: gin/models/precision/bf16.gin).")
  flags.DEFINE_bool("matched_precision", True, "Also time Contrastive and the peer at the "
                    "other precision (the peer in bf16 under torch.autocast), so every "
                    "precision pairing is compared.")
  flags.DEFINE_bool("light_vmsst", True, "Also time VMSST with the paper's Table 4 cheap "
                    "settings: 1-layer language encoder and decoder, factorized output.")
  flags.DEFINE_float("settle_seconds", 2.0, "Idle time before each timed measurement.")
  flags.DEFINE_bool("quick", False, "Smoke mode: smoke size, batch 8, length 8, contrastive "
                    "and the peer only, one round.")


def random_batch(batch_size: int, length: int, vocab_size: int) -> dict[str, np.ndarray]:
  """Pairs of random ids, lengths uniform in [length / 2, length], EOS last, 0-padded."""
  rng = np.random.default_rng(0)
  batch = {}
  for side in "ab":
    lengths = rng.integers(length // 2, length + 1, batch_size)
    tokens = rng.integers(3, vocab_size, (batch_size, length)).astype(np.int32)
    tokens[np.arange(batch_size), lengths - 1] = 1
    tokens[np.arange(length)[None, :] >= lengths[:, None]] = 0
    batch[f"tokens_{side}"], batch[f"mask_{side}"] = tokens, (tokens != 0).astype(np.int32)
    batch[f"lang_{side}"] = rng.integers(3, 200, batch_size).astype(np.int32)
  batch["sem_side"] = (np.arange(batch_size) % 2).astype(np.int32)
  return batch


def ours(name: str, cfg: NetworkConfig, batch: dict[str, np.ndarray], *, steps: int = 1,
         queue_size: int = 4096):
  """(step FLOPs, a function running `steps` steps and returning seconds per step).

  `batch` fixes the shapes: numpy [B, L] fields of the models.batch_shapes contract.
  """
  options = {"queue_size": queue_size} if name == "momentum_contrast" else {}
  shapes = {key: value.shape for key, value in batch.items()}
  trainer, counted = (trainer_lib.Trainer(MODELS[name](c, **options), optimizers.adamw(
      learning_rate=1e-4), partitioning.make_mesh(), shapes)
                      for c in (cfg, dataclasses.replace(cfg, vocab_tile_tokens=0)))
  # Counted with whole logits: the tiled head is a loop whose body XLA counts once.
  flops = counted.compile_step(jax.random.key(0)).cost_analysis()["flops"]
  return flops, step_timer(trainer, batch, steps)


def step_timer(trainer: trainer_lib.Trainer, batch: dict[str, np.ndarray], steps: int = 1):
  """A function running `steps` train steps from a fresh state on `batch`; seconds per step.

  Compiled and warmed up before it is returned.
  """
  rng = jax.random.key(0)
  state = {"state": trainer.initialize(rng)}
  batch = trainer.global_batch(batch)

  def run() -> float:
    start = time.perf_counter()
    for _ in range(steps):
      state["state"], metrics = trainer.step(state["state"], batch, rng)
    jax.block_until_ready(metrics)
    return (time.perf_counter() - start) / steps

  run()  # compile and warm up
  return run


def peer(cfg: NetworkConfig, batch: dict[str, np.ndarray], dropout: float,
         dtype: str = "float32", *, length: int, steps: int = 1, device: str = "cpu"):
  """A function running `steps` sentence-transformers MNRL steps; seconds per step.

  bfloat16 is PyTorch's own mixed precision: the forward under
  torch.autocast(device, bfloat16), float32 parameters and AdamW. `device`:
  "cpu" here, "cuda" in bench/accelerator.py (timed to a synchronize).
  """
  import contextlib  # pylint: disable=import-outside-toplevel
  import torch  # pylint: disable=import-outside-toplevel
  import peers  # pylint: disable=import-outside-toplevel
  from sentence_transformers.sentence_transformer import losses  # pylint: disable=import-outside-toplevel
  model = peers.sentence_transformer(cfg, None, max_length=length, dropout=dropout,
                                     device=device)
  model.train()
  loss_fn = losses.MultipleNegativesRankingLoss(model)
  optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
  features = [{"input_ids": torch.from_numpy(batch[f"tokens_{s}"]).long().to(device),
               "attention_mask": torch.from_numpy(batch[f"mask_{s}"]).long().to(device)}
              for s in "ab"]
  synchronize = torch.cuda.synchronize if device.startswith("cuda") else lambda: None

  def precision():
    if dtype == "float32":
      return contextlib.nullcontext()
    return torch.autocast(device.split(":")[0], dtype=torch.bfloat16)

  def run() -> float:
    start = time.perf_counter()
    for _ in range(steps):
      optimizer.zero_grad()
      with precision():
        loss = loss_fn(features, None)
      loss.backward()
      optimizer.step()
    synchronize()
    return (time.perf_counter() - start) / steps

  run()  # warm up
  return run


LIGHT = {"num_language_encoder_layers": 1, "num_decoder_layers": 1, "factorized_output": True}
PEER = "sentence_transformers"


def _timed_runs(cfg: NetworkConfig, batch: dict[str, np.ndarray], with_peer: bool):
  """({run: step FLOPs}, {run: timer}); runs are named "<objective>@<dtype>"."""
  other = "float32" if FLAGS.dtype == "bfloat16" else "bfloat16"
  plan = [(name, FLAGS.dtype, {}) for name in FLAGS.objectives]
  if FLAGS.light_vmsst and "vmsst" in FLAGS.objectives:
    plan.append(("vmsst_light", FLAGS.dtype, LIGHT))
  if FLAGS.matched_precision and "contrastive" in FLAGS.objectives:
    plan.append(("contrastive", other, {}))
  flops, runs = {}, {}
  for name, dtype, changes in plan:
    if name == "contrastive":  # the paper's (and the peer's) dropout: gin/models/contrastive.gin
      changes = {"dropout_rate": 0.1}
    run_cfg = dataclasses.replace(cfg, dtype=dtype, **changes)
    objective = "vmsst" if name == "vmsst_light" else name
    key = f"{name}@{dtype}"
    flops[key], runs[key] = ours(objective, run_cfg, batch, steps=FLAGS.steps,
                                 queue_size=FLAGS.queue_size)
    print(f"  compiled {key}", flush=True)
  if with_peer:
    for dtype in [FLAGS.dtype] + ([other] if FLAGS.matched_precision else []):
      # In its own process: see common.TimerProcess.
      runs[f"{PEER}@{dtype}"] = common.TimerProcess(
          functools.partial(peer, length=FLAGS.length, steps=FLAGS.steps), cfg, batch, 0.1,
          dtype)
  return flops, runs


def _peer_comparisons(flops, seconds, peaks, context):
  """Contrastive against the peer at every precision pairing that was timed.

  Same precision on both sides is the like-for-like row; ours at --dtype
  against the peer's default float32 is what each library gives by default.
  """
  results = []
  for ours_key in sorted(k for k in flops if k.startswith("contrastive@")):
    for peer_key in sorted(k for k in seconds if k.startswith(PEER)):
      ours_dtype, peer_dtype = ours_key.split("@")[1], peer_key.split("@")[1]
      if ours_dtype != peer_dtype and peer_dtype != "float32":
        continue
      results.append(common.comparison(
          f"train/contrastive_vs_{PEER}/{ours_dtype}_vs_{peer_dtype}",
          FLAGS.batch_size / seconds[ours_key], FLAGS.batch_size / seconds[peer_key],
          "examples/s", 1.5, peer_mfu=flops[ours_key] / seconds[peer_key] / peaks[peer_dtype],
          **context))
  return results


def main(argv) -> None:
  del argv
  if FLAGS.quick:
    FLAGS.size, FLAGS.batch_size, FLAGS.length, FLAGS.rounds = "smoke", 8, 8, 1
    FLAGS.objectives, FLAGS.matched_precision, FLAGS.settle_seconds = ["contrastive"], False, 0
  cfg = SIZES[FLAGS.size]
  context = {"size": FLAGS.size, "batch_size": FLAGS.batch_size, "length": FLAGS.length,
             "devices": jax.device_count(), **common.machine()}
  batch = random_batch(FLAGS.batch_size, FLAGS.length, cfg.vocab_size)
  with_peer = FLAGS.peer and common.have_sentence_transformers()
  if FLAGS.peer and not with_peer:
    print(common.PEER_MISSING)
  flops, runs = _timed_runs(cfg, batch, with_peer)
  dtypes = sorted({key.split("@")[1] for key in runs})
  peaks = {d: common.matmul_peak_flops(dtype=d) for d in dtypes}
  seconds = common.interleaved(runs, FLAGS.rounds, FLAGS.settle_seconds)
  for run in runs.values():
    if isinstance(run, common.TimerProcess):
      run.close()
  for d in dtypes:  # before and after: load drifts
    peaks[d] = (peaks[d] + common.matmul_peak_flops(dtype=d)) / 2
  results = []
  for key in flops:
    name, dtype = key.split("@")
    label = name if dtype == FLAGS.dtype else key
    results.append(common.comparison(
        f"train/{label}/mfu", flops[key] / seconds[key] / 1e9, peaks[dtype] / 1e9, "GFLOP/s",
        0.5, examples_per_second=FLAGS.batch_size / seconds[key], dtype=dtype,
        seconds_per_step=seconds[key], step_gflops=flops[key] / 1e9, **context))
  results += _peer_comparisons(flops, seconds, peaks, context)
  for variant in ("vmsst", "vmsst_light"):
    if {f"{variant}@{FLAGS.dtype}", f"contrastive@{FLAGS.dtype}"} <= set(flops):
      results.append(common.comparison(
          f"train/{variant}_step_vs_contrastive_step", seconds[f"{variant}@{FLAGS.dtype}"],
          seconds[f"contrastive@{FLAGS.dtype}"], "s/step", 0.5, higher_is_better=False,
          dtype=FLAGS.dtype, **context))
  peak_text = ", ".join(f"{d} {p / 1e9:.1f}" for d, p in peaks.items())
  common.emit(results, f"train throughput: size={FLAGS.size} batch={FLAGS.batch_size} "
              f"length={FLAGS.length} dtype={FLAGS.dtype} matmul peak GFLOP/s: {peak_text}; "
              f"{jax.device_count()} device(s), load {context['load_average']}")


if __name__ == "__main__":
  _define_flags()
  app.run(main)
