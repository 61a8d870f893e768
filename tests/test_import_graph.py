"""The layering of vmsst and vmsst_tasks, read from their import graph.

Every import counts, at module level or inside a function: a deferred import
is still a dependency. Layers, bottom to top (LAYERS): the base (vmsst/base/),
the data layer vmsst_tasks, the model core, the objectives, the
libraries that do not train, training, the comparison harness and the TPU
compiler, and the commands: every module at the top of vmsst/. A module may import its own
folder and the layers below it; nothing imports a layer above it, the data
layer imports only the base, the base imports no folder, and no module
imports itself back through a cycle.
"""

import ast
import collections
import pathlib

import pytest

import vmsst_testing

PACKAGES = {"vmsst": vmsst_testing.ROOT / "vmsst", "vmsst_tasks": vmsst_testing.ROOT / "tasks"}

# Bottom to top; the folders of one tuple are peers (neither imports the other).
LAYERS = (
    ("base",),
    ("vmsst_tasks",),
    ("model",),
    ("objectives",),
    ("encoding",),
    ("teachers",),
    ("mining",),
    ("evaluation",),
    ("export_formats",),
    ("build_data",),
    ("training",),
    ("comparison", "compiler"),
    ("commands",),
)
RANK = {layer: rank for rank, peers in enumerate(LAYERS) for layer in peers}


def _modules() -> dict[str, pathlib.Path]:
  """Dotted name -> file, `tasks/` under its installed name vmsst_tasks."""
  found = {}
  for package, folder in PACKAGES.items():
    for path in sorted(folder.rglob("*.py")):
      parts = [package, *path.relative_to(folder).with_suffix("").parts]
      if parts[-1] == "__init__":
        parts.pop()
      found[".".join(parts)] = path
  return found


def _imported_names(node: ast.AST, package: str) -> list[str]:
  """Dotted names an import statement may load (`from a import b`: a.b, a module or not)."""
  if isinstance(node, ast.Import):
    return [alias.name for alias in node.names]
  if not isinstance(node, ast.ImportFrom):
    return []
  base = node.module or ""
  if node.level:
    parts = package.split(".")[:len(package.split(".")) - node.level + 1]
    base = ".".join(parts + ([base] if base else []))
  return [f"{base}.{alias.name}" for alias in node.names]


def _resolve(name: str, modules) -> str | None:
  """The module `name` loads: itself, or the closest enclosing module (an attribute's owner)."""
  while name and name not in modules:
    name = name.rpartition(".")[0]
  return name or None


def _graph(modules) -> dict[str, set[str]]:
  """Module -> the modules of vmsst and vmsst_tasks it imports anywhere in its file."""
  edges = collections.defaultdict(set)
  for module, path in modules.items():
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
      for name in _imported_names(node, package):
        target = _resolve(name, modules)
        if target and target != module:
          edges[module].add(target)
  return edges


MODULES = _modules()
GRAPH = _graph(MODULES)


def layer(module: str) -> str:
  """A module's layer: its folder (`base` among them), or `commands` (vmsst's top level)."""
  parts = module.split(".")
  if parts[0] == "vmsst_tasks":
    return "vmsst_tasks"
  if len(parts) > 2 or (len(parts) == 2 and MODULES[module].name == "__init__.py"):
    return parts[1]
  return "commands"


def _cycles(edges) -> list[list[str]]:
  """Strongly connected sets of more than one module (Tarjan, iterative)."""
  index, low, on_stack, stack, found = {}, {}, set(), [], []
  for root in MODULES:
    if root in index:
      continue
    work = [(root, iter(sorted(edges[root])))]
    index[root] = low[root] = len(index)
    stack.append(root)
    on_stack.add(root)
    while work:
      node, children = work[-1]
      child = next(children, None)
      if child is not None:
        if child not in index:
          index[child] = low[child] = len(index)
          stack.append(child)
          on_stack.add(child)
          work.append((child, iter(sorted(edges[child]))))
        elif child in on_stack:
          low[node] = min(low[node], index[child])
        continue
      work.pop()
      if work:
        low[work[-1][0]] = min(low[work[-1][0]], low[node])
      if low[node] == index[node]:
        component = []
        while True:
          member = stack.pop()
          on_stack.discard(member)
          component.append(member)
          if member == node:
            break
        if len(component) > 1:
          found.append(sorted(component))
  return found


