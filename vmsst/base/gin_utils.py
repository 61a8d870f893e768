"""Everything vmsst does with gin, in one place (t5x keeps it in `gin_utils.py`).

- `gin`: gin-config where it is installed, else a stand-in whose decorators are
  no-ops. Every module that marks what run files may bind imports it as
  `from vmsst.base.gin_utils import gin`: the core (network, objectives, optimizers,
  partitioning, trainer, checkpointing) must import and train where gin is
  absent (accelerator images): there nothing is bound, `configurable` returns
  its argument and `REQUIRED` is a sentinel that fails loudly if an argument
  is left out.
- What run files can name is registered by vmsst.training.configurables
  (the layer above everything it imports), whose `parse_gin` registers and
  then calls `parse_registered` here.
- The command line: `define_flags` (`--gin_file`, `--gin_bindings`,
  `--gin_search_path`, shared by train, compile, compare, teacher_cache,
  pretokenize and mt5_import), `rewrite_gin_args` (`--gin.X=Y`, t5x's
  convention), `check_gin_files` (a run file that is not there, before the
  slow imports) and `parse_registered`, which parses run files and bindings and turns
  every mistake into one cli.UserError (a file not found, an unquoted string,
  an unknown configurable or parameter with "did you mean", a macro nothing
  reads, a value of another type than the run file's, files that bind no run,
  a macro the command reads left unset).
- Reading a parsed run: `bound` / `macro` (a binding or None); and
  `config_bindings`, which reads an operative config (MODEL_DIR/config.gin,
  gin.config_str() as a run writes it) back into bindings (a resume compares them).
"""

import functools
import inspect
import logging as python_logging  # gin logs through the root logger
import os
import pathlib
import re
import types
from typing import Any, NamedTuple, Sequence

from vmsst.base import cli
from vmsst.base import files

try:
  import gin  # pylint: disable=unused-import
  if not hasattr(gin, "configurable"):
    # Not gin-config but the repository's gin/ folder of .gin files, which Python
    # imports as an empty namespace package when the repository root is on sys.path
    # and gin-config is not installed (`python -m pytest` from the root on an
    # accelerator image).
    raise ImportError("gin resolves to a folder of .gin files, not gin-config")
except ImportError:

  class _Required:
    """Stands for gin.REQUIRED: an argument that must be passed explicitly without gin."""

    def __repr__(self):
      return "REQUIRED (pass this argument explicitly: gin-config is not installed)"

  def _configurable(name_or_fn=None, **_):
    """`gin.configurable` with nothing to bind: the object itself."""
    if callable(name_or_fn):
      return name_or_fn
    return lambda fn: fn

  gin = types.SimpleNamespace(configurable=_configurable, REQUIRED=_Required())


_registered = False  # set by vmsst.training.configurables.register


def mark_registered() -> None:
  """Every configurable a run file may name is registered (training.configurables.register)."""
  global _registered  # pylint: disable=global-statement
  _registered = True


FLAG_NAMES = ("gin_file", "gin_bindings", "gin_search_path")


class Flags(NamedTuple):
  """The run-file flags' holders (`.value` once absl has parsed the command line)."""
  gin_file: Any
  gin_bindings: Any
  gin_search_path: Any


@functools.cache
def define_flags() -> Flags:
  """Defines --gin_file, --gin_bindings (also --gin.X=Y) and --gin_search_path; once per process.

  Every command that reads a run (train, compile, compare, teacher_cache,
  pretokenize, mt5_import) calls it where it defines its own flags; they are
  shown under its --help (cli.show_in_help(names=FLAG_NAMES)).
  """
  from absl import flags  # pylint: disable=import-outside-toplevel
  return Flags(
      flags.DEFINE_multi_string("gin_file", [], "Gin files, applied in order."),
      flags.DEFINE_multi_string("gin_bindings", [], "Gin bindings (also via --gin.X=Y)."),
      flags.DEFINE_multi_string("gin_search_path", ["."],
                                "Directories gin includes resolve from."))


NO_RUN_FILE = ("give --gin_file=gin/runs/<run>.gin (the run files: gin/runs/*_cpu.gin here, "
               "*_paper.gin on a pod; see --help).")


