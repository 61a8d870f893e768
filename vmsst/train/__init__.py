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

import sys

from vmsst import cli  # first: `python -m vmsst.train` imports this package before __main__

cli.quiet_startup()  # before TensorFlow and JAX load
if sys.argv[:1] == ["-m"]:  # `python -m vmsst.train` runs this before __main__.py: the run
  cli.check_early(lambda: cli.check_gin_files(sys.argv, required=True))  # before seconds of imports

# pylint: disable=wrong-import-position
import os
import shutil
import signal
import time
from typing import Any, Sequence

import gin
import jax
import optax
import seqio
import tensorflow as tf
import tqdm
from absl import flags
from absl import logging
from clu import metric_writers

from vmsst_tasks import registry
from vmsst import checkpointing
from vmsst import early_stopping as early_stopping_lib
from vmsst import hf_export
from vmsst.encoding import restore
from vmsst import models
from vmsst import param_files
from vmsst import partitioning
from vmsst import teacher_cache
from vmsst import trainer as trainer_lib
from vmsst import gin_configurables  # pylint: disable=unused-import
from vmsst import gin_utils
from vmsst.evaluation import in_training
from vmsst.train import preflight
from vmsst_tasks.input_pipeline import POSITIONS_DIR, save_position, train_iterator

FLAGS = flags.FLAGS
flags.DEFINE_multi_string("gin_file", [], "Gin files, applied in order.")
flags.DEFINE_multi_string("gin_bindings", [], "Gin bindings (also via --gin.X=Y).")
flags.DEFINE_multi_string("gin_search_path", ["."], "Directories gin includes resolve from.")
flags.DEFINE_bool("distributed", False,
                  "Call jax.distributed.initialize() first (multi-host pods; run the same "
                  "command on every host). Alone, JAX detects the peers on TPU pods and "
                  "under SLURM; elsewhere give the three flags below.")
flags.DEFINE_string("coordinator_address", None,
                    "host:port of process 0's coordination service (implies --distributed).")
flags.DEFINE_integer("num_processes", None, "Processes in the job (implies --distributed).")
flags.DEFINE_integer("process_id", None, "This process's index in [0, num_processes) "
                     "(implies --distributed).")
flags.DEFINE_bool("resume_with_changes", False,
                  "Resume MODEL_DIR although settings changed since its config.gin (they are "
                  "listed otherwise, and the run refused); the earlier config.gin is kept as "
                  "config-<step>.gin and model.json records each step range.")


def check_vocabulary(mixture_name: str,
                     model: models.EmbeddingModel) -> seqio.SentencePieceVocabulary:
  """The mixture's vocabulary; NetworkConfig.vocab_size must fit it (preflight.vocabulary_fits).

  preflight.check_start checks VOCAB_PATH before any data; this checks what
  the mixture actually reads (a run may name its vocabulary otherwise).
  """
  vocab = seqio.get_mixture_or_task(mixture_name).output_features["tokens_a"].vocabulary
  if not preflight.vocabulary_fits(vocab.vocab_size, model.network_config.vocab_size):
    raise cli.UserError(preflight.vocabulary_hint(f"of {mixture_name}", vocab.vocab_size,
                                                  model.network_config.vocab_size))
  return vocab


def check_finite(step: int, step_metrics: dict[str, Any], consecutive: int, *,
                 max_skips: int, manager) -> int:
  """Counts a NaN/Inf step; stops after more than `max_skips` in a row.

  Runs after every step (one scalar fetched from the device), so a bad state
  is never checkpointed: without skipping (`max_skips` 0) the first bad step
  raises; with skipping the jitted step has already discarded the update.

  Args:
    step_metrics: the step's device metrics; `nonfinite` is 1.0 for a bad step.
    consecutive: bad steps in a row before this one.
  Returns:
    bad steps in a row including this one (0 after a good step).
  """
  if not float(step_metrics["nonfinite"]):
    return 0
  values = {k: float(v) for k, v in jax.device_get(step_metrics).items()
            if k in ("loss", "grad_norm", "update_norm")}
  if consecutive + 1 > max_skips:
    manager.wait_until_finished()  # an asynchronous save of a good step still commits
    raise FloatingPointError(
        f"non-finite {values} at step {step} ({consecutive + 1} bad steps in a row, "
        f"train.skip_nonfinite_steps = {max_skips}); stopped, the last good checkpoint "
        f"(step {manager.latest_step()}) is kept in {manager.directory}. Lower the learning "
        "rate or check the data, then resume (or raise train.skip_nonfinite_steps).")
  logging.warning("step %d: non-finite %s; update skipped (%d in a row, at most %d)",
                  step, values, consecutive + 1, max_skips)
  return consecutive + 1


