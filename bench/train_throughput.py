r"""Training throughput: examples/s and MFU per objective, and the sentence-transformers peer.

  .venv/bin/python bench/train_throughput.py [--size=cpu6] [--batch_size=128] [--length=32] \
      [--rounds=3] [--steps=1] [--quick]

Every objective's compiled train step (vmsst.trainer.Trainer: jit with
shardings, donated state) runs on one fixed random batch; the peer is the
same contrastive model in sentence-transformers on PyTorch CPU (BERT layers
of the same depth, d, heads, MLP width, vocabulary and length, mean pooling,
MultipleNegativesRankingLoss, AdamW), fed the same token ids (tokenization
is excluded on both sides). All timings are interleaved in rounds (ours,
peer, ours, ...) and the median is kept, so a burst of load from other
processes hits both sides. MFU = XLA's FLOP count of the compiled step /
step time / the f32 matmul peak measured in this process. The optimizer is
AdamW on both sides (its update is < 0.1% of a step's FLOPs).

Comparisons (JSON lines, bench/common.py):
  train/contrastive_vs_sentence_transformers  examples/s, target 1.5
  train/<objective>/mfu                       achieved vs peak GFLOP/s, target 0.5
  train/vmsst_step_vs_contrastive_step        seconds per step, target 0.5 (<= 2x)
"""

import time

import jax
import numpy as np
from absl import app
from absl import flags

import common
from vmsst import optimizers
from vmsst import partitioning
from vmsst import trainer as trainer_lib
from vmsst.config import NetworkConfig
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
  trainer = trainer_lib.Trainer(MODELS[name](cfg, **options), optimizers.adamw(
      learning_rate=1e-4), partitioning.make_mesh(), shapes)
  rng = jax.random.key(0)
  flops = trainer.compile_step(rng).cost_analysis()["flops"]
  state = {"state": trainer.initialize(rng)}
  batch = trainer.global_batch(batch)

  def run() -> float:
    start = time.perf_counter()
    for _ in range(steps):
      state["state"], metrics = trainer.step(state["state"], batch, rng)
    jax.block_until_ready(metrics)
    return (time.perf_counter() - start) / steps

  run()  # compile and warm up
  return flops, run


def peer(cfg: NetworkConfig, batch: dict[str, np.ndarray], dropout: float):
  """A function running FLAGS.steps sentence-transformers MNRL steps; seconds per step."""
  import torch  # pylint: disable=import-outside-toplevel
  import peers  # pylint: disable=import-outside-toplevel
  from sentence_transformers.sentence_transformer import losses  # pylint: disable=import-outside-toplevel
  model = peers.sentence_transformer(cfg, None, max_length=FLAGS.length, dropout=dropout)
  model.train()
  loss_fn = losses.MultipleNegativesRankingLoss(model)
  optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
  features = [{"input_ids": torch.from_numpy(batch[f"tokens_{s}"]).long(),
               "attention_mask": torch.from_numpy(batch[f"mask_{s}"]).long()} for s in "ab"]

  def run() -> float:
    start = time.perf_counter()
    for _ in range(FLAGS.steps):
      optimizer.zero_grad()
      loss = loss_fn(features, None)
      loss.backward()
      optimizer.step()
    return (time.perf_counter() - start) / FLAGS.steps

  run()  # warm up
  return run


def main(argv) -> None:
  del argv
  if FLAGS.quick:
    FLAGS.size, FLAGS.batch_size, FLAGS.length, FLAGS.rounds = "smoke", 8, 8, 1
    FLAGS.objectives = ["contrastive"]
  cfg = SIZES[FLAGS.size]
  context = {"size": FLAGS.size, "batch_size": FLAGS.batch_size, "length": FLAGS.length,
             "devices": jax.device_count(), **common.machine()}
  batch = random_batch(FLAGS.batch_size, FLAGS.length, cfg.vocab_size)
  flops, runs = {}, {}
  for name in FLAGS.objectives:
    flops[name], runs[name] = ours(name, cfg, batch, steps=FLAGS.steps,
                                   queue_size=FLAGS.queue_size)
    print(f"  compiled {name}", flush=True)
  with_peer = FLAGS.peer and common.have_sentence_transformers()
  if FLAGS.peer and not with_peer:
    print(common.PEER_MISSING)
  if with_peer:  # the paper's Contrastive dropout (gin/models/contrastive.gin)
    runs["sentence_transformers"] = peer(cfg, batch, dropout=0.1)
  peak = common.matmul_peak_flops()
  seconds = common.interleaved(runs, FLAGS.rounds)
  peak = (peak + common.matmul_peak_flops()) / 2  # before and after: load drifts
  results = []
  for name in FLAGS.objectives:
    achieved = flops[name] / seconds[name]
    results.append(common.comparison(
        f"train/{name}/mfu", achieved / 1e9, peak / 1e9, "GFLOP/s", 0.5,
        examples_per_second=FLAGS.batch_size / seconds[name],
        seconds_per_step=seconds[name], step_gflops=flops[name] / 1e9, **context))
  if with_peer and "contrastive" in flops:
    st = seconds["sentence_transformers"]
    results.append(common.comparison(
        "train/contrastive_vs_sentence_transformers", FLAGS.batch_size / seconds["contrastive"],
        FLAGS.batch_size / st, "examples/s", 1.5,
        peer_mfu=flops["contrastive"] / st / peak, **context))
  if {"vmsst", "contrastive"} <= set(flops):
    results.append(common.comparison(
        "train/vmsst_step_vs_contrastive_step", seconds["vmsst"], seconds["contrastive"],
        "s/step", 0.5, higher_is_better=False, **context))
  common.emit(results, f"train throughput: size={FLAGS.size} batch={FLAGS.batch_size} "
              f"length={FLAGS.length} f32 matmul peak={peak / 1e9:.1f} GFLOP/s, "
              f"{jax.device_count()} device(s), load {context['load_average']}")


if __name__ == "__main__":
  _define_flags()
  app.run(main)
