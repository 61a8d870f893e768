"""The commands' old `python -m` names: each says what replaced it and runs nothing (exit 2).

A script written against an old name then fails with the fix, not with Python's "No module
named" or "Error while finding module specification". Two kinds of old name answer:

- one whose module is still a library (`vmsst.build_data.bucc`): its `__main__` guard calls
  `cli.old_name`;
- one whose module is gone (`vmsst.memory_report`, `vmsst.model_json`, and
  `vmsst.train.pretokenize`, whose package `vmsst.train` is a command module now): `Finder`,
  which `import vmsst` puts last on `sys.meta_path`, so it answers only names no file provides.
  `python -m` runs what its loader returns (`cli.old_name`); `import` gets ModuleNotFoundError.

`python -m vmsst <old name>` answers the same (vmsst/__main__.py). Standard library only: it is
installed whenever vmsst is imported.
"""

import importlib.abc
import importlib.machinery
import importlib.util
import sys
from typing import NamedTuple


class Successor(NamedTuple):
  command: str  # what to run instead, flags included where the old name implied them
  flags: str = "same flags"  # how the old name's flags map onto it


# Old name -> the command that does it now.
RENAMED = {
    "vmsst.memory_report": Successor(
        "vmsst.compile --topology=cpu --variants=none,remat,remat_factorized,scan,scan_remat",
        "same flags but --devices: --devices=real is --topology=local"),
    "vmsst.train.pretokenize": Successor("vmsst.pretokenize"),
    "vmsst.evaluation.preservation": Successor("vmsst.preservation"),
    "vmsst.build_data.bucc": Successor("vmsst.build_bucc"),
    "vmsst.build_data.question_retrieval": Successor("vmsst.build_question_retrieval"),
    "vmsst.build_data.clustering": Successor("vmsst.build_clustering"),
    "vmsst.build_data.flores": Successor("vmsst.build_flores"),
}
# Old name -> why it has no successor.
REMOVED = {
    "vmsst.model_json": "a model directory without model.json is no longer converted by a "
                        "command: loading one says how to convert it",
}


def message(old: str) -> str:
  """What `python -m OLD` prints: its successor and how the flags map, or why it went."""
  if old in REMOVED:
    return f"python -m {old} is removed: {REMOVED[old]}."
  successor = RENAMED[old]
  return f"python -m {old} is now python -m {successor.command} ({successor.flags}); run that."


class _Loader(importlib.abc.InspectLoader):
  """An old name whose module is gone: `python -m` runs `get_source`, `import` fails."""

  def get_source(self, fullname: str) -> str:
    return f"from vmsst.base import cli\ncli.old_name({fullname!r})\n"

  def exec_module(self, module) -> None:
    raise ModuleNotFoundError(message(module.__name__), name=module.__name__)


class Finder(importlib.abc.MetaPathFinder):
  """Finds the old names of `RENAMED` and `REMOVED` that no file provides."""

  def find_spec(self, fullname: str, path=None,
                target=None) -> importlib.machinery.ModuleSpec | None:
    del path, target
    if fullname not in RENAMED and fullname not in REMOVED:
      return None
    return importlib.util.spec_from_loader(fullname, _Loader(), is_package=False)


def install() -> None:
  """Puts `Finder` last on `sys.meta_path` (once): after every finder that reads files."""
  if not any(isinstance(finder, Finder) for finder in sys.meta_path):
    sys.meta_path.append(Finder())
