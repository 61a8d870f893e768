r"""The one training loop: mesh → data → model state → loop (train, log, save, eval).

  python -m vmsst.train --gin_file=gin/runs/vmsst_cpu.gin \
      --gin.MODEL_DIR="'runs/vmsst_cpu'" --gin.TRAIN_STEPS=2000

`--gin.X=Y` binds gin macro or parameter X to Y (as in t5x). Objectives plug
in through gin (`train.model = @VMSST()`); nothing here knows which one runs.
The operative gin config is written to MODEL_DIR/config.gin.

A package so that `python -m vmsst.train` runs `__main__.py`, which imports
this module once: gin files can `import vmsst.train` without registering the
configurables and flags a second time under `__main__`.
"""

import os
import re
import time
from typing import Any, Sequence

import gin
import jax
import numpy as np
import optax
import seqio
import tensorflow as tf
import tqdm
from absl import flags
from absl import logging
from clu import metric_writers

from vmsst import checkpointing
from vmsst import inference
from vmsst import models
from vmsst import param_files
from vmsst import partitioning
from vmsst import trainer as trainer_lib
from vmsst import gin_configurables  # pylint: disable=unused-import
from vmsst.feature_converters import PairFeatureConverter
from vmsst.retrieval import RetrievalEvaluator

FLAGS = flags.FLAGS
flags.DEFINE_multi_string("gin_file", [], "Gin files, applied in order.")
flags.DEFINE_multi_string("gin_bindings", [], "Gin bindings (also via --gin.X=Y).")
flags.DEFINE_multi_string("gin_search_path", ["."], "Directories gin includes resolve from.")
flags.DEFINE_bool("distributed", False,
                  "Call jax.distributed.initialize() first (multi-host pods; run the same "
                  "command on every host).")


