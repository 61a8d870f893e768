"""What `python -m vmsst.train` checks before any data loads: each mistake one cli.UserError.

In the order a run meets them:

  parse_errors      gin's parse errors (an unknown configurable or parameter,
                    with "did you mean"; an unquoted string; a number given
                    as a string)
  check_run_file    the files bind a run (`train`), not only a model file
  check_types       a command-line value of the type the run file gives it
  check_paths       DATA_DIR, VOCAB_PATH, MODEL_DIR (writable, a directory),
                    the upstream directories a run starts from
                    (INIT_MODEL_DIR / train.init_params, ENTITY_DIR)
  check_start       inside `train`, with the model built: the vocabulary's
                    size against the model's, the batch over the devices and
                    hosts, and what MODEL_DIR already holds (`check_resume`)

A resume checks what it resumes: model.json's objective and network must be
this run's, and bindings that changed since config.gin are listed and
refused unless `--resume_with_changes`; then the earlier config.gin is kept
as config-<step>.gin and model.json records each step range's length
(`step_ranges`, read by vmsst.inference.read_model_json).
"""

import glob
import inspect
import json
import os
import re
from typing import Any, Sequence

import gin
from gin import config_parser

from vmsst import cli
from vmsst import inference

# Settings a resume may change without --resume_with_changes: how long to train
# (raising TRAIN_STEPS is how a run is continued), where MODEL_DIR is spelled,
# what starts a fresh run (ignored on resume) and how often to log or evaluate.
RESUMABLE = ("TRAIN_STEPS", "train.train_steps", "MODEL_DIR", "train.model_dir",
             "INIT_MODEL_DIR", "train.init_params", "train.log_every", "train.eval_every")

# The upstream directories a run file may start from: macro -> (what must be in it,
# the command that writes it when no run file of gin/runs trains into that path).
UPSTREAM = {
    "INIT_MODEL_DIR": (inference.MODEL_FILE, "python -m vmsst.train --gin_file=<the run "
                       "that trains it>"),
    "ENTITY_DIR": ("meta.json", "python -m vmsst_tasks.wiki_entities --dump=<a MediaWiki "
                   "dump> --output={path}"),
}


# ------------------------------------------------------------------ parsing

_UNKNOWN_CONFIGURABLE = re.compile(
    r"No configurable matching (?:reference )?'@?([\w.]+?)(?:\(\))?'")
_UNKNOWN_PARAMETER = re.compile(r"Configurable '([\w.]+)' doesn't have a parameter named '(\w+)'")


def parse_errors(error: ValueError, bindings: Sequence[str]) -> cli.UserError:
  """gin's ValueError while parsing as one line, with "did you mean" for a misspelt name."""
  first = str(error).strip().splitlines()[0]
  names = [n for m in (_UNKNOWN_PARAMETER.search(first), _UNKNOWN_CONFIGURABLE.search(first))
           if m for n in m.groups()]
  where = next((b for b in bindings if names and all(n in b for n in names)), None)
  shown = f"--gin.{where.replace(' ', '')}: " if where else ""
  if m := _UNKNOWN_PARAMETER.search(first):
    selector, name = m.groups()
    hint = cli.did_you_mean(name, parameters(selector), f"{selector} takes")
    return cli.UserError(f"{shown}{selector} has no parameter {name}; {hint}")
  if m := _UNKNOWN_CONFIGURABLE.search(first):
    name = m.group(1)
    hint = cli.did_you_mean(name.split(".")[-1], configurables()) or (
        "see vmsst/gin_configurables.py for what can be bound")
    return cli.UserError(f"{shown}nothing configurable is named {name}; {hint}")
  return cli.UserError(f"{shown}gin: {first}")


def configurables() -> list[str]:
  """The names of every registered gin configurable (class and function names)."""
  registry = gin.config._REGISTRY  # pylint: disable=protected-access  # gin has no public list
  return sorted({selector.split(".")[-1] for selector, _ in registry.items()})