def evaluate(evaluator: in_training.Evaluator | Sequence[in_training.Evaluator] | None,
             trainer: trainer_lib.Trainer, params, step: int, writer) -> dict[str, float]:
  """Every evaluator's metrics of `params`, logged under retrieval/ (in_training.merge)."""
  results = in_training.merge(  # side: RetrievalEvaluator's targets go through a side-b tower
      evaluator, lambda tokens, mask, side="a": trainer.encode(params, tokens, mask, side))
  if not results:
    return {}
  writer.write_scalars(step, {f"retrieval/{k}": v for k, v in results.items()})
  logging.info("step %d held-out retrieval accuracy: %s", step,
               {k: round(v, 2) for k, v in results.items()})
  return results


@gin.configurable
def train(*, model: models.EmbeddingModel = gin.REQUIRED, model_dir: str = gin.REQUIRED,
          mixture_name: str = gin.REQUIRED, train_steps: int = gin.REQUIRED,
          batch_size: int = gin.REQUIRED, sequence_length: int = gin.REQUIRED,
          optimizer: optax.GradientTransformation = gin.REQUIRED,
          register_tasks=None,
          evaluator: in_training.Evaluator | Sequence[in_training.Evaluator] | None = None,
          seed: int = 0, log_every: int = 50, eval_every: int = 0,
          init_params: str | None = None, skip_nonfinite_steps: int = 0,
          early_stopping: early_stopping_lib.EarlyStopping | None = None,
          resume_with_changes: bool = False) -> dict[str, Any]:
  """Trains `model` on `mixture_name` for `train_steps`; resumes from model_dir.

  Args:
    model: an EmbeddingModel (objective) instance.
    model_dir: checkpoints, TensorBoard events and config.gin go here.
    mixture_name: seqio task or mixture with PairFeatureConverter features.
    train_steps: total optimizer steps (a resumed run stops at the same total).
    batch_size: global number of translation pairs per step.
    sequence_length: tokens per sentence, EOS included.
    optimizer: optax transformation (gin: @adafactor()).
    register_tasks: callable that registers the seqio tasks (gin-bound); run
      by the teacher stage (vmsst.teacher_cache.fill_stage), which fills the
      teacher cache first when a distillation run's cache lacks vectors.
    evaluator: an `in_training.Evaluator` (or a list: the first keeps its
      metric names, the others' are prefixed by their class) run every
      `eval_every` steps and at the end.
    seed: initialisation, data order, dropout and ELBO noise.
    log_every: steps between metric writes.
    eval_every: steps between evaluations (0: only at the end).
    init_params: a file written by `python -m vmsst.mt5_import` for this
      model (an mT5 checkpoint converted): its tensors replace `seed`'s
      initialisation, the rest keeps it. Read only while model_dir has no
      checkpoint, so a restarted run resumes from its own; a name or shape
      that does not fit the model is an error listing every misfit.
    skip_nonfinite_steps: 0 stops at the first NaN/Inf loss, gradient or
      update (keeping the last good checkpoint); n > 0 discards such a step's
      update inside the jitted step (the batch is skipped, the step counter
      still advances so the data position stays that of the step) and stops
      only after more than n bad steps in a row. Skips are logged and counted
      (`skipped_steps`).
    early_stopping: stops before `train_steps` once the evaluator's watched
      metrics stop falling for `patience` evaluations (vmsst/early_stopping.py);
      needs `evaluator` and `eval_every` (the epoch).
    resume_with_changes: resume model_dir although bindings changed since its
      config.gin (preflight.check_resume; `--resume_with_changes`).
  Returns:
    {"start_step", "step", "final_metrics", "loss_history" [(step, loss)],
     "retrieval", "params", "skipped_steps"} for callers and tests.
  Raises:
    cli.UserError: a mistake found before any state or data (preflight.check_start).
    checkpointing.Preempted: SIGTERM or Ctrl-C arrived; the current step
      was saved (a SystemExit with status checkpointing.PREEMPTED_EXIT_CODE,
      or INTERRUPTED_EXIT_CODE after Ctrl-C).
    checkpointing.IncompatibleCheckpointError: model_dir holds another
      configuration's checkpoint.
    checkpointing.NoUsableCheckpointError: no checkpoint in model_dir restores.
    FloatingPointError: non-finite steps beyond `skip_nonfinite_steps`.
  """
  # Stage 1: mesh.
  mesh = partitioning.make_mesh()
  logging.info("mesh %s over %d processes", dict(mesh.shape), jax.process_count())
  changes = preflight.check_start(model=model, model_dir=model_dir, batch_size=batch_size,
                                  sequence_length=sequence_length, mesh=mesh,
                                  process_count=jax.process_count(),
                                  resume_with_changes=resume_with_changes)

  # Stage 2: model state (initialised in its shards or restored).
  input_shapes = model.input_shapes(batch_size, sequence_length)
  trainer = trainer_lib.Trainer(model, optimizer, mesh, input_shapes,
                                skip_nonfinite=skip_nonfinite_steps > 0)
  manager = checkpointing.make_manager(model_dir)
  state = checkpointing.restore_latest(manager, trainer.abstract_state)
  if state is None:
    state = trainer.initialize(jax.random.key(seed))
    if init_params:
      logging.info("starting from the parameters in %s", init_params)
      state = trainer.with_params(state, hf_export.load_params(init_params, state.params),
                                  jax.random.key(seed))
  elif init_params:
    logging.info("init_params %s ignored: resuming from the checkpoint", init_params)
  start_step = int(state.step)
  if early_stopping is not None and early_stopping.resume(evaluator, eval_every):
    return _nothing_to_do(start_step, start_step, state)
  if start_step >= train_steps:
    return _nothing_to_do(start_step, train_steps, state)
  if jax.process_index() == 0:
    if changes:
      logging.warning("resuming at step %d with changed settings: %s", start_step,
                      "; ".join(changes))
    ranges = preflight.step_ranges(model_dir, start_step, sequence_length, changed=bool(changes))
    gin_utils.write_operative_config(model_dir, restore.CONFIG_FILE)
    restore.write_model_json(model_dir, model, sequence_length, step_ranges=ranges)

  # Stage 3: teacher vectors, then data, positioned at the restored step.
  # Registration and the evaluators only read a distillation teacher's
  # vectors; those its cache lacks are encoded here first, once, logged as
  # "filling the teacher cache ...: N sentences ... to encode" (the same step
  # as `python -m vmsst.teacher_cache`; a filled cache never loads the teacher).
  teacher_cache.fill_stage(register_tasks, in_training.as_list(evaluator))
  registry.report_data_counts(mixture_name,  # read = kept + skipped, MODEL_DIR/data_counts.json
                              model_dir=model_dir if jax.process_index() == 0 else None)
  registry.check_training_data(mixture_name)  # an empty task: one error line, not a JAX traceback
  _copy_vocabulary(model_dir, check_vocabulary(mixture_name, model))
  positions = os.path.join(model_dir, POSITIONS_DIR)  # the stream's position at each checkpoint
  batches = train_iterator(mixture_name, batch_size=batch_size,
                           sequence_length=sequence_length, seed=seed, start_step=start_step,
                           positions=positions)

  # Stage 4: the loop.
  writer = metric_writers.create_default_writer(
      os.path.join(model_dir, "tensorboard"), just_logging=jax.process_index() > 0)
  rng = jax.random.key(seed + 1)
  learning_rate = _learning_rate_schedule()
  metrics, history = {}, []
  progress = tqdm.tqdm(total=train_steps, initial=start_step, desc="train", unit="step",
                       disable=cli.hide_progress(jax.process_index() > 0),
                       dynamic_ncols=True)
  started = time.time()
  skipped = consecutive_bad = 0
  with checkpointing.PreemptionWatcher() as preemption:
    for step in range(start_step + 1, train_steps + 1):
      batch = next(batches, None)
      if batch is None:  # a stream that repeats forever ends only if it was empty
        raise cli.UserError(f"the training stream of {mixture_name} produced no batch at step "
                            f"{step}: every example was skipped (data_counts.json in "
                            f"{model_dir} has the counts); check the input or its filters.")
      state, step_metrics = trainer.step(state, batch, rng)
      consecutive_bad = check_finite(step, step_metrics, consecutive_bad,
                                     max_skips=skip_nonfinite_steps, manager=manager)
      skipped += consecutive_bad > 0
      saving = step == train_steps or manager.should_save(step)
      if step % log_every == 0 or saving:
        metrics = {k: float(v) for k, v in jax.device_get(step_metrics).items()}
        metrics["skipped_steps"] = skipped
        metrics["examples_per_second"] = (batch_size * (step - start_step)
                                          / (time.time() - started))
        if learning_rate is not None:  # the rate of this step's update (optax counts from 0)
          metrics["learning_rate"] = float(learning_rate(step - 1))
        writer.write_scalars(step, metrics)
        history.append((step, metrics["loss"]))
      # Every step: check_finite has already waited for this step's metrics.
      progress.set_postfix(loss=f"{float(step_metrics['loss']):.3f}", refresh=False)
      progress.update(1)
      if saving:
        checkpointing.save(manager, step, state, force=True)
        save_position(positions, step, batches, keep=manager.all_steps())
      if step < train_steps and preemption.reached(step, manager):
        if not saving:
          save_position(positions, step, batches, keep=manager.all_steps())
        _save_and_exit(manager, step, state, saved=saving, writer=writer, progress=progress,
                       signum=preemption.signum)
      if eval_every and step % eval_every == 0 and step != train_steps:
        results = evaluate(evaluator, trainer, state.params, step, writer)
        if early_stopping is not None and early_stopping.observe(step, results, state.params):
          state = early_stopping.save_final(manager, step, state)
          break
  progress.close()
  retrieval = evaluate(evaluator, trainer, state.params, int(state.step), writer)
  manager.wait_until_finished()
  writer.flush()
  if skipped:
    logging.warning("%d of %d steps had a non-finite loss/gradient and were skipped",
                    skipped, train_steps - start_step)
  return {"start_step": start_step, "step": int(state.step), "final_metrics": metrics,
          "loss_history": history, "retrieval": retrieval, "params": state.params,
          "skipped_steps": skipped}


