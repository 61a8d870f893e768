"""The run directory has one owner: its entries' names appear nowhere else as literals.

vmsst/base/run_directory.py names every file and folder of a MODEL_DIR; a reader
or writer that spells one itself would drift from it (a renamed entry, a
bucket path joined by hand). This scans every string literal of vmsst/ and
vmsst_tasks (docstrings aside: prose may name the files) for a layout name, alone
or as a component of a path.
"""

import ast
import dataclasses
import pathlib

import pytest

from vmsst.base import run_directory

ROOT = pathlib.Path(__file__).resolve().parents[1]
OWNER = ROOT / "vmsst" / "base" / "run_directory.py"

# (file relative to the root, literal): why that literal is not a run-directory entry.
NOT_THE_LAYOUT = {
    ("vmsst/training/goodput.py", "checkpoints"): "goodput's category of wall time spent saving",
    ("vmsst/export_formats/model_card.py", "tensorboard"): "the name of TensorBoard's logger",
}


def _not_paths(tree: ast.AST) -> set[int]:
  """ids of the literals that are prose or a name of something else: docstrings, and the
  category of `goodput.timing("checkpoints")` (time spent saving)."""
  out = set()
  for node in ast.walk(tree):
    if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
      body = node.body
      if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
        out.add(id(body[0].value))
    if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
        and node.func.attr == "timing"):
      out.update(id(arg) for arg in node.args)
  return out


# The layout's names: the directory's entries and the data position item of a checkpoint
# (the state's item is orbax's "default", a word too common to scan for).
LAYOUT = (*run_directory.NAMES, run_directory.DATA_POSITION)


def _layout_name(text: str) -> str | None:
  """The layout name `text` is, or holds as a path component ("x/config.gin"); None."""
  if text in LAYOUT:
    return text
  if "/" in text and not any(c.isspace() for c in text):
    return next((part for part in text.split("/") if part in LAYOUT), None)
  return None


def layout_literals(path: pathlib.Path) -> list[tuple[int, str]]:
  """(line, name) of each string literal in `path` that spells a run-directory entry."""
  tree = ast.parse(path.read_text(encoding="utf-8"))
  skip = _not_paths(tree)
  return [(node.lineno, name) for node in ast.walk(tree)
          if isinstance(node, ast.Constant) and isinstance(node.value, str)
          and id(node) not in skip and (name := _layout_name(node.value))]


def test_no_module_but_the_owner_spells_a_run_directory_entry():
  found = []
  for path in sorted([*(ROOT / "vmsst").rglob("*.py"), *(ROOT / "tasks").rglob("*.py")]):
    if path == OWNER:
      continue
    relative = path.relative_to(ROOT).as_posix()
    found += [f"{relative}:{line}: {name!r}" for line, name in layout_literals(path)
              if (relative, name) not in NOT_THE_LAYOUT]
  assert not found, ("ask vmsst/base/run_directory.py for these entries (or give the literal a "
                     "reason in NOT_THE_LAYOUT):\n" + "\n".join(found))


@pytest.mark.parametrize("text,expected", [
    ("config.gin", "config.gin"), ("runs/x/eval/report.md", "eval"),
    ("the config.gin file", None), ("eval_every", None), ("gs://b/run/checkpoints", "checkpoints")])
def test_the_scan_finds_names_alone_and_in_paths_but_not_in_prose(text, expected):
  assert _layout_name(text) == expected


def test_every_entry_has_one_distinct_name_and_its_path():
  assert len(set(run_directory.NAMES)) == len(run_directory.NAMES)
  entries = dataclasses.asdict(run_directory.of("/m"))
  assert entries.pop("root") == "/m"
  paths = [*entries.values(), run_directory.evaluation("/m")]
  assert sorted(paths) == sorted(f"/m/{name}" for name in run_directory.NAMES)
  assert run_directory.of("m").checkpoints == str(pathlib.Path("m").resolve() / "checkpoints")
  assert run_directory.of("gs://b/run").checkpoints == "gs://b/run/checkpoints"
  assert run_directory.evaluation("gs://b/run", "report.md") == "gs://b/run/eval/report.md"


def test_what_a_run_writes_when_it_starts_is_what_the_next_run_finds(tmp_path):
  model_dir = str(tmp_path / "run")
  fresh = run_directory.read(model_dir)
  assert (fresh.checkpoint_steps, fresh.config, fresh.model_spec, fresh.progress) == (
      (), None, {}, None)
  vocabulary = tmp_path / "spm.model"
  vocabulary.write_bytes(b"pieces")
  paths = fresh.paths
  start = {"model_spec": {"objective": "vmsst", "sequence_length": 32},
           "data_counts": {"mixture": "m", "tasks": {}, "total": {}},
           "vocabulary": str(vocabulary)}
  run_directory.write_start(paths, config="train.batch_size = 8\n", **start)
  for step in ("2", "10", "4.orbax-checkpoint-tmp-1", "corrupt-6"):
    (tmp_path / "run" / "checkpoints" / step).mkdir(parents=True)
  run_directory.record_progress(paths, 11, previous=7)
  found = run_directory.read(model_dir)
  assert found.checkpoint_steps == (2, 10)  # neither a save in flight nor one set aside
  assert (found.config, found.model_spec, found.progress) == (
      "train.batch_size = 8\n", start["model_spec"], 11)
  assert run_directory.read_data_counts(paths) == start["data_counts"]
  assert pathlib.Path(paths.vocabulary).read_bytes() == b"pieces"
  # A resume with changed settings keeps the earlier config under the name model.json gives it.
  run_directory.write_start(paths, config="train.batch_size = 16\n",
                            keep_config_as=run_directory.kept_config(10), **start)
  assert (tmp_path / "run" / run_directory.kept_config(10)).read_text() == "train.batch_size = 8\n"
  assert run_directory.read(model_dir).config == "train.batch_size = 16\n"
  run_directory.record_progress(paths, 3, previous=11)  # a resume short of the earlier run
  assert run_directory.read(model_dir).progress == 11