def parameters(selector: str) -> list[str]:
  """The parameters gin may bind on `selector` (a class's constructor's, a function's)."""
  found = gin.config._REGISTRY.get_match(selector)  # pylint: disable=protected-access
  if found is None:
    return []
  fn = found.wrapped.__init__ if inspect.isclass(found.wrapped) else found.wrapped
  names = [n for n in inspect.signature(fn).parameters if n not in ("self", "args", "kwargs")]
  return [n for n in names if not found.denylist or n not in found.denylist]


def file_values(bindings: Sequence[str]) -> dict[str, Any]:
  """The values the parsed files give the names the command-line bindings set (plain literals)."""
  values = {}
  for binding in bindings:
    name = binding.partition("=")[0].strip()
    try:
      value = gin.query_parameter(name if "." in name or "/" in name else f"%{name}")
    except (ValueError, KeyError):
      continue
    if isinstance(value, (bool, int, float, str)):
      values[name] = value
  return values


def _kind(value: Any) -> str:
  if isinstance(value, bool):
    return "True or False"
  if isinstance(value, int):
    return "an integer"
  if isinstance(value, float):
    return "a number"
  return "a string"


def _fits(before: Any, after: Any) -> bool:
  if isinstance(before, bool) or isinstance(after, bool):
    return isinstance(before, bool) == isinstance(after, bool)
  if isinstance(before, int):
    return isinstance(after, int)
  if isinstance(before, float):
    return isinstance(after, (int, float))
  return isinstance(after, str) or after is None


def _example(before: Any, text: str) -> str:
  """How to write `text` as a value of `before`'s type on the command line."""
  if isinstance(before, str):
    return f"\"'{text}'\""
  return text if re.fullmatch(r"[-+.\deE_]+|True|False", text) else repr(before)


def syntax_hint(name: str, value: str, before: dict[str, Any]) -> str:
  """A binding gin cannot parse: a number for a number, quotes for a string."""
  if name in before and not isinstance(before[name], str):
    return (f"--gin.{name}={value}: {name} takes {_kind(before[name])} (the run file gives "
            f"{before[name]!r}), e.g. --gin.{name}={before[name]!r}")
  return (f"--gin.{name}={value}: gin values are Python literals, so a string needs quotes "
          f"inside the shell's: --gin.{name}=\"'{value}'\"")


def check_types(bindings: Sequence[str], before: dict[str, Any]) -> None:
  """Each command-line value has the type of the value the run file gave it.

  `--gin.TRAIN_STEPS="'30'"` would otherwise train until a comparison of an
  int with a str fails, seconds into the run.

  Raises:
    cli.UserError: naming the binding, the type it takes and a value of that type.
  """
  for name, was in before.items():
    now = gin.query_parameter(name if "." in name or "/" in name else f"%{name}")
    if not _fits(was, now):
      text = now if isinstance(now, str) else repr(now)
      raise cli.UserError(
          f"--gin.{name}={now!r}: {name} takes {_kind(was)} (the run file gives {was!r}); "
          f"give --gin.{name}={_example(was, text)}")


TRAIN_REQUIRED = ("model", "model_dir", "mixture_name", "train_steps", "batch_size",
                  "sequence_length", "optimizer")


def check_run_file(gin_files: Sequence[str]) -> None:
  """The parsed files bind what `train` requires; a model or size file alone binds none of it.

  Raises:
    cli.UserError: no --gin_file, a file that is no run file (naming the run
      file of the same name when gin/runs has one), or the unbound parameters.
  """
  if not gin_files:
    raise cli.UserError(cli.NO_RUN_FILE)
  missing = []
  for name in TRAIN_REQUIRED:
    try:
      gin.query_parameter(f"train.{name}")
    except ValueError:
      missing.append(name)
  if {"model_dir", "mixture_name", "train_steps"} <= set(missing):
    stem = os.path.splitext(os.path.basename(gin_files[-1]))[0]
    runs = sorted(glob.glob(os.path.join(cli.CHECKOUT, "gin", "runs", f"{stem}_*.gin")),
                  key=lambda p: (not p.endswith("_cpu.gin"), p))
    example = f", e.g. --gin_file={os.path.relpath(runs[0], cli.CHECKOUT)}" if runs else ""
    raise cli.UserError(
        f"--gin_file={gin_files[-1]} is not a run file: it binds nothing of train (a model or "
        f"size file, which run files include); give a run file from gin/runs{example}.")
  if missing:
    raise cli.UserError(
        f"{', '.join('train.' + m for m in missing)} not bound by {list(gin_files)}; bind them in "
        "the run file or with --gin.train.<name>=VALUE (gin/runs/base_cpu.gin binds them all).")


