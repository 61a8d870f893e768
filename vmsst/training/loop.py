r"""The one training loop: mesh → model state → teacher vectors → data → loop (log, save, eval).

`train` is gin-configurable (`train.model = @VMSST()`, `train.mixture_name`, ...):
objectives plug in through gin and nothing here knows which one runs. It
writes the operative gin config to MODEL_DIR/config.gin, whose bindings name
this configurable `train` (a resume and `vmsst.compare` read them back:
importing this module registers it).

The command around it is `python -m vmsst.train` (vmsst/train.py:
flags in flags.py, joining a multi-host job in distributed.py, gin parsing
in configurables.py); the host data iterator is vmsst_tasks.pipeline.input_pipeline.
"""

from vmsst.base import cli
from vmsst.base import console

console.quiet_imports()  # before TensorFlow and JAX load, for the Python API too

# pylint: disable=wrong-import-position
import dataclasses
import os
import signal
import time
from typing import Any, Iterator, Sequence

import jax
import optax
import tqdm
from absl import logging

# No TensorFlow or seqio here: a run on a pre-tokenized stream (train.pretokenized)
# needs neither (an accelerator image); the seqio path imports them in stage 3.
from vmsst.base.gin_utils import gin
from vmsst.training import checkpointing
from vmsst.training import early_stopping as early_stopping_lib
from vmsst.encoding import restore
from vmsst.model import initial_weights
from vmsst.model import models
from vmsst.model import partitioning
from vmsst.teachers import cache as teacher_cache
from vmsst.training import trainer as trainer_lib
from vmsst.evaluation import in_training
from vmsst.training import distributed
from vmsst.training import goodput as goodput_lib
from vmsst.training import preflight
from vmsst.training import scalar_writer
from vmsst.base import run_directory
from vmsst.base import sentencepiece_vocabulary
from vmsst_tasks.pipeline import input_pipeline
from vmsst_tasks.pipeline.input_pipeline import train_iterator


