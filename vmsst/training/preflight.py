"""What `python -m vmsst.train` checks before any data loads: each mistake one cli.UserError.

In the order a run meets them (after vmsst.training.configurables.parse_gin: gin's parse
errors, a run file that binds `train`, command-line values of the run file's types):

  check_paths       DATA_DIR, VOCAB_PATH, MODEL_DIR (writable, a directory),
                    the upstream directories a run starts from
                    (INIT_MODEL_DIR / train.init_params, ENTITY_DIR), the
                    OPUS directory (opus_readers.checked_corpora)
  check_start       inside `train`, with the model built: the vocabulary's
                    size against the model's, the batch over the devices and
                    hosts, `train.microbatches` (`check_microbatches`), and
                    what MODEL_DIR already holds (`check_resume`)

A resume checks what it resumes: model.json's objective and network must be
this run's, and bindings that changed since config.gin are listed and
refused unless `--resume_with_changes`; then the earlier config.gin is kept
as config-<step>.gin and model.json records each step range's length
(`step_ranges`, read by vmsst.encoding.restore.read_model_json).
"""

import os
import re
from typing import Any

from vmsst.base import cli
from vmsst.base import path_checks
from vmsst.base import files
from vmsst.base import run_directory
from vmsst.base import gin_utils
from vmsst.encoding import restore
from vmsst.base.gin_utils import gin

# Settings a resume may change without --resume_with_changes: how long to train
# (raising TRAIN_STEPS is how a run is continued), where MODEL_DIR is spelled,
# what starts a fresh run (ignored on resume) and how often to log or evaluate.
# train.microbatches: the same update whatever N (randomness is keyed by the pair), so a
# run may resume on fewer chips with its batch in microbatches.
RESUMABLE = ("TRAIN_STEPS", "train.train_steps", "MODEL_DIR", "train.model_dir",
             "INIT_MODEL_DIR", "train.init_params", "train.log_every", "train.eval_every",
             "train.microbatches")

# The upstream directories a run file may start from: macro -> (what must be in it,
# the command that writes it when no run file of gin/runs trains into that path).
UPSTREAM = {
    "INIT_MODEL_DIR": (run_directory.MODEL_SPEC, "python -m vmsst.train --gin_file=<the run "
                       "that trains it>"),
    "ENTITY_DIR": ("meta.json", "python -m vmsst_tasks.wiki_entities --dump=<a MediaWiki "
                   "dump> --output={path}"),
}


# ------------------------------------------------------------------ paths

def _local(path: Any) -> bool:
  return isinstance(path, str) and "://" not in path


def check_paths() -> None:
  """DATA_DIR, VOCAB_PATH, MODEL_DIR and the upstream directories, as the run will read them.

  Relative paths in a run file (DATA_DIR = '../shared/data', VOCAB_PATH =
  'runs/vocab/spm.model', MODEL_DIR) are relative to the working directory,
  as every path on a command line is; from another directory, pass them.

  Raises:
    cli.UserError: naming the macro, the path and the fix.
  """
  for macro, exists, what in (("DATA_DIR", files.isdir, "directory"),
                              ("VOCAB_PATH", files.isfile, "file")):
    path = gin_utils.macro(macro)
    if _local(path) and not exists(path):
      fix = ("train one with `python -m vmsst.vocabulary` (see README)"
             if macro == "VOCAB_PATH" else "point it at the shared corpora")
      raise cli.UserError(
          f"{macro} = {path!r} is not a {what} (relative paths are taken from the working "
          f"directory, {os.getcwd()}); run from the repository root, {fix}, or pass "
          f"--gin.{macro}=\"'/absolute/path'\"")
  model_dir = gin_utils.bound("train.model_dir")
  if isinstance(model_dir, gin.config.ConfigurableReference) or not _local(model_dir):
    model_dir = gin_utils.macro("MODEL_DIR")
  if _local(model_dir):
    path_checks.check_output_path("gin.MODEL_DIR", model_dir, directory=True)
  for macro, (marker, command) in UPSTREAM.items():
    path = gin_utils.macro(macro)
    if _local(path) and not files.exists(files.join(path, marker)):
      raise cli.UserError(f"{macro} = {path!r} has no {marker}: this run starts from it, so "
                          f"make it first: {_upstream_command(macro, path, command)}; or pass "
                          f"--gin.{macro}=\"'<an existing one>'\"")
  check_opus_dir()
  init = gin_utils.bound("train.init_params")
  if _local(init) and init != gin_utils.macro("INIT_MODEL_DIR") and not files.exists(init):
    raise cli.UserError(f"train.init_params = {init!r} does not exist; give a model directory, "
                        "an export of `python -m vmsst.export --format=sentence-transformers`, "
                        "or a file written by `python -m vmsst.mt5_import`.")


