r"""How long a checkpoint save stalls training: synchronous against asynchronous saving.

  python bench/save_stall.py --output=docs/results/save_stall

The loop's own pieces (vmsst.training.trainer.Trainer, vmsst.training.checkpointing.make_manager
and save) on a synthetic batch, one process: a model of about 100 M parameters
(--emb_dim, --layers, --vocab_size) trains `--steps` steps and saves every
`--save_every`, once with `make_manager.asynchronous = False` and once with
True, alternating in `--rounds` rounds inside one process, because this
machine's speed swings 20-50 % from minute to minute: only figures measured
side by side are compared. A step is timed to its metrics on the host (the
loop fetches them every step). The stall of a save is the time its step and
the next `--after` steps took beyond the run's median step (the background
write of an asynchronous save competes for the same cores); the blocking
part is the `save` call alone. Writes results.json and README.md to --output
(`--recorded` rewrites README.md from results.json).
"""

import json
import os
import pathlib
import statistics
import sys
import tempfile
import time
from typing import Sequence

from absl import app
from absl import flags

import common

REPO = pathlib.Path(__file__).resolve().parents[1]
FLAGS = flags.FLAGS


def _define_flags() -> None:
  """Under __main__ only: bench scripts are imported side by side by the tests."""
  flags.DEFINE_integer("emb_dim", 512, "NetworkConfig.emb_dim (mlp_dim is 4x).")
  flags.DEFINE_integer("layers", 4, "Encoder and decoder layers.")
  flags.DEFINE_integer("vocab_size", 32000, "Vocabulary (the embedding table's rows).")
  flags.DEFINE_integer("batch_size", 8, "Pairs per step.")
  flags.DEFINE_integer("length", 16, "Tokens per sentence.")
  flags.DEFINE_integer("steps", 18, "Steps per run.")
  flags.DEFINE_integer("save_every", 6, "Steps between saves (the last step saves nothing).")
  flags.DEFINE_integer("after", 2, "Steps after a save counted in its stall.")
  flags.DEFINE_integer("rounds", 2, "Rounds of (synchronous, asynchronous) runs.")
  flags.DEFINE_string("output", str(REPO / "docs" / "results" / "save_stall"),
                      "Directory of results.json and README.md.")
  flags.DEFINE_bool("recorded", False, "Only rewrite README.md from --output's results.json.")


def stalls(step_seconds: Sequence[float], save_steps: Sequence[int], after: int) -> list[float]:
  """Seconds each save added: its step and the next `after` beyond the median clean step.

  Args:
    step_seconds: wall time of steps 1..n (index 0 is step 1), save call included.
    save_steps: the steps that saved.
  """
  touched = {s + k for s in save_steps for k in range(after + 1)}
  clean = [t for i, t in enumerate(step_seconds, 1) if i not in touched and i > 1]
  median = statistics.median(clean)
  return [sum(max(0.0, step_seconds[s + k - 1] - median) for k in range(after + 1)
              if s + k <= len(step_seconds)) for s in save_steps]


def run(trainer, batch, *, asynchronous: bool, directory: str) -> dict:
  """One run's step times and save-call times."""
  import jax  # pylint: disable=import-outside-toplevel
  from vmsst.training import checkpointing  # pylint: disable=import-outside-toplevel
  manager = checkpointing.make_manager(directory, save_interval_steps=FLAGS.save_every,
                                       max_to_keep=2, asynchronous=asynchronous)
  state = trainer.initialize(jax.random.key(0))
  rng = jax.random.key(1)
  steps, calls, saved = [], [], []
  for step in range(1, FLAGS.steps + 1):
    began = time.perf_counter()
    state, metrics = trainer.step(state, batch, rng)
    float(metrics["loss"])  # the loop fetches a scalar every step
    if step % FLAGS.save_every == 0 and step < FLAGS.steps:
      call = time.perf_counter()
      checkpointing.save(manager, step, state, force=True)
      calls.append(time.perf_counter() - call)
      saved.append(step)
    steps.append(time.perf_counter() - began)
  manager.wait_until_finished()
  manager.close()
  each = stalls(steps, saved, FLAGS.after)
  return {"asynchronous": asynchronous, "median_step_s": statistics.median(steps[1:]),
          "save_call_s": statistics.mean(calls), "stall_per_save_s": statistics.mean(each),
          "stalls_s": each, "step_s": steps}