def _learning_rate_schedule():
  """The optimizer's learning rate as a function of the step, from gin (None: not found).

  For TensorBoard only: reads `<optimizer>.learning_rate` of the bound
  `train.optimizer` (a schedule such as @inverse_sqrt_schedule() or a float);
  schedules are pure, so a second instance gives the optimizer's values.
  """
  try:
    optimizer = gin.query_parameter("train.optimizer")
    value = gin.query_parameter(f"{optimizer.selector}.learning_rate")
  except (ValueError, AttributeError):
    return None
  if isinstance(value, (int, float)):
    return lambda step: value
  if isinstance(value, gin.config.ConfigurableReference) and value.evaluate:
    return value.scoped_configurable_fn()
  return None


def _nothing_to_do(step: int, train_steps: int, state) -> dict[str, Any]:
  """A rerun asking for no more steps than the checkpoint holds: leaves MODEL_DIR as it was.

  Rewriting config.gin with the smaller TRAIN_STEPS would make the directory
  misdescribe its model, so neither it nor anything else is written.
  """
  logging.warning("already at step %d ≥ TRAIN_STEPS (%d), nothing to do; raise TRAIN_STEPS "
                  "to train on", step, train_steps)
  return {"start_step": step, "step": step, "final_metrics": {}, "loss_history": [],
          "retrieval": {}, "params": state.params, "skipped_steps": 0}