def check_vocabulary(mixture_name: str, model: models.EmbeddingModel,
                     pretokenized: str | None = None):
  """The mixture's vocabulary; NetworkConfig.vocab_size must fit it (preflight.vocabulary_fits).

  preflight.check_start checks VOCAB_PATH before any data; this checks what
  the mixture actually reads (a run may name its vocabulary otherwise): the
  registered task's, or the one written beside a pre-tokenized stream.
  """
  if pretokenized:
    vocab = sentencepiece_vocabulary.get_vocabulary(run_directory.of(pretokenized).vocabulary)
    where = f"of {mixture_name} in {pretokenized}"
  else:
    import seqio  # pylint: disable=import-outside-toplevel
    vocab = seqio.get_mixture_or_task(mixture_name).output_features["tokens_a"].vocabulary
    where = f"of {mixture_name}"
  if not preflight.vocabulary_fits(vocab.vocab_size, model.network_config.vocab_size):
    raise cli.UserError(preflight.vocabulary_hint(where, vocab.vocab_size,
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
          resume_with_changes: bool = False, pretokenized: str | None = None,
          microbatches: int = 1) -> dict[str, Any]:
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
      by the teacher stage (vmsst.teachers.cache.fill_stage), which fills the
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
      metrics stop falling for `patience` evaluations (vmsst/training/early_stopping.py);
      needs `evaluator` and `eval_every` (the epoch).
    resume_with_changes: resume model_dir although bindings changed since its
      config.gin (preflight.check_resume; `--resume_with_changes`).
    pretokenized: a directory written by `python -m vmsst.pretokenize`
      for this run: its stream (the same batches for the seed) is read from
      there instead of through seqio, registering nothing; neither TensorFlow
      nor seqio is imported (an accelerator image).
    microbatches: N > 1 makes each optimizer update from N microbatches of
      batch_size / N pairs, their gradients accumulated under jit
      (trainer.train_step): the update of N = 1 with the activations of a
      microbatch (plus a float32 gradient accumulator). Only for objectives whose loss is a mean over pairs
      (VMSST, BiTranslation, Distillation); in-batch-negative objectives are
      refused (use Contrastive.gradient_cache_chunk). Steps, schedules, KL
      annealing, logs, checkpoints and the data position count optimizer
      updates; logged metrics are means over the microbatches.
  Returns:
    {"start_step", "step", "final_metrics", "loss_history" [(step, loss)],
     "retrieval", "params", "skipped_steps"} for callers and tests.
  Raises:
    cli.UserError: a mistake found before any state or data (preflight.check_start).
    checkpointing.Preempted: SIGTERM or Ctrl-C arrived; the current step
      was saved (a SystemExit with status checkpointing.PREEMPTED_EXIT_CODE,
      or cli.INTERRUPTED_EXIT_CODE after Ctrl-C).
    checkpointing.IncompatibleCheckpointError: model_dir holds another
      configuration's checkpoint.
    checkpointing.NoUsableCheckpointError: no checkpoint in model_dir restores.
    FloatingPointError: non-finite steps beyond `skip_nonfinite_steps`.
  """
  goodput = goodput_lib.make_goodput(process_index=jax.process_index(),
                                     process_count=jax.process_count())  # the clock starts
  found = run_directory.read(model_dir)  # what earlier runs left there, read once
  mesh, changes = _check_start(model, found, batch_size=batch_size,
                               sequence_length=sequence_length, microbatches=microbatches,
                               resume_with_changes=resume_with_changes)
  run, state = _model_state(model, optimizer, mesh, found, goodput, batch_size=batch_size,
                            sequence_length=sequence_length, seed=seed, init_params=init_params,
                            skip_nonfinite=skip_nonfinite_steps > 0, microbatches=microbatches)
  if early_stopping is not None and early_stopping.resume(evaluator, eval_every):
    return _nothing_to_do(run.start_step, run.start_step, state)
  if run.start_step >= train_steps:
    return _nothing_to_do(run.start_step, train_steps, state)
  batches, data = _data(run, model, register_tasks, evaluator, mixture_name, pretokenized,
                        batch_size=batch_size, sequence_length=sequence_length, seed=seed)
  _describe_run(run, found, model, sequence_length, data, changes=changes)
  state, logged = _steps(run, state, batches, mixture_name=mixture_name, seed=seed,
                         train_steps=train_steps, batch_size=batch_size, log_every=log_every,
                         eval_every=eval_every, evaluator=evaluator,
                         early_stopping=early_stopping, max_skips=skip_nonfinite_steps)
  return _finish(run, state, logged, evaluator, steps_asked=train_steps - run.start_step)


@dataclasses.dataclass
class _Run:
  """What the stages share: the run directory, the step and its keepers, the clock."""
  paths: run_directory.Paths  # every stage reads and writes the directory through it
  goodput: goodput_lib.Goodput
  trainer: trainer_lib.Trainer
  manager: Any  # orbax's CheckpointManager over paths.checkpoints
  start_step: int
  previous_step: int | None  # the furthest step an earlier run reached: steps up to it are redone
  writer: Any = None  # TensorBoard's, once the loop starts (a rerun with nothing to do writes none)


@dataclasses.dataclass(frozen=True)
class _DataRecords:
  """What the data stage leaves for the run directory: its counts and its vocabulary."""
  counts: dict[str, Any] | None  # read / kept / skipped (None: a stream written without them)
  vocabulary: str  # the SentencePiece file the stream was tokenized with


@dataclasses.dataclass
class _Logged:
  """What the loop has logged: the last metrics, (step, loss) pairs, skipped steps."""
  step: int
  metrics: dict[str, float] = dataclasses.field(default_factory=dict)
  history: list[tuple[int, float]] = dataclasses.field(default_factory=list)
  skipped: int = 0


def _check_start(model: models.EmbeddingModel, found: run_directory.Found, *, batch_size: int,
                 sequence_length: int, microbatches: int, resume_with_changes: bool):
  """Stage 1: the mesh, and the run's settings checked against it and MODEL_DIR before any
  state or data (preflight.check_start); (mesh, the settings a resume changes)."""
  mesh = partitioning.make_mesh()
  logging.info("mesh %s over %d processes", dict(mesh.shape), jax.process_count())
  changes = preflight.check_start(model=model, found=found, batch_size=batch_size,
                                  sequence_length=sequence_length, mesh=mesh,
                                  process_count=jax.process_count(),
                                  resume_with_changes=resume_with_changes,
                                  microbatches=microbatches)
  return mesh, changes


def _model_state(model: models.EmbeddingModel, optimizer, mesh, found: run_directory.Found,
                 goodput: goodput_lib.Goodput, *, batch_size: int, sequence_length: int,
                 seed: int, init_params: str | None, skip_nonfinite: bool,
                 microbatches: int) -> tuple[_Run, trainer_lib.TrainState]:
  """Stage 2: the model state, initialised in its shards or restored from MODEL_DIR."""
  trainer = trainer_lib.Trainer(model, optimizer, mesh,
                                model.input_shapes(batch_size, sequence_length),
                                skip_nonfinite=skip_nonfinite, microbatches=microbatches)
  manager = checkpointing.make_manager(found.paths)
  state = _restore_or_initialize(trainer, manager, seed=seed, init_params=init_params,
                                 goodput=goodput)
  run = _Run(found.paths, goodput, trainer, manager, start_step=int(state.step),
             previous_step=found.progress)
  return run, state


def _data(run: _Run, model: models.EmbeddingModel, register_tasks, evaluator,
          mixture_name: str, pretokenized: str | None, *, batch_size: int,
          sequence_length: int, seed: int) -> tuple[Iterator[Any], _DataRecords]:
  """Stage 3: teacher vectors, then the data stream positioned at the restored step."""
  records = _prepare_data(register_tasks, evaluator, mixture_name, model, pretokenized)
  batches = train_iterator(
      mixture_name, batch_size=batch_size, sequence_length=sequence_length, seed=seed,
      start_step=run.start_step, pretokenized=pretokenized,
      restore_position=lambda fresh: checkpointing.restore_position(run.manager, run.start_step,
                                                                    fresh))
  return batches, records


def _steps(run: _Run, state, batches: Iterator[Any], *, mixture_name: str, seed: int,
           train_steps: int, batch_size: int, log_every: int, eval_every: int, evaluator,
           early_stopping: early_stopping_lib.EarlyStopping | None,
           max_skips: int) -> tuple[Any, _Logged]:
  """Stage 4: the loop (step, log, save, evaluate) until `train_steps` or early stopping."""
  goodput, manager, start_step = run.goodput, run.manager, run.start_step
  run.writer = scalar_writer.create_writer(run.paths.tensorboard,
                                           just_logging=jax.process_index() > 0)
  rng = jax.random.key(seed + 1)
  learning_rate = _learning_rate_schedule()
  logged = _Logged(step=start_step)
  progress = tqdm.tqdm(total=train_steps, initial=start_step, desc="train", unit="step",
                       disable=console.hide_progress(jax.process_index() > 0),
                       dynamic_ncols=True)
  started = time.time()
  consecutive_bad = 0
  goodput.add_unaccounted("startup")  # stages 1-3: the mesh, the state, the data
  with checkpointing.PreemptionWatcher() as preemption, distributed.lost_peers_named():
    for step in range(start_step + 1, train_steps + 1):
      with goodput.timing("data_wait" if step > start_step + 1 else "startup"):  # fills buffers
        batch = _next_batch(batches, step, mixture_name, run.paths.data_counts)
      with goodput.timing(_step_category(step, start_step, run.previous_step)):
        state, step_metrics = run.trainer.step(state, batch, rng)
        consecutive_bad = check_finite(step, step_metrics, consecutive_bad,  # waits for the step
                                       max_skips=max_skips, manager=manager)
      logged.skipped += consecutive_bad > 0
      saving = step == train_steps or manager.should_save(step)
      if step % log_every == 0 or saving:
        logged.metrics = _logged_metrics(step, step_metrics, skipped=logged.skipped,
                                         examples=batch_size * (step - start_step),
                                         seconds=time.time() - started,
                                         learning_rate=learning_rate)
        run.writer.write_scalars(step, logged.metrics)
        logged.history.append((step, logged.metrics["loss"]))
        _log_goodput(run.goodput, run.writer, step, steps=step - logged.step)
        logged.step = step
      # Every step: check_finite has already waited for this step's metrics.
      progress.set_postfix(loss=f"{float(step_metrics['loss']):.3f}", refresh=False)
      progress.update(1)
      if saving:  # asynchronous: waits for the host copy and the data position (make_manager)
        with goodput.timing("checkpoints"):
          checkpointing.save(manager, step, state, batches=batches, force=True)
      if logged.step == step and jax.process_index() == 0:  # the step's records, then progress
        run_directory.record_progress(run.paths, step, previous=run.previous_step)
      if step < train_steps and preemption.reached(step, manager):
        _save_and_exit(run, step, state, batches, saved=saving, progress=progress,
                       signum=preemption.signum)
      if eval_every and step % eval_every == 0 and step != train_steps:
        with goodput.timing("evaluation"):
          results = evaluate(evaluator, run.trainer, state.params, step, run.writer)
        if early_stopping is not None and early_stopping.observe(step, results, state.params):
          state = early_stopping.save_final(manager, step, state)
          break
  progress.close()
  return state, logged


def _finish(run: _Run, state, logged: _Logged, evaluator, *, steps_asked: int) -> dict[str, Any]:
  """Stage 5: the last evaluation, everything on disk; what `train` returns."""
  with distributed.lost_peers_named():  # the last save's commit syncs with every process
    with run.goodput.timing("evaluation"):
      retrieval = evaluate(evaluator, run.trainer, state.params, int(state.step), run.writer)
    with run.goodput.timing("checkpoints"):
      run.manager.wait_until_finished()  # the last asynchronous save committed
  _log_goodput(run.goodput, run.writer, int(state.step), steps=int(state.step) - logged.step,
               final=True)
  if jax.process_index() == 0:
    run_directory.record_progress(run.paths, int(state.step), previous=run.previous_step)
  run.writer.flush()
  if logged.skipped:
    logging.warning("%d of %d steps had a non-finite loss/gradient and were skipped",
                    logged.skipped, steps_asked)
  return {"start_step": run.start_step, "step": int(state.step),
          "final_metrics": logged.metrics, "loss_history": logged.history,
          "retrieval": retrieval, "params": state.params, "skipped_steps": logged.skipped}


def _restore_or_initialize(trainer: trainer_lib.Trainer, manager, *, seed: int,
                           init_params: str | None,
                           goodput: goodput_lib.Goodput) -> trainer_lib.TrainState:
  """MODEL_DIR's latest checkpoint, else `seed`'s state (with `init_params`' tensors).

  init_params is read only while there is no checkpoint, so a restarted run
  resumes from its own parameters rather than going back to the file's.
  """
  with goodput.timing("checkpoints"):
    state = checkpointing.restore_latest(manager, trainer.abstract_state)
  if state is not None:
    if init_params:
      logging.info("init_params %s ignored: resuming from the checkpoint", init_params)
    return state
  state = trainer.initialize(jax.random.key(seed))
  if init_params:
    logging.info("starting from the parameters in %s", init_params)
    state = trainer.with_params(state, initial_weights.load(init_params, state.params),
                                jax.random.key(seed))
  return state


def _describe_run(run: _Run, found: run_directory.Found, model: models.EmbeddingModel,
                  sequence_length: int, data: _DataRecords, *, changes: Sequence[str]) -> None:
  """MODEL_DIR's config.gin, model.json, data counts and vocabulary (process 0): the
  directory alone restores, evaluates and exports the model.

  Written once training goes ahead (not by a rerun with nothing to do, nor
  by a run whose data stage failed); model.json's step ranges record a
  resume with changed settings.
  """
  if jax.process_index() != 0:
    return
  keep = None
  if changes:
    logging.warning("resuming at step %d with changed settings: %s", run.start_step,
                    "; ".join(changes))
    keep = run_directory.kept_config(run.start_step) if run.start_step else None
  spec = restore.model_spec(model, sequence_length)
  ranges = preflight.step_ranges(found.model_spec, run.start_step, sequence_length,
                                 changed=bool(changes))
  if ranges:
    spec["step_ranges"] = list(ranges)
  run_directory.write_start(run.paths, config=gin.config_str(), model_spec=spec,
                            data_counts=data.counts, vocabulary=data.vocabulary,
                            keep_config_as=keep)


def _prepare_data(register_tasks, evaluator, mixture_name: str,
                  model: models.EmbeddingModel, pretokenized: str | None = None) -> _DataRecords:
  """Teacher vectors, then the registered tasks checked and counted; their counts and
  vocabulary for the run directory.

  Registration and the evaluators only read a distillation teacher's
  vectors; those its cache lacks are encoded here first, once, logged as
  "filling the teacher cache ...: N sentences ... to encode" (the same step
  as `python -m vmsst.teacher_cache`; a filled cache never loads the teacher).
  A pre-tokenized stream was registered, counted and checked when written:
  its counts and vocabulary are the run's, and only evaluators' teacher
  vectors are filled.
  """
  evaluators = in_training.as_list(evaluator)
  if pretokenized:
    if any(getattr(e, "teacher_cache", None) is not None for e in evaluators):
      teacher_cache.fill_stage(None, evaluators)
    counts = run_directory.read_data_counts(run_directory.of(pretokenized))  # kept beside it
  else:
    if not input_pipeline.seqio_available():
      raise cli.UserError("seqio (TensorFlow) is not installed here, and train.pretokenized is "
                          "unset: write the run's stream where seqio is, `python -m "
                          "vmsst.pretokenize --gin_file=RUN.gin --output=DIR`, then train "
                          "here with --gin.train.pretokenized=\"'DIR'\".")
    from vmsst_tasks.registry import data_counts  # pylint: disable=import-outside-toplevel  # seqio
    teacher_cache.fill_stage(register_tasks, evaluators)
    counts = data_counts.report_data_counts(mixture_name)  # read = kept + skipped, logged
    data_counts.check_training_data(mixture_name)  # an empty task: one error line, not a JAX traceback
  vocabulary = check_vocabulary(mixture_name, model, pretokenized)
  return _DataRecords(counts, vocabulary.sentencepiece_model_file)


def _next_batch(batches: Iterator[Any], step: int, mixture_name: str, counts: str) -> Any:
  """The step's batch; a stream that repeats forever ends only if it was empty."""
  batch = next(batches, None)
  if batch is None:
    raise cli.UserError(f"the training stream of {mixture_name} produced no batch at step "
                        f"{step}: every example was skipped ({counts} "
                        "has the counts); check the input or its filters.")
  return batch


def _logged_metrics(step: int, step_metrics: dict[str, Any], *, skipped: int, examples: int,
                    seconds: float, learning_rate) -> dict[str, float]:
  """What TensorBoard gets at a logged step: the step's metrics and the run's rates.

  `learning_rate` (None when the run's optimizer names none) is that of this
  step's update; optax counts updates from 0.
  """
  metrics = {k: float(v) for k, v in jax.device_get(step_metrics).items()}
  metrics["skipped_steps"] = skipped
  metrics["examples_per_second"] = examples / seconds
  if learning_rate is not None:
    metrics["learning_rate"] = float(learning_rate(step - 1))
  return metrics


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


def _step_category(step: int, start_step: int, previous_step: int | None) -> str:
  """Goodput's name for a step's time: the run's first (compiles), a redone one, or productive."""
  if step == start_step + 1:
    return "startup"
  return "redone" if goodput_lib.steps_redone(start_step, previous_step, step) else "productive"


def _log_goodput(goodput: goodput_lib.Goodput, writer, step: int, *, steps: int,
                 final: bool = False) -> None:
  """Goodput scalars to TensorBoard and the data-wait check; the line at exit.

  The loop records the step in progress.json next (process 0, after the
  step's checkpoint if it saves one): the furthest step any run reached, so
  a run killed again before getting back there still counts those steps as redone.
  """
  writer.write_scalars(step, goodput.scalars())
  if steps:
    goodput.check_data_wait(steps)
  if final:
    logging.info("%s", goodput.line())


def _save_and_exit(run: _Run, step: int, state, batches, *, saved: bool, progress,
                   signum: int | None) -> None:
  """After SIGTERM or Ctrl-C: the current step and data position on disk (waited for), then
  Preempted."""
  with run.goodput.timing("checkpoints"):
    if not saved:
      checkpointing.save(run.manager, step, state, batches=batches, force=True)
    run.manager.wait_until_finished()  # an asynchronous save completes before the exit
  _log_goodput(run.goodput, run.writer, step, steps=0, final=True)
  if jax.process_index() == 0:
    run_directory.record_progress(run.paths, step, previous=run.previous_step)
  run.writer.flush()
  progress.close()
  preempted = checkpointing.Preempted(step, os.fspath(run.manager.directory),
                                      signum or signal.SIGTERM)  # None: JAX's multi-host service
  logging.warning("%s", preempted)
  raise preempted