# ------------------------------------------------------------------ paths

def _macro(name: str) -> Any:
  try:
    return gin.query_parameter(f"%{name}")
  except ValueError:
    return None


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
  for macro, exists, what in (("DATA_DIR", os.path.isdir, "directory"),
                              ("VOCAB_PATH", os.path.isfile, "file")):
    path = _macro(macro)
    if _local(path) and not exists(path):
      fix = ("train one with `python -m vmsst.vocabulary` (see README)"
             if macro == "VOCAB_PATH" else "point it at the shared corpora")
      raise cli.UserError(
          f"{macro} = {path!r} is not a {what} (relative paths are taken from the working "
          f"directory, {os.getcwd()}); run from the repository root, {fix}, or pass "
          f"--gin.{macro}=\"'/absolute/path'\"")
  try:
    model_dir = gin.query_parameter("train.model_dir")
  except ValueError:
    model_dir = None
  if isinstance(model_dir, gin.config.ConfigurableReference) or not _local(model_dir):
    model_dir = _macro("MODEL_DIR")
  if _local(model_dir):
    cli.check_output_path("gin.MODEL_DIR", model_dir, directory=True)
  for macro, (marker, command) in UPSTREAM.items():
    path = _macro(macro)
    if _local(path) and not os.path.exists(os.path.join(path, marker)):
      raise cli.UserError(f"{macro} = {path!r} has no {marker}: this run starts from it, so "
                          f"make it first: {_upstream_command(macro, path, command)}; or pass "
                          f"--gin.{macro}=\"'<an existing one>'\"")
  try:
    init = gin.query_parameter("train.init_params")
  except ValueError:
    init = None
  if _local(init) and init != _macro("INIT_MODEL_DIR") and not os.path.exists(init):
    raise cli.UserError(f"train.init_params = {init!r} does not exist; give a model directory, "
                        "an export of `python -m vmsst.export --format=sentence-transformers`, "
                        "or a file written by `python -m vmsst.mt5_import`.")


def _upstream_command(macro: str, path: str, command: str) -> str:
  """The command that writes `path`: the run file of gin/runs whose MODEL_DIR it is, if any."""
  if macro == "INIT_MODEL_DIR":
    pattern = re.compile(rf"^MODEL_DIR\s*=\s*['\"]{re.escape(path.rstrip('/'))}/?['\"]", re.M)
    for run in sorted(glob.glob(os.path.join(cli.CHECKOUT, "gin", "runs", "*.gin"))):
      with open(run, encoding="utf-8") as f:
        if pattern.search(f.read()):
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


def check_start(*, model, model_dir: str, batch_size: int, sequence_length: int, mesh,
                process_count: int, resume_with_changes: bool) -> list[str]:
  """`train`'s checks once its model and mesh exist, before any state or data.

  Returns:
    the settings changed since MODEL_DIR's config.gin (allowed by
    `resume_with_changes`; empty for a fresh or unchanged run).

  Raises:
    cli.UserError: a vocabulary of another size, a batch that does not divide
      over the devices or hosts, or a MODEL_DIR holding another run.
  """
  vocab_path = _macro("VOCAB_PATH")
  if _local(vocab_path) and os.path.isfile(vocab_path):
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
  return check_resume(model_dir, model, sequence_length, resume_with_changes=resume_with_changes)


def checkpoint_steps(model_dir: str) -> list[int]:
  """The saved steps under MODEL_DIR/checkpoints (orbax's numbered directories)."""
  folder = os.path.join(model_dir, "checkpoints")
  if not os.path.isdir(folder):
    return []
  return sorted(int(n) for n in os.listdir(folder) if n.isdigit())