def check_gin_files(argv: Sequence[str], *, required: bool = False) -> None:
  """Each --gin_file exists where configurables.parse_gin will look, checked before JAX and
  TensorFlow load.

  parse_gin resolves a run file from the working directory, then
  --gin_search_path, then this checkout's root; a miss there costs seconds
  of imports before gin's own message, so it is caught here first (includes
  inside the file are still parse_gin's to check).

  Args:
    required: no --gin_file is an error (train: a run needs its run file).
  Raises:
    cli.UserError: naming the file, where it was looked for and the fix.
  """
  if required and not cli.flag_values(argv, "gin_file"):
    raise cli.UserError(NO_RUN_FILE)
  roots = [*(cli.flag_values(argv, "gin_search_path") or ["."]), cli.CHECKOUT]
  for path in cli.flag_values(argv, "gin_file"):
    if "://" in path or files.isfile(path):
      continue
    if not any(files.isfile(os.path.join(root, path)) for root in roots):
      raise cli.UserError(
          f"--gin_file={path} not found; searched the working directory and {roots}; give a "
          "run file (gin/runs/*.gin) or pass --gin_search_path=<the directory holding gin/>.")


def bound(name: str) -> Any:
  """A binding or `%MACRO` as gin holds it (`@f`: a ConfigurableReference), None when unbound."""
  try:
    return gin.query_parameter(name)
  except ValueError:
    return None


def macro(name: str) -> Any:
  """The value of the macro NAME (None when unbound)."""
  return bound(f"%{name}")


def rewrite_gin_args(argv: Sequence[str]) -> list[str]:
  """`--gin.X=Y` -> `--gin_bindings=X = Y` (t5x's command-line convention)."""
  pattern = re.compile(r"^--gin\.([^=]+)=(.*)$", re.S)
  return [f"--gin_bindings={m.group(1)} = {m.group(2)}" if (m := pattern.match(a)) else a
          for a in argv]


def parse_registered(gin_files: Sequence[str], bindings: Sequence[str],
                     search_paths: Sequence[str] = (".",), *,
                     needs: Sequence[str] = ("train",)) -> None:
  """Parses gin files and bindings once every configurable is registered; macros left unset
  fail here. Commands call vmsst.training.configurables.parse_gin, which registers first.

  `needs`: what the command calls (`train`, every parameter of it; or single
  parameters, "train.model"): a macro they read, directly or through what
  they reference, must be set (`check_macros_are_set`), while macros only the
  rest reads may stay unset (compile needs no MODEL_DIR).

  Files and their `include 'gin/...'` lines resolve from the working
  directory, then `search_paths`, then the root of the repository holding
  each gin file (the directory above its `gin/`), then this checkout's root:
  a run works from any directory.

  Raises:
    cli.UserError: a gin file or include is not found, a binding does not
      parse (an unquoted string, a word for a number), names a configurable
      or parameter that does not exist (with the closest), gives a value of
      another type than the run file's, or sets a macro that nothing reads
      (a typo); the files are no run file (preflight); a macro `needs`
      reads is set nowhere.
  """
  if not _registered:
    raise RuntimeError("nothing is registered for run files to name: parse through "
                       "vmsst.training.configurables.parse_gin")
  roots = [*search_paths, *_repository_roots(gin_files)]
  for path in roots:
    gin.add_config_file_search_path(path)
  misses = _GinMisses()
  python_logging.getLogger().addFilter(misses)
  before = {}
  try:
    gin.parse_config_files_and_bindings(gin_files, [], finalize_config=False)
    before = file_values(bindings)  # the run file's values, to type-check the flags'
    gin.parse_config(bindings)
  except OSError as e:  # gin's own message is empty
    raise cli.UserError(
        f"gin file {misses.missing(roots[-1])!r} not found (in {list(gin_files)} or their "
        f"includes); searched the working directory and {roots}; pass "
        "--gin_search_path=<the directory holding gin/>") from e
  except ImportError as e:  # a run file's `import` line
    raise cli.UserError(_import_error(e, gin_files)) from e
  except SyntaxError as e:
    raise cli.UserError(_binding_syntax_hint(e, bindings, before)) from e
  except ValueError as e:  # an unknown configurable or parameter
    raise parse_errors(e, bindings) from e
  finally:
    python_logging.getLogger().removeFilter(misses)
  check_run_file(gin_files)
  check_macros_are_read(bindings)
  check_types(bindings, before)
  check_macros_are_set(gin_files, needs)