def _save_and_exit(manager, step: int, state, *, saved: bool, writer, progress,
                   signum: int | None) -> None:
  """After SIGTERM or Ctrl-C: the current step on disk (waited for), then Preempted."""
  if not saved:
    checkpointing.save(manager, step, state, force=True)
  manager.wait_until_finished()
  writer.flush()
  progress.close()
  preempted = checkpointing.Preempted(step, os.fspath(manager.directory),
                                      signum or signal.SIGTERM)  # None: JAX's multi-host service
  logging.warning("%s", preempted)
  raise preempted


def _copy_vocabulary(model_dir: str, vocab: seqio.SentencePieceVocabulary) -> None:
  """MODEL_DIR/spm.model: the directory alone restores, evaluates and exports."""
  if jax.process_index() == 0:
    tf.io.gfile.copy(vocab.sentencepiece_model_file,
                     os.path.join(model_dir, restore.VOCABULARY_FILE), overwrite=True)


def initialize_distributed(*, coordinator_address: str | None = None,
                           num_processes: int | None = None,
                           process_id: int | None = None) -> None:
  """Joins the multi-controller job: every process runs this same program.

  With no arguments JAX detects the job itself (TPU pod metadata, SLURM
  variables); on other clusters, or several processes on one machine, give
  all three. CPU processes exchange collectives over gloo (the setting only
  concerns the CPU client, so it is harmless on TPU and GPU).
  """
  given = [coordinator_address, num_processes, process_id]
  if any(v is not None for v in given) and any(v is None for v in given):
    raise ValueError("give all of --coordinator_address, --num_processes and --process_id, "
                     "or none of them (auto-detection on TPU pods and SLURM).")
  jax.config.update("jax_cpu_collectives_implementation", "gloo")
  jax.distributed.initialize(coordinator_address=coordinator_address,
                             num_processes=num_processes, process_id=process_id)
  logging.info("process %d of %d, %d local / %d global devices", jax.process_index(),
               jax.process_count(), jax.local_device_count(), jax.device_count())