def check_resume(model_dir: str, model, sequence_length: int, *,
                 resume_with_changes: bool) -> list[str]:
  """A MODEL_DIR with checkpoints holds this run: its objective, network and bindings.

  Returns:
    the changed bindings `resume_with_changes` allowed (empty: none, or nothing to resume).

  Raises:
    cli.UserError: another objective or network (model.json names it), or
      bindings changed since config.gin without `resume_with_changes`.
  """
  steps = checkpoint_steps(model_dir)
  if not steps:
    return []
  spec_path = os.path.join(model_dir, inference.MODEL_FILE)
  saved = {}
  if os.path.isfile(spec_path):  # a directory from before model.json: its config.gin only
    with open(spec_path, encoding="utf-8") as f:
      saved = json.load(f)
  now = inference.model_spec(model, sequence_length)
  where = f"MODEL_DIR = {model_dir!r} (step {steps[-1]})"
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
  changes = changed_bindings(os.path.join(model_dir, inference.CONFIG_FILE))
  if changes and not resume_with_changes:
    raise cli.UserError(
        f"{where} was trained with other settings: {'; '.join(changes)}. Resuming would train "
        "the next steps with these; restore them, give a new MODEL_DIR, or pass "
        "--resume_with_changes to continue with them (the earlier config.gin is kept as "
        f"config-{steps[-1]}.gin and model.json records each step range).")
  return changes


def changed_bindings(config_path: str) -> list[str]:
  """'name: before -> now' for each binding that differs from the directory's config.gin.

  Settings in RESUMABLE are left out; a binding on one side only counts as
  changed (shown as "(unset)").
  """
  if not os.path.isfile(config_path):
    return []
  with open(config_path, encoding="utf-8") as f:
    before = _bindings(f.read())
  now = _bindings(gin.config_str())
  return [f"{key}: {before.get(key, '(unset)')} -> {now.get(key, '(unset)')}"
          for key in sorted(before.keys() | now.keys())
          if before.get(key) != now.get(key) and key not in RESUMABLE]


def _bindings(text: str) -> dict[str, str]:
  """{"scope/selector.arg" or "MACRO": the value as gin writes it} of a config string."""
  parser = config_parser.ConfigParser(text, gin.config.ParserDelegate(skip_unknown=True))
  found = {}
  for statement in parser:
    if isinstance(statement, config_parser.BindingStatement):
      key = "/".join(filter(None, [statement.scope, statement.selector]))
      found[f"{key}.{statement.arg_name}" if statement.arg_name else key] = repr(statement.value)
  return found


def step_ranges(model_dir: str, step: int, sequence_length: int, *,
                changed: bool) -> list[dict[str, Any]] | None:
  """model.json's `step_ranges` for a run resumed at `step` (None: one range, not recorded).

  With `changed` settings, config.gin (how the steps so far were trained) is
  kept as config-<step>.gin first, and a range starts at step + 1. Each range
  is {"first_step", "last_step" (null: still training), "sequence_length",
  "config"}; model.json's top-level fields stay the latest range's.
  """
  spec_path = os.path.join(model_dir, inference.MODEL_FILE)
  saved = {}
  if os.path.isfile(spec_path):
    with open(spec_path, encoding="utf-8") as f:
      saved = json.load(f)
  ranges = saved.get("step_ranges")
  if not changed or not step:
    return ranges
  kept = f"config-{step}.gin"
  config = os.path.join(model_dir, inference.CONFIG_FILE)
  if os.path.isfile(config):
    os.replace(config, os.path.join(model_dir, kept))
  ranges = ranges or [{"first_step": 1, "last_step": None,
                       "sequence_length": saved.get("sequence_length")}]
  ranges[-1].update(last_step=step, config=kept)
  ranges.append({"first_step": step + 1, "last_step": None,
                 "sequence_length": int(sequence_length), "config": inference.CONFIG_FILE})
  return ranges
