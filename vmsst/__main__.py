"""`python -m vmsst`: the command index; `python -m vmsst <command> [flags]` runs one.

Each command's `--help` has its flags and an example. `<command>` is a name
of the index with or without its package (`embed`, `vmsst.embed`,
`vmsst_tasks.triplets`, `triplets`).

The index is read from the commands themselves, so it cannot drift from
them: a command is a top-level module of `vmsst` or of `vmsst_tasks` that
defines `main`, and its line is its docstring's first line. The modules are
parsed, not imported: the index prints in a fraction of a second, before
TensorFlow or JAX would load. A command that moved or went keeps its old
name in vmsst/base/old_names.py, so a script written against it fails with the fix.
"""

import ast
import importlib.util
import pkgutil
import runpy
import sys
from typing import NamedTuple

import vmsst
from vmsst.base import cli
from vmsst.base import console
from vmsst.base import old_names

PACKAGES = ("vmsst", "vmsst_tasks")
# The order a new user meets them; commands not named here follow, alphabetically.
ORDER = ("vocabulary", "train", "pretokenize", "teacher_cache", "evaluate", "embed", "score",
         "mine", "calibrate", "hard_negatives", "mine_beam", "export", "compare", "mt5_import",
         "compile", "learning_curves", "preservation")


class Command(NamedTuple):
  name: str  # the module `python -m` runs, e.g. vmsst.embed
  summary: str  # its docstring's first line


def package_dirs(package: str) -> list[str]:
  """Where `package`'s modules are, found without importing it (vmsst_tasks imports seqio)."""
  if package == "vmsst":
    return list(vmsst.__path__)
  spec = importlib.util.find_spec(package)
  return list(spec.submodule_search_locations) if spec else []


def read_command(module: pkgutil.ModuleInfo, package: str) -> Command | None:
  """`module` as a command (its source parsed, never run), or None when it defines no main."""
  name = f"{package}.{module.name}"
  tree = ast.parse(module.module_finder.find_spec(name).loader.get_source(name))
  if not any(isinstance(node, ast.FunctionDef) and node.name == "main" for node in tree.body):
    return None
  lines = (ast.get_docstring(tree) or "").strip().splitlines()
  return Command(name, lines[0] if lines else "")


def _rank(command: Command) -> tuple:
  package, short = command.name.split(".", 1)
  known = short in ORDER and package == "vmsst"
  return (PACKAGES.index(package), not known, ORDER.index(short) if known else 0, short)


def commands() -> list[Command]:
  """Every command, in the index's order."""
  found = []
  for package in PACKAGES:
    for module in pkgutil.iter_modules(package_dirs(package)):
      if module.ispkg or module.name == "__main__":
        continue
      command = read_command(module, package)
      if command:
        found.append(command)
  return sorted(found, key=_rank)


def index() -> str:
  """The command index, one command a line."""
  listed = commands()
  width = max(len(c.name) for c in listed) + len("python -m ")
  lines = ["vmsst: multilingual sentence embeddings. Commands (python -m <command> --help):"]
  lines += [f"  {'python -m ' + c.name:{width}}  {c.summary}" for c in listed]
  lines.append("From Python: vmsst.Encoder.from_checkpoint(MODEL_DIR).encode(sentences).")
  return "\n".join(lines)


def _means(name: str, module: str) -> bool:
  """Whether `name` names `module`: whole, without its package, or its last part."""
  return name in (module, module.split(".", 1)[1], module.rsplit(".", 1)[1])


def find(name: str, names: list[str]) -> str | None:
  """The module of `names` that `name` means, or None."""
  return next((module for module in names if _means(name, module)), None)


def main(argv: list[str]) -> int:
  """Prints the index, or runs `argv[1]` as `python -m <its module>` with the other arguments."""
  if len(argv) == 1 or argv[1] in ("-h", "--help", "help"):
    print(index())
    return 0
  names = [c.name for c in commands()]
  command = find(argv[1], names)
  if command is None and (old := find(argv[1], [*old_names.RENAMED, *old_names.REMOVED])):
    cli.old_name(old)
  if command is None:
    hint = cli.did_you_mean(argv[1], [c.rsplit(".", 1)[1] for c in names])
    print(f"error: no command {argv[1]}; {hint + ' ' if hint else ''}`python -m vmsst` lists "
          "them.", file=sys.stderr)
    return cli.USAGE_EXIT_CODE
  sys.argv = [command, *argv[2:]]
  console.quiet_startup()  # as the command's own `__main__` would, before it imports TensorFlow
  runpy.run_module(command, run_name="__main__", alter_sys=True)
  return 0


if __name__ == "__main__":
  sys.exit(main(sys.argv))