def main(argv: Sequence[str]) -> None:
  del argv
  if FLAGS.recorded:
    record = json.loads((pathlib.Path(FLAGS.output) / "results.json").read_text())
    (pathlib.Path(FLAGS.output) / "README.md").write_text(readme(record))
    return
  import jax  # pylint: disable=import-outside-toplevel
  from vmsst.training import optimizers  # pylint: disable=import-outside-toplevel
  from vmsst.model import partitioning
  from vmsst.training import trainer as trainer_lib  # pylint: disable=import-outside-toplevel
  from vmsst.model.config import NetworkConfig  # pylint: disable=import-outside-toplevel
  from vmsst.objectives import MODELS  # pylint: disable=import-outside-toplevel
  sys.path.insert(0, str(REPO / "bench"))
  from accelerator import synthetic_batch  # pylint: disable=import-outside-toplevel

  cfg = NetworkConfig(vocab_size=FLAGS.vocab_size, emb_dim=FLAGS.emb_dim, num_heads=8,
                      head_dim=FLAGS.emb_dim // 8, mlp_dim=4 * FLAGS.emb_dim,
                      num_encoder_layers=FLAGS.layers, num_language_encoder_layers=1,
                      num_decoder_layers=FLAGS.layers, max_length=FLAGS.length)
  mesh = partitioning.make_mesh(1, 1, devices=jax.devices()[:1])
  model = MODELS["vmsst"](cfg)
  trainer = trainer_lib.Trainer(model, optimizers.adafactor(learning_rate=1e-4), mesh,
                                model.input_shapes(FLAGS.batch_size, FLAGS.length))
  batch = synthetic_batch(FLAGS.batch_size, FLAGS.length, cfg.vocab_size)
  state = trainer.initialize(jax.random.key(0))
  parameters = sum(x.size for x in jax.tree.leaves(state.params))
  state_mb = sum(x.nbytes for x in jax.tree.leaves(state)) / 2**20
  del state
  runs = []
  with tempfile.TemporaryDirectory() as scratch:
    for r in range(FLAGS.rounds):
      for asynchronous in ((False, True) if r % 2 == 0 else (True, False)):
        runs.append(run(trainer, batch, asynchronous=asynchronous,
                        directory=os.path.join(scratch, f"{r}_{asynchronous}")))
        print(f"round {r} asynchronous={asynchronous}: stall per save "
              f"{runs[-1]['stall_per_save_s']:.3f} s, median step "
              f"{runs[-1]['median_step_s']:.3f} s", flush=True)
  summary = {mode: {key: statistics.median(x[key] for x in runs if x["asynchronous"] == flag)
                    for key in ("median_step_s", "save_call_s", "stall_per_save_s")}
             for mode, flag in (("synchronous", False), ("asynchronous", True))}
  summary["stall_ratio_async_over_sync"] = (summary["asynchronous"]["stall_per_save_s"]
                                            / summary["synchronous"]["stall_per_save_s"])
  record = {**common.machine(), "parameters": parameters, "train_state_mb": state_mb,
            "flags": {k: FLAGS[k].value for k in ("emb_dim", "layers", "vocab_size",
                                                  "batch_size", "length", "steps",
                                                  "save_every", "after", "rounds")},
            "summary": summary, "runs": runs}
  output = pathlib.Path(FLAGS.output)
  output.mkdir(parents=True, exist_ok=True)
  (output / "results.json").write_text(json.dumps(record, indent=1) + "\n")
  (output / "README.md").write_text(readme(record))
  print(readme(record))


def readme(record: dict) -> str:
  """The results page: the command, the table, what it means."""
  s, a = record["summary"]["synchronous"], record["summary"]["asynchronous"]
  rows = [f"| {name} | {m['median_step_s']:.3f} | {m['save_call_s']:.3f} | "
          f"{m['stall_per_save_s']:.3f} |" for name, m in (("synchronous", s),
                                                          ("asynchronous", a))]
  return "\n".join([
      "# Save stall: synchronous against asynchronous checkpoints", "",
      "How much longer the steps around a checkpoint save take, with orbax writing the "
      "train state before `save` returns (`make_manager.asynchronous = False`) or in a "
      "background thread after the device-to-host copy (the default). Both in one process, "
      "alternating, so the machine's speed swings hit both alike; compare the ratio.", "",
      "```", "python bench/save_stall.py --output=docs/results/save_stall", "```", "",
      f"A VMSST model of {record['parameters'] / 1e6:.0f} M parameters (train state "
      f"{record['train_state_mb']:.0f} MiB), batch {record['flags']['batch_size']} x "
      f"{record['flags']['length']} tokens, one CPU device on {record['cores']} cores "
      f"(load average {record['load_average']} at the end), a save every "
      f"{record['flags']['save_every']} steps, {record['flags']['rounds']} rounds; medians "
      "over rounds:", "",
      "| saving | median step (s) | `save` call (s) | stall per save (s) |",
      "|---|---|---|---|", *rows, "",
      f"The asynchronous `save` call blocks {a['save_call_s'] / s['save_call_s']:.2f}x as "
      "long as the synchronous one (the device-to-host copy, directory creation and "
      "metadata), and with the background write competing for the cores its stall is "
      f"{record['summary']['stall_ratio_async_over_sync']:.2f}x the synchronous one. The stall is the save step and the next "
      f"{record['flags']['after']} steps beyond the median step; on CPU the background "
      "write shares the cores with the steps, so part of it still shows there; on an "
      "accelerator the steps do not compete with it. Every step and save time is in "
      "`results.json`.", ""])


if __name__ == "__main__":
  _define_flags()
  app.run(main)