def _imports(source_layers, target_test) -> list[str]:
  """`module -> target` of the layers' modules whose target passes."""
  return sorted(f"{module} -> {target}" for module, targets in GRAPH.items()
                if layer(module) in source_layers for target in targets if target_test(target))


def test_the_graph_sees_both_packages_and_deferred_imports():
  """No tautology: tasks is read under its installed name, and an import inside a function counts."""
  assert "vmsst_tasks.registry.common" in MODULES and "vmsst.model.network" in MODULES
  assert "vmsst_tasks.sources.pair_readers" in GRAPH["vmsst_tasks.sources.opus_readers"]
  assert "vmsst_tasks.registry.data_counts" in GRAPH["vmsst_tasks.sources.vocabulary_training"]  # deferred
  assert _cycles({**{m: set() for m in MODULES}, "vmsst.base.cli": {"vmsst.base.files"},
                  "vmsst.base.files": {"vmsst.base.cli"}}) == [
                      ["vmsst.base.cli", "vmsst.base.files"]]


def test_every_folder_has_a_layer():
  assert {layer(m) for m in MODULES} <= set(RANK), {layer(m) for m in MODULES} - set(RANK)


def test_no_cycle_between_modules():
  """A package's __init__ naming its own submodules is no cycle; any other loop is."""
  cycles = [c for c in _cycles(GRAPH)
            if not all(m == c[0] or m.startswith(c[0] + ".") for m in c)]
  assert not cycles, "\n".join(" -> ".join(c) for c in cycles)


def test_no_folder_imports_a_layer_above_it():
  upward = [f"{edge} ({layer(edge.split()[0])} -> {layer(edge.split()[-1])})"
            for source in RANK
            for edge in _imports({source}, lambda t, s=source: t != "vmsst" and layer(t) != s
                                 and RANK[layer(t)] >= RANK[s])]
  assert not upward, "\n".join(upward)


def test_no_command_is_imported_as_a_library():
  """A command is a thin `main`; what another module needs lives in a folder below it."""
  found = _imports(set(RANK), lambda t: layer(t) == "commands" and t != "vmsst")
  assert not found, "\n".join(found)


def test_no_task_command_is_imported_as_a_library():
  """vmsst_tasks' commands (its top-level modules with a `main`) are thin too: what another
  module needs lives in sources/, registry/ or pipeline/."""
  commands = {name for name, path in MODULES.items()
              if name.count(".") == 1 and name.startswith("vmsst_tasks.")
              and "\ndef main(" in path.read_text(encoding="utf-8")}
  assert {"vmsst_tasks.triplets", "vmsst_tasks.wiki_entities"} <= commands, commands
  found = _imports(set(RANK), lambda t: t in commands)
  assert not found, "\n".join(found)


def test_the_data_layer_imports_only_the_base():
  found = _imports({"vmsst_tasks"}, lambda t: layer(t) not in ("vmsst_tasks", "base"))
  assert not found, "\n".join(found)


def test_the_base_imports_no_folder():
  found = _imports({"base"}, lambda t: layer(t) != "base")
  assert not found, "\n".join(found)


@pytest.mark.parametrize("folder", ["model", "objectives"])
def test_nothing_the_model_core_or_objectives_need_lives_in_tasks(folder):
  found = _imports({folder}, lambda t: layer(t) == "vmsst_tasks")
  assert not found, "\n".join(found)


def test_no_file_name_in_more_than_two_places():
  """A file's name says what it holds: a name shared by three modules (three `flags.py`) says
  too little to find the one meant."""
  places = collections.defaultdict(list)
  for path in MODULES.values():
    if path.name not in ("__init__.py", "__main__.py"):
      places[path.name].append(str(path.relative_to(vmsst_testing.ROOT)))
  crowded = {name: where for name, where in places.items() if len(where) > 2}
  assert not crowded, crowded