def _remove_if_unused(model_dir: str, fresh: bool) -> None:
  """A run that failed before its first checkpoint leaves no MODEL_DIR it created."""
  if (fresh and jax.process_index() == 0 and "://" not in model_dir
      and not preflight.checkpoint_steps(model_dir)):
    shutil.rmtree(model_dir, ignore_errors=True)


def main(argv: Sequence[str]) -> None:
  del argv
  checkpointing.quiet_orbax_logs()
  explicit = [FLAGS.coordinator_address, FLAGS.num_processes, FLAGS.process_id]
  if FLAGS.distributed or any(v is not None for v in explicit):
    initialize_distributed(coordinator_address=FLAGS.coordinator_address,
                           num_processes=FLAGS.num_processes, process_id=FLAGS.process_id)
  gin_utils.parse_gin(FLAGS.gin_file, FLAGS.gin_bindings, FLAGS.gin_search_path)
  preflight.check_paths()
  model_dir = gin.query_parameter("train.model_dir")
  model_dir = model_dir if isinstance(model_dir, str) else gin.query_parameter("%MODEL_DIR")
  fresh = not os.path.exists(model_dir)
  try:
    result = train(resume_with_changes=FLAGS.resume_with_changes)
  except (checkpointing.IncompatibleCheckpointError, checkpointing.NoUsableCheckpointError) as e:
    _remove_if_unused(model_dir, fresh)
    raise cli.UserError(str(e)) from e
  except BaseException:
    _remove_if_unused(model_dir, fresh)
    raise
  if jax.process_index() == 0 and result["retrieval"]:
    print("Held-out retrieval accuracy (%, mean of both directions):")
    for name, value in sorted(result["retrieval"].items()):
      print(f"  {name:40s} {value:6.2f}")
