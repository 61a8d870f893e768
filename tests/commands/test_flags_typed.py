"""Every flag of every command is typed on a command line by some test, or says here why not.

A flag no test passes as `--name` can break (be misspelt, lose its effect, clash with another
command's) with every test still green. The flags are read from the commands themselves: one
child process runs each command of the index (`python -m vmsst`, vmsst/__main__.py) as
`python -m` would, with `cli.run` stopped before `main`, and lists the flags it defined. The
tests are then searched for `--name` (or `--noname`); `--help` listings (test_help.py) do not
count, as they type nothing.

By name: a flag two commands define (mine's and mine_beam's --k, each encoder flag on every
inference command) counts as typed when a test types it on either. A name has one meaning
across commands (vmsst/encoding/encoder_flags.py defines the shared ones once), so a typed flag is
parsed and used; what a command does with it is that command's tests' to check.
"""

import json
import pathlib
import re
import subprocess
import sys

import pytest

import vmsst_testing
from vmsst import __main__ as index

HERE = pathlib.Path(__file__).resolve()
TESTS = vmsst_testing.ROOT / "tests"
# Sources that name flags without typing them on a command line.
NOT_TYPING = (HERE, TESTS / "commands" / "test_help.py")

# Flags no test types, each with why. Keep it short: a flag that is cheap to type belongs in a
# test instead (e.g. one more argument to an existing command-line test).
ALLOWED = {
    "find_max_batch": "compile's: a search of TPU compiles (libtpu, minutes); "
                      "step.find_max_batch is tested in tests/test_compile.py",
    "sts_languages": "preservation's: its effect needs a query-tower-tuned model (minutes of "
                     "training); preservation.evaluate(sts_languages=) runs in "
                     "tests/objectives/test_query_tower.py",
}

# Run as `python -c CODE COMMAND...`: each command's module as __main__ (its flag definitions
# included), stopped at `cli.run`; prints {command: [[flag, defining module], ...]}. A command's
# flags are removed before the next one defines its own (several share --output), and a library
# module that defined some is made to define them again for the next command: its memoized
# definers forgotten (gin_utils.define_flags), itself imported afresh if it defines them at
# import (holds FlagHolders, as vmsst/training/flags.py).
CODE = r"""
import json, runpy, sys
from absl import flags
from vmsst.base import cli

class Stop(Exception):
  pass

def stop(*args, **kwargs):
  raise Stop

def define_again(name):
  module = sys.modules.get(name)
  if module is None:
    return
  for value in list(vars(module).values()):
    if hasattr(value, "cache_clear"):
      value.cache_clear()
  if any(isinstance(v, flags.FlagHolder) for v in vars(module).values()):
    del sys.modules[name]
    parent, _, child = name.rpartition(".")
    if parent in sys.modules and hasattr(sys.modules[parent], child):
      delattr(sys.modules[parent], child)

cli.run, cli.answer_help, cli.check_early = stop, lambda: None, lambda check: None
found = {}
for name in sys.argv[1:]:
  before = set(flags.FLAGS)
  sys.argv[:] = [name]
  try:
    runpy.run_module(name, run_name="__main__", alter_sys=True)
  except Stop:
    pass
  new = sorted(set(flags.FLAGS) - before)
  found[name] = [[flag, flags.FLAGS.find_module_defining_flag(flag)] for flag in new]
  for flag in new:
    delattr(flags.FLAGS, flag)
  for module in {module for _, module in found[name]}:
    define_again(module)
print(json.dumps(found))
"""


def command_flags() -> dict[str, list[str]]:
  """{command: the flags it defines}: ours (its own module's or a vmsst module's), not those
  of the libraries it imports (absl's, Beam's)."""
  done = subprocess.run([sys.executable, "-c", CODE, *(c.name for c in index.commands())],
                        cwd=vmsst_testing.ROOT, capture_output=True, text=True, timeout=600,
                        check=False)
  assert done.returncode == 0, done.stderr[-3000:]
  found = json.loads(done.stdout.splitlines()[-1])
  return {command: [flag for flag, module in flags if _ours(module)]
          for command, flags in found.items()}


def _ours(module: str | None) -> bool:
  """Whether absl's defining module of a flag is a command (run as __main__, absl names it by
  its file) or a module of vmsst / vmsst_tasks."""
  return (module is None or module.endswith(".py")
          or module.split(".")[0] in ("vmsst", "vmsst_tasks", "__main__"))


def typed_in_tests() -> str:
  """The test sources that may type a flag, as one text."""
  return "\n".join(path.read_text(encoding="utf-8") for path in sorted(TESTS.rglob("*.py"))
                   if path not in NOT_TYPING)


def is_typed(flag: str, text: str) -> bool:
  """Whether `--flag` (or `--noflag`) appears, not as the start of a longer name."""
  return re.search(rf"(?<![\w-])--(no)?{re.escape(flag)}(?![\w])", text) is not None


@pytest.mark.slow  # one process importing every command (TensorFlow, JAX, seqio, Beam): ~20 s
def test_every_commands_flag_is_typed_by_a_test_or_allowed_with_a_reason():
  flags = command_flags()
  assert {"truncate_dim", "precision", "input"} <= set(flags["vmsst.embed"])  # the walk works
  text = typed_in_tests()
  untyped = sorted({f"--{flag} ({command})" for command, names in flags.items()
                    for flag in names if flag not in ALLOWED and not is_typed(flag, text)})
  assert not untyped, ("flags no test types on a command line: add them to a command-line "
                       f"test, or to ALLOWED with the reason: {untyped}")
  defined = {flag for names in flags.values() for flag in names}
  stale = sorted(flag for flag in ALLOWED if flag not in defined or is_typed(flag, text))
  assert not stale, f"ALLOWED entries now typed by a test, or no command's flag: {stale}"
  assert all(reason.strip() for reason in ALLOWED.values())


def test_is_typed_matches_whole_flag_names_only():
  assert is_typed("k", 'run("--k=4")') and is_typed("sq8", "'--nosq8'")
  assert not is_typed("src", "--src_embeddings=x") and not is_typed("k", "--key_block=1")
  assert not is_typed("output", "---output") and not is_typed("put", "--output")