def check_opus_dir() -> None:
  """The run's OPUS directory, checked as registration will (files, codes, aligned sides).

  Counting the lines of every file is what registration does first anyway
  (counted once per process); done here, a misaligned corpus is one line
  before the model state is built, not a traceback after it.
  """
  registrar = getattr(gin_utils.bound("train.register_tasks"), "selector", None)
  families = gin_utils.bound("register_families.families") or []
  if registrar == "register_families" and any(
      getattr(f, "selector", None) == "opus_tasks" for f in families):
    path = gin_utils.bound("opus_tasks.opus_dir")
  else:
    return
  if isinstance(path, gin.config.ConfigurableReference):  # %OPUS_DIR
    path = path.scoped_configurable_fn()
  if isinstance(path, str):
    from vmsst_tasks.sources import opus_readers  # pylint: disable=import-outside-toplevel
    opus_readers.checked_corpora(path)


def _upstream_command(macro: str, path: str, command: str) -> str:
  """The command that writes `path`: the run file of gin/runs whose MODEL_DIR it is, if any."""
  if macro == "INIT_MODEL_DIR":
    pattern = re.compile(rf"^MODEL_DIR\s*=\s*['\"]{re.escape(path.rstrip('/'))}/?['\"]", re.M)
    for run in files.glob(os.path.join(cli.CHECKOUT, "gin", "runs", "*.gin")):
      if pattern.search(files.read_text(run)):
        return f"python -m vmsst.train --gin_file={os.path.relpath(run, cli.CHECKOUT)}"
  return command.format(path=path)


# ------------------------------------------------------------------ inside train

