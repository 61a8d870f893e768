"""The entity directory's format, shared by the data side that writes and reads it and the model.

`python -m vmsst_tasks.wiki_entities` writes OUTPUT/meta.json (sizes, how
entities are keyed, every count) and OUTPUT/entities.tsv (row i of the model's
entity table is line i); the data side reads its examples back, and the
EntityContrastive objective sizes its table and aligns pretrained vectors
with the same keys. A base module, so the objective reads the format without
importing the data layer. Titles are normalised one way for link targets,
`key<TAB>value` tables and Wikipedia2Vec's titles alike.
"""

import collections
import html
import json
from typing import Iterator

from vmsst.base import files

KEYS_TITLE, KEYS_ID = "title", "interlanguage_id"  # meta.json "entity_keys"


def normalize_title(title: str) -> str:
  """"computer_system#History" -> "Computer system": MediaWiki's first-letter case rule."""
  title = " ".join(html.unescape(title).split("#", 1)[0].replace("_", " ").split())
  return title[:1].upper() + title[1:]


def _table_rows(path: str, what: str) -> Iterator[tuple[str, str]]:
  """(normalised key, value) of each `key<TAB>value` line; a bad line names file:line, the fix."""
  with files.open(path) as f:
    for number, line in enumerate(f, 1):
      line = line.rstrip("\n")
      if not line.strip() or line.startswith("#"):
        continue
      fields = line.split("\t")
      if len(fields) != 2 or not fields[0].strip() or not fields[1].strip():
        raise ValueError(f"{path}:{number}: expected '<title><TAB><{what}>' (2 non-empty "
                         f"tab-separated fields), got {line!r}; fix or delete the line.")
      yield normalize_title(fields[0]), fields[1].strip()


def read_table(path: str, what: str) -> dict[str, str]:
  """A `key<TAB>value` file -> {normalised key: value} (a repeated key: the last line wins)."""
  return dict(_table_rows(path, what))


def read_multi_table(path: str, what: str) -> dict[str, list[str]]:
  """A `key<TAB>value` file whose keys may repeat -> {normalised key: [values, in file order]}."""
  table: dict[str, list[str]] = collections.defaultdict(list)
  for key, value in _table_rows(path, what):
    if value not in table[key]:
      table[key].append(value)
  return dict(table)


def load_meta(directory: str) -> dict:
  """OUTPUT/meta.json of an entity directory; a missing one names the command that writes it."""
  path = files.as_path(directory, "meta.json")
  if not path.exists():
    raise FileNotFoundError(f"{path} not found: run `python -m vmsst_tasks.wiki_entities "
                            f"--dump=<pages-articles.xml.bz2> --output={directory}` first.")
  return json.loads(path.read_text())


def load_entity_keys(directory: str) -> list[str]:
  """The entity vocabulary: key of row i of the entity table."""
  with files.open(files.join(directory, "entities.tsv")) as f:
    return [line.split("\t", 1)[0] for line in f if line.strip()]