class _GinMisses:
  """Root-logger filter: keeps gin's 'Path not found' errors from the console.

  gin tries each search path in turn and logs an error for every miss, even
  when a later path has the file; a real miss becomes one cli.UserError.
  """

  def __init__(self):
    self.paths = []

  def filter(self, record) -> bool:
    message = record.getMessage()
    if message.startswith("Path not found: "):
      self.paths.append(message.removeprefix("Path not found: "))
      return False
    return True

  def missing(self, last_root: str) -> str:
    """The file of the last miss, as written in the include (its last search path removed)."""
    if not self.paths:
      return "(gin did not say which)"
    return self.paths[-1].removeprefix(os.path.join(last_root, ""))


def _import_error(error: ImportError, gin_files: Sequence[str]) -> str:
  """One line for a gin file's `import` of a module that does not import."""
  text = str(error)
  module = re.search(r"No module named '([^']+)'", text)
  where = re.search(r'In file "([^"]+)", line (\d+)', text)
  return (f"{where.group(1) + ':' + where.group(2) if where else list(gin_files)} imports "
          f"{module.group(1) if module else text.splitlines()[0]}, which does not import; run "
          "files need no import line (vmsst.training.configurables registers every configurable): "
          "remove it")


def _repository_roots(gin_files: Sequence[str]) -> list[str]:
  """The directory above `gin/` for each gin file under one, then this checkout's root."""
  roots = []
  for path in gin_files:
    if os.path.isfile(path):
      parents = pathlib.Path(path).resolve().parents
      roots += [str(p.parent) for p in parents if p.name == "gin"][:1]
  checkout = pathlib.Path(cli.CHECKOUT)
  if (checkout / "gin").is_dir():
    roots.append(str(checkout))
  return list(dict.fromkeys(roots))


def _binding_syntax_hint(error: SyntaxError, bindings: Sequence[str],
                         before: dict[str, Any]) -> str:
  """One line for a binding gin cannot parse: quotes for a string, a number for a number."""
  where = getattr(error, "location", None)
  text = (where.line_content if where else None) or error.text or ""
  name, _, value = text.partition("=")
  if not value.strip() or text.strip() not in [b.strip() for b in bindings]:
    return f"gin cannot parse {text.strip()!r}: {error.msg}"
  return syntax_hint(name.strip(), value.strip(), before)


_MACRO_BINDING = re.compile(r"^\s*([A-Za-z_]\w*)\s*=")


def check_macros_are_read(bindings: Sequence[str]) -> None:
  """Fails when a binding sets a macro that no parsed configuration reads.

  gin accepts `TRAIN_STEP = 3` as a new macro, so a typo would silently
  train with the file's TRAIN_STEPS; this runs before any training and
  before config.gin is written. Only command-line bindings are checked:
  a gin file may define macros for the files that include it.

  Raises:
    cli.UserError: naming the macro and the closest one that is read.
  """
  bound = [m.group(1) for b in bindings if (m := _MACRO_BINDING.match(b))]
  if not bound:
    return
  # gin has no public view of its parsed bindings; _CONFIG maps
  # (scope, selector) -> {arg: value} with macros under selector "gin.macro".
  config = gin.config._CONFIG  # pylint: disable=protected-access
  read = {ref.scoped_selector.rsplit("/", 1)[0] for ref in gin.config.iterate_references(config)
          if ref.scoped_selector.endswith("/gin.macro")}
  for name in bound:
    if name not in read:
      raise cli.UserError(f"{name} is bound but never read; "
                          f"{cli.did_you_mean(name, read, 'macros read')}")


_MACRO = "gin.macro"  # the selector gin files a `%NAME` reference under, scope NAME