def train_iterator(mixture_name: str, *, batch_size: int, sequence_length: int, seed: int,
                   start_step: int):
  """Host-local numpy batches of this process's shard, from `start_step` on.

  The pipeline is deterministic for a seed, so skipping `start_step` batches
  resumes the stream where the checkpoint left it.
  """
  if batch_size % jax.process_count():
    raise ValueError(f"batch size {batch_size} must divide over {jax.process_count()} hosts")
  dataset = seqio.get_dataset(
      mixture_name,
      task_feature_lengths={"tokens_a": sequence_length, "tokens_b": sequence_length},
      feature_converter=PairFeatureConverter(pack=False),
      dataset_split="train", shuffle=True, num_epochs=None, seed=seed, verbose=False,
      shard_info=seqio.ShardInfo(index=jax.process_index(), num_shards=jax.process_count()))
  dataset = dataset.batch(batch_size // jax.process_count(), drop_remainder=True)
  return dataset.skip(start_step).prefetch(2).as_numpy_iterator()


def check_vocabulary(mixture_name: str,
                     model: models.EmbeddingModel) -> seqio.SentencePieceVocabulary:
  """The mixture's vocabulary, whose size must be the network's."""
  vocab = seqio.get_mixture_or_task(mixture_name).output_features["tokens_a"].vocabulary
  if vocab.vocab_size != model.network_config.vocab_size:
    raise ValueError(
        f"the vocabulary of {mixture_name} has {vocab.vocab_size} pieces but "
        f"NetworkConfig.vocab_size is {model.network_config.vocab_size}; set VOCAB_SIZE in "
        "the gin run file to the SentencePiece model's size (or retrain the vocabulary).")
  return vocab


def check_finite(step: int, metrics: dict[str, float], model_dir: str) -> None:
  """Stops on a NaN/Inf loss or update, before the bad state can be checkpointed."""
  bad = {k: metrics[k] for k in ("loss", "grad_norm", "update_norm")
         if k in metrics and not np.isfinite(metrics[k])}
  if bad:
    raise FloatingPointError(
        f"{bad} at step {step}; the last good checkpoint is kept in "
        f"{model_dir}/checkpoints. Lower the learning rate or check the data, then resume.")


def evaluate(evaluator: RetrievalEvaluator | None, trainer: trainer_lib.Trainer,
             params, step: int, writer) -> dict[str, float]:
  if evaluator is None:
    return {}
  results = evaluator.run(lambda tokens, mask: trainer.encode(params, tokens, mask))
  writer.write_scalars(step, {f"retrieval/{k}": v for k, v in results.items()})
  logging.info("step %d held-out retrieval accuracy: %s", step,
               {k: round(v, 2) for k, v in results.items()})
  return results


@gin.configurable
def train(*, model: models.EmbeddingModel = gin.REQUIRED, model_dir: str = gin.REQUIRED,
          mixture_name: str = gin.REQUIRED, train_steps: int = gin.REQUIRED,
          batch_size: int = gin.REQUIRED, sequence_length: int = gin.REQUIRED,
          optimizer: optax.GradientTransformation = gin.REQUIRED,
          register_tasks=None, evaluator: RetrievalEvaluator | None = None,
          seed: int = 0, log_every: int = 50, eval_every: int = 0,
          init_params: str | None = None) -> dict[str, Any]:
  """Trains `model` on `mixture_name` for `train_steps`; resumes from model_dir.

  Args:
    model: an EmbeddingModel (objective) instance.
    model_dir: checkpoints, TensorBoard events and config.gin go here.
    mixture_name: seqio task or mixture with PairFeatureConverter features.
    train_steps: total optimizer steps (a resumed run stops at the same total).
    batch_size: global number of translation pairs per step.
    sequence_length: tokens per sentence, EOS included.
    optimizer: optax transformation (gin: @adafactor()).
    register_tasks: callable that registers the seqio tasks (gin-bound).
    evaluator: held-out retrieval evaluator run every `eval_every` steps and
      at the end.
    seed: initialisation, data order, dropout and ELBO noise.
    log_every: steps between metric writes.
    eval_every: steps between evaluations (0: only at the end).
    init_params: a file written by `python -m vmsst.mt5_import` for this
      model (an mT5 checkpoint converted): its tensors replace `seed`'s
      initialisation, the rest keeps it. Read only while model_dir has no
      checkpoint, so a restarted run resumes from its own; a name or shape
      that does not fit the model is an error listing every misfit.
  Returns:
    {"start_step", "step", "final_metrics", "loss_history" [(step, loss)],
     "retrieval", "params"} for callers and tests.
  """
  # Stage 1: mesh.
  mesh = partitioning.make_mesh()
  logging.info("mesh %s over %d processes", dict(mesh.shape), jax.process_count())

  # Stage 2: model state (initialised in its shards or restored).
  input_shapes = model.input_shapes(batch_size, sequence_length)
  trainer = trainer_lib.Trainer(model, optimizer, mesh, input_shapes)
  manager = checkpointing.make_manager(model_dir)
  state = checkpointing.restore_latest(manager, trainer.abstract_state)
  if state is None:
    state = trainer.initialize(jax.random.key(seed))
    if init_params:
      logging.info("starting from the parameters in %s", init_params)
      state = trainer.with_params(state, param_files.load_params(init_params, state.params),
                                  jax.random.key(seed))
  elif init_params:
    logging.info("init_params %s ignored: resuming from the checkpoint", init_params)
  start_step = int(state.step)
  _write_operative_config(model_dir)

  # Stage 3: data, positioned at the restored step.
  if register_tasks is not None:
    register_tasks()
  _copy_vocabulary(model_dir, check_vocabulary(mixture_name, model))
  batches = train_iterator(mixture_name, batch_size=batch_size,
                           sequence_length=sequence_length, seed=seed, start_step=start_step)

  # Stage 4: the loop.
  writer = metric_writers.create_default_writer(
      os.path.join(model_dir, "tensorboard"), just_logging=jax.process_index() > 0)
  rng = jax.random.key(seed + 1)
  metrics, history = {}, []
  progress = tqdm.tqdm(total=train_steps, initial=start_step, desc="train", unit="step",
                       disable=jax.process_index() > 0, dynamic_ncols=True)
  started = time.time()
  for step in range(start_step + 1, train_steps + 1):
    state, step_metrics = trainer.step(state, next(batches), rng)
    saving = step == train_steps or manager.should_save(step)
    if step % log_every == 0 or saving:  # a state is checked before it is saved
      metrics = {k: float(v) for k, v in jax.device_get(step_metrics).items()}
      check_finite(step, metrics, model_dir)
      metrics["examples_per_second"] = batch_size * (step - start_step) / (time.time() - started)
      writer.write_scalars(step, metrics)
      history.append((step, metrics["loss"]))
      progress.set_postfix(loss=f"{metrics['loss']:.3f}")
    progress.update(1)
    if saving:
      checkpointing.save(manager, step, state, force=True)
    if eval_every and step % eval_every == 0 and step != train_steps:
      evaluate(evaluator, trainer, state.params, step, writer)
  progress.close()
  retrieval = evaluate(evaluator, trainer, state.params, int(state.step), writer)
  manager.wait_until_finished()
  writer.flush()
  return {"start_step": start_step, "step": int(state.step), "final_metrics": metrics,
          "loss_history": history, "retrieval": retrieval, "params": state.params}


def _copy_vocabulary(model_dir: str, vocab: seqio.SentencePieceVocabulary) -> None:
  """MODEL_DIR/spm.model: the directory alone restores, evaluates and exports."""
  if jax.process_index() == 0:
    tf.io.gfile.copy(vocab.sentencepiece_model_file,
                     os.path.join(model_dir, inference.VOCABULARY_FILE), overwrite=True)


def _write_operative_config(model_dir: str) -> None:
  if jax.process_index() == 0:
    os.makedirs(model_dir, exist_ok=True)
    with open(os.path.join(model_dir, "config.gin"), "w") as f:
      f.write(gin.config_str())


def rewrite_gin_args(argv: Sequence[str]) -> list[str]:
  """`--gin.X=Y` -> `--gin_bindings=X = Y` (t5x's command-line convention)."""
  pattern = re.compile(r"^--gin\.([^=]+)=(.*)$", re.S)
  return [f"--gin_bindings={m.group(1)} = {m.group(2)}" if (m := pattern.match(a)) else a
          for a in argv]


def parse_gin(gin_files: Sequence[str], bindings: Sequence[str],
              search_paths: Sequence[str] = (".",)) -> None:
  """Parses gin files and bindings; REQUIRED macros left unset fail here."""
  for path in search_paths:
    gin.add_config_file_search_path(path)
  gin.parse_config_files_and_bindings(gin_files, bindings, finalize_config=False)


def main(argv: Sequence[str]) -> None:
  del argv
  checkpointing.quiet_orbax_logs()
  if FLAGS.distributed:
    jax.distributed.initialize()
  parse_gin(FLAGS.gin_file, FLAGS.gin_bindings, FLAGS.gin_search_path)
  result = train()
  if jax.process_index() == 0 and result["retrieval"]:
    print("Held-out retrieval accuracy (%, mean of both directions):")
    for name, value in sorted(result["retrieval"].items()):
      print(f"  {name:40s} {value:6.2f}")
