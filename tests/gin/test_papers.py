"""docs/papers/*.md and the paper run files agree, binding by binding.

Each paper file's table names, per setting, the gin file and binding that
carries it (`gin/runs/x.gin` `Configurable.param = value`) or the code that
does (`vmsst/module.py::name`). This test parses each named gin file with the
REQUIRED macros filled in and checks every binding's value, so a run file
cannot drift from the table (or the table from the papers' values) silently.
"""

import ast
import importlib
import pathlib
import re

import pytest

from vmsst.training import configurables
from vmsst.base.gin_utils import gin

configurables.register()  # what the run files name (imports TensorFlow: at collection)

ROOT = pathlib.Path(__file__).resolve().parents[2]
PAPER_DOCS = sorted((ROOT / "docs/papers").glob("*.md"))
REQUIRED = {"MODEL_DIR": "'/tmp/m'", "OPUS_DIR": "'/tmp/opus'", "VOCAB_PATH": "'/tmp/spm.model'",
            "INIT_PARAMS": "'/tmp/init.safetensors'", "INIT_MODEL_DIR": "'/tmp/init'",
            "ENTITY_DIR": "'/tmp/entities'", "TEACHER_DIM": "512", "NLI_DIR": "'/tmp/nli'",
            "TEACHER_MODEL_DIR": "'/tmp/teacher'", "WIKI_DIR": "'/tmp/wiki'"}
CELL_CODE = re.compile(r"`([^`]+)`")
BINDING = re.compile(r"^([A-Za-z_][\w.]*)\s*=\s*(.+)$")


def _rows(doc: pathlib.Path):
  """(line number, cells) of each body row of the doc's settings tables."""
  header = None
  for number, line in enumerate(doc.read_text(encoding="utf-8").splitlines(), 1):
    if not line.startswith("|"):
      header = None
      continue
    cells = [c.strip() for c in line.strip().strip("|").split("|")]
    if header is None:
      header = [c.lower() for c in cells]
      continue
    if set("".join(cells)) <= set("-: "):
      continue
    if "carried by" in header:
      yield number, dict(zip(header, cells))


def _carriers(cell: str):
  """[(gin file, binding, value)] and [(code path, name)] named in a cell."""
  bindings, code, current = [], [], None
  for text in CELL_CODE.findall(cell):
    text = text.strip()
    if text.endswith(".gin"):
      current = text
    elif (match := BINDING.match(text)) and current is not None:
      bindings.append((current, match.group(1), match.group(2).strip()))
    elif text.endswith(".py") or ".py::" in text:
      path, _, name = text.partition("::")
      code.append((path, name))
  return bindings, code


def _all_carriers():
  for doc in PAPER_DOCS:
    for number, row in _rows(doc):
      bindings, code = _carriers(row.get("carried by", ""))
      for gin_file, name, value in bindings:
        yield "binding", f"{doc.name}:{number}", (gin_file, name, value)
      for path, name in code:
        yield "code", f"{doc.name}:{number}", (path, name)


CARRIERS = list(_all_carriers())


def _parse(gin_file: str):
  gin.clear_config()
  gin.add_config_file_search_path(str(ROOT))
  gin.parse_config_files_and_bindings(
      [str(ROOT / gin_file)], [f"{k} = {v}" for k, v in REQUIRED.items()],
      finalize_config=False, skip_unknown=False)


def _resolved(value):
  """A queried gin value as a comparable Python value (references by name)."""
  if isinstance(value, gin.config.ConfigurableReference):
    if value.configurable.wrapped.__name__ == "macro" or value.configurable.name == "macro":
      return _resolved(value.scoped_configurable_fn())
    return "@" + value.configurable.name + ("()" if value.evaluate else "")
  if isinstance(value, (list, tuple)):
    return type(value)(_resolved(v) for v in value)
  return value


def _expected(text: str):
  if text.startswith("@"):
    return text
  try:
    return ast.literal_eval(text)
  except (ValueError, SyntaxError):
    return text


def test_every_paper_has_a_settings_file_with_rows():
  names = {p.stem for p in PAPER_DOCS}
  assert {"vmsst", "momentum_contrast", "distillation", "query_tower", "ease"} <= names
  for doc in PAPER_DOCS:
    rows = [row for _, row in _rows(doc)]
    assert len(rows) >= 5, f"{doc.name}: too few settings rows"
    for row in rows:
      verdict = row.get("same?", "").lower()
      assert verdict.startswith(("same", "different")), f"{doc.name}: {row}"
      assert "unknown" not in verdict


@pytest.mark.parametrize("kind,where,carrier", CARRIERS, ids=lambda x: str(x)[:80])
def test_row_matches_its_carrier(kind, where, carrier):
  if kind == "code":
    path, name = carrier
    assert (ROOT / path).exists(), f"{where}: {path} does not exist"
    if name:
      # tasks/ is installed as vmsst_tasks: importing it as `tasks` would load a
      # second copy whose gin configurables clash with the first.
      dotted = path[:-3].replace("/", ".")
      module = importlib.import_module(re.sub(r"^tasks\.", "vmsst_tasks.", dotted))
      target = module
      for part in name.split("."):
        assert hasattr(target, part), f"{where}: {path} has no {name}"
        target = getattr(target, part)
    return
  gin_file, name, value = carrier
  assert (ROOT / gin_file).exists(), f"{where}: {gin_file} does not exist"
  _parse(gin_file)
  try:
    bound = _resolved(gin.query_parameter(name))
  finally:
    gin.clear_config()
  assert bound == _expected(value), f"{where}: {gin_file} binds {name} = {bound!r}, table says {value}"