def unset_macros(needs: Sequence[str]) -> dict[str, list[str]]:
  """{macro: the parameters that read it} for each macro `needs` reads and nothing sets.

  gin parses `x = %NAME` without NAME being set and fails only when the
  configurable is called, as "macro() missing 1 required positional argument:
  'value'", naming no macro. This walks the parsed bindings instead, from
  `needs` (a configurable: all its parameters; "configurable.parameter": one)
  through every configurable and macro they reference.
  """
  config = gin.config._CONFIG  # pylint: disable=protected-access  # no public view of bindings
  pending = [pair for root in needs for pair in _root_values(config, root)]
  seen, unset = set(), {}
  while pending:
    reader, value = pending.pop()
    for ref in gin.config.iterate_references(value):
      scope, selector = ref.config_key
      if selector == _MACRO and "value" not in config.get((scope, _MACRO), {}):
        unset.setdefault(scope, [])
        if reader not in unset[scope]:
          unset[scope].append(reader)
      if ref.config_key in seen:
        continue
      seen.add(ref.config_key)
      for key, params in config.items():  # the bindings of the scope and of its outer scopes
        if key[1] == selector and (not key[0] or scope == key[0]
                                   or scope.startswith(key[0] + "/")):
          pending += [(f"{selector.rsplit('.', 1)[-1]}.{arg}", v) for arg, v in params.items()]
  return unset


def _root_values(config: dict, root: str) -> list[tuple[str, Any]]:
  """(reader, value) of `root`'s bindings: a configurable's every parameter, or
  "configurable.parameter"'s one."""
  registry = gin.config._REGISTRY  # pylint: disable=protected-access
  found, arg = registry.get_match(root), ""
  if found is None:
    name, _, arg = root.rpartition(".")
    found = registry.get_match(name) if name else None
  if found is None:
    return []
  params = config.get(("", found.selector), {})
  short = found.selector.rsplit(".", 1)[-1]
  return [(f"{short}.{a}", v) for a, v in params.items() if not arg or a == arg]


def check_macros_are_set(gin_files: Sequence[str], needs: Sequence[str]) -> None:
  """Every macro that what the command calls reads is set; checked before any long work.

  Raises:
    cli.UserError: naming each unset macro, the parameter reading it, the run
      file and the `--gin.NAME=VALUE` that sets it.
  """
  unset = unset_macros(needs)
  if not unset:
    return
  names = sorted(unset)
  read = "; ".join(f"{n} (read by {', '.join(sorted(unset[n]))})" for n in names)
  example = " ".join(f"--gin.{n}={_macro_example(n)}" for n in names)
  raise cli.UserError(
      f"{gin_files[-1] if gin_files else 'the run'} leaves {len(names)} "
      f"macro{'s' if len(names) > 1 else ''} unset: {read}; set "
      f"{'them' if len(names) > 1 else 'it'} on the command line, e.g. {example} "
      "(or in a run file that includes this one).")


def _macro_example(name: str) -> str:
  """A placeholder in the form the command line takes: paths as quoted strings."""
  if name.endswith(("_DIR", "_PATH", "_PARAMS", "_FILE")):
    return f"\"'<{name.lower()}>'\""
  return "<value>"


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
        "see vmsst/training/configurables.py for what can be bound")
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
    raise cli.UserError(NO_RUN_FILE)
  missing = []
  for name in TRAIN_REQUIRED:
    try:
      gin.query_parameter(f"train.{name}")
    except ValueError:
      missing.append(name)
  if {"model_dir", "mixture_name", "train_steps"} <= set(missing):
    stem = os.path.splitext(os.path.basename(gin_files[-1]))[0]
    runs = sorted(files.glob(os.path.join(cli.CHECKOUT, "gin", "runs", f"{stem}_*.gin")),
                  key=lambda p: (not p.endswith("_cpu.gin"), p))
    example = f", e.g. --gin_file={os.path.relpath(runs[0], cli.CHECKOUT)}" if runs else ""
    raise cli.UserError(
        f"--gin_file={gin_files[-1]} is not a run file: it binds nothing of train (a model or "
        f"size file, which run files include); give a run file from gin/runs{example}.")
  if missing:
    raise cli.UserError(
        f"{', '.join('train.' + m for m in missing)} not bound by {list(gin_files)}; bind them in "
        "the run file or with --gin.train.<name>=VALUE (gin/runs/base_cpu.gin binds them all).")


def config_bindings(text: str) -> dict[str, str]:
  """{"scope/selector.arg" or "MACRO": the value as gin writes it} of a config string."""
  from gin import config_parser  # pylint: disable=import-outside-toplevel
  parser = config_parser.ConfigParser(text, gin.config.ParserDelegate(skip_unknown=True))
  found = {}
  for statement in parser:
    if isinstance(statement, config_parser.BindingStatement):
      key = "/".join(filter(None, [statement.scope, statement.selector]))
      found[f"{key}.{statement.arg_name}" if statement.arg_name else key] = repr(statement.value)
  return found