def padded_vocab_size(pieces: int) -> int:
  """`pieces` rounded up to a multiple of 128, as T5 pads its tables (mT5: 250,100 -> 250,112)."""
  return -(-pieces // 128) * 128


def vocabulary_fits(pieces: int, vocab_size: int) -> bool:
  """NetworkConfig.vocab_size is the vocabulary's size, or it rounded up to 128.

  The padding rows are never an input and only ever a wrong output.
  """
  return vocab_size in (pieces, padded_vocab_size(pieces))


def vocabulary_hint(where: str, pieces: int, vocab_size: int) -> str:
  return (f"the vocabulary {where} has {pieces} pieces but NetworkConfig.vocab_size is "
          f"{vocab_size} (not it, nor {padded_vocab_size(pieces)}, it rounded up to 128); "
          f"set VOCAB_SIZE in the run file or pass --gin.VOCAB_SIZE={pieces} (or retrain the "
          "vocabulary).")


def check_microbatches(model, batch_size: int, microbatches: int, data: int = 1) -> None:
  """`train.microbatches` = N fits the objective and the batch (vmsst.training.trainer).

  Args:
    data: the devices of the mesh's data axis, over which each microbatch's
      B / N pairs are sharded (1: not checked).
  Raises:
    cli.UserError: N < 1; N > 1 for an objective whose pairs are each other's
      negatives (`EmbeddingModel.loss_is_mean_over_pairs` False: a microbatch
      would contrast a pair with B / N - 1 others instead of B - 1); N not
      dividing the batch, or B / N not dividing over the data axis.
  """
  if microbatches < 1:
    raise cli.UserError(f"train.microbatches = {microbatches}: give 1 (the whole batch at once) "
                        "or more (gradient accumulation).")
  if microbatches == 1:
    return
  if not getattr(model, "loss_is_mean_over_pairs", False):
    raise cli.UserError(
        f"train.microbatches = {microbatches}: {type(model).__name__} contrasts each pair with "
        "the other pairs of its batch, so microbatches would shrink its negatives to a "
        "microbatch's; set --gin.train.microbatches=1 and, to fit the batch, use gradient "
        "caching (Contrastive.gradient_cache_chunk: the whole batch's negatives in a chunk's "
        "memory) or lower BATCH_SIZE.")
  if batch_size % microbatches:
    divisors = [n for n in range(2, min(batch_size, 64) + 1) if batch_size % n == 0][:6]
    raise cli.UserError(f"train.microbatches = {microbatches} does not divide the batch size "
                        f"{batch_size} (BATCH_SIZE); give a divisor of it, e.g. "
                        f"{', '.join(map(str, divisors)) or '1'}.")
  rows = batch_size // microbatches
  if rows % data:
    raise cli.UserError(
        f"train.microbatches = {microbatches} leaves {rows} pairs per microbatch (batch size "
        f"{batch_size}), which do not divide over the {data} devices of the data axis; make "
        f"BATCH_SIZE a multiple of {microbatches * data} or lower train.microbatches.")


def check_start(*, model, found: run_directory.Found, batch_size: int, sequence_length: int,
                mesh, process_count: int, resume_with_changes: bool,
                microbatches: int = 1) -> list[str]:
  """`train`'s checks once its model and mesh exist, before any state or data.

  Args:
    found: what MODEL_DIR holds (run_directory.read, once per run).
  Returns:
    the settings changed since MODEL_DIR's config.gin (allowed by
    `resume_with_changes`; empty for a fresh or unchanged run).

  Raises:
    cli.UserError: a vocabulary of another size, a batch that does not divide
      over the devices or hosts, microbatches that cannot split it
      (`check_microbatches`), or a MODEL_DIR holding another run.
  """
  vocab_path = gin_utils.macro("VOCAB_PATH")
  if _local(vocab_path) and files.isfile(vocab_path):
    import sentencepiece  # pylint: disable=import-outside-toplevel
    pieces = sentencepiece.SentencePieceProcessor(model_file=vocab_path).vocab_size()
    if not vocabulary_fits(pieces, model.network_config.vocab_size):
      raise cli.UserError(vocabulary_hint(f"VOCAB_PATH = {vocab_path!r}", pieces,
                                          model.network_config.vocab_size))
  data = mesh.shape["data"]
  for count, what in ((data, f"the {data} devices of the mesh's data axis"),
                      (process_count, f"{process_count} hosts")):
    if batch_size % count:
      lower, upper = batch_size // count * count, -(-batch_size // count) * count
      raise cli.UserError(
          f"BATCH_SIZE = {batch_size} does not divide over {what}; give a multiple of {count}, "
          f"e.g. --gin.BATCH_SIZE={lower or upper} or {upper}.")
  check_microbatches(model, batch_size, microbatches, data)
  return check_resume(found, model, sequence_length, resume_with_changes=resume_with_changes)


def check_resume(found: run_directory.Found, model, sequence_length: int, *,
                 resume_with_changes: bool) -> list[str]:
  """A MODEL_DIR with checkpoints holds this run: its objective, network and bindings.

  Returns:
    the changed bindings `resume_with_changes` allowed (empty: none, or nothing to resume).

  Raises:
    cli.UserError: another objective or network (model.json names it), or
      bindings changed since config.gin without `resume_with_changes`.
  """
  if not found.checkpoint_steps:
    return []
  saved, last = found.model_spec, found.checkpoint_steps[-1]
  now = restore.model_spec(model, sequence_length)
  where = f"MODEL_DIR = {found.paths.root!r} (step {last})"
  fresh = "give a new MODEL_DIR for this run (--gin.MODEL_DIR=\"'runs/<new>'\")"
  if saved and saved.get("objective") != now["objective"]:
    raise cli.UserError(
        f"{where} holds a {saved.get('objective')} model (its model.json) but this run trains "
        f"{now['objective']}; {fresh}, or resume it with the run file that trained it.")
  network = saved.get("network", {})
  differ = [f"{k} {network.get(k)!r} (this run: {v!r})" for k, v in sorted(now["network"].items())
            if k in network and network[k] != v]
  if differ:
    raise cli.UserError(f"{where} holds another network, NetworkConfig {'; '.join(differ)}; "
                        f"{fresh}, or restore those settings.")
  changes = changed_bindings(found.config)
  if changes and not resume_with_changes:
    raise cli.UserError(
        f"{where} was trained with other settings: {'; '.join(changes)}. Resuming would train "
        "the next steps with these; restore them, give a new MODEL_DIR, or pass "
        "--resume_with_changes to continue with them (the earlier config.gin is kept as "
        f"{run_directory.kept_config(last)} and model.json records each step range).")
  return changes


def changed_bindings(config: str | None) -> list[str]:
  """'name: before -> now' for each binding that differs from `config`, the text of the
  directory's config.gin (None: there is none, nothing changed).

  Settings in RESUMABLE are left out; a binding on one side only counts as
  changed (shown as "(unset)").
  """
  if config is None:
    return []
  before = gin_utils.config_bindings(config)
  now = gin_utils.config_bindings(gin.config_str())
  return [f"{key}: {before.get(key, '(unset)')} -> {now.get(key, '(unset)')}"
          for key in sorted(before.keys() | now.keys())
          if before.get(key) != now.get(key) and key not in RESUMABLE]


def step_ranges(saved_spec: dict[str, Any], step: int, sequence_length: int, *,
                changed: bool) -> list[dict[str, Any]] | None:
  """model.json's `step_ranges` for a run resumed at `step` (None: one range, not recorded).

  With `changed` settings, config.gin (how the steps so far were trained) is
  kept as config-<step>.gin (`run_directory.write_start(keep_config_as=)`), and
  a range starts at step + 1. Each range is {"first_step", "last_step" (null:
  still training), "sequence_length", "config"}; model.json's top-level fields
  stay the latest range's.

  Args:
    saved_spec: the directory's model.json as found ({}: none).
  """
  ranges = saved_spec.get("step_ranges")
  if not changed or not step:
    return ranges
  ranges = [dict(r) for r in ranges] if ranges else [
      {"first_step": 1, "last_step": None, "sequence_length": saved_spec.get("sequence_length")}]
  ranges[-1].update(last_step=step, config=run_directory.kept_config(step))
  ranges.append({"first_step": step + 1, "last_step": None,
                 "sequence_length": int(sequence_length), "config": run_directory.CONFIG})
  return ranges
