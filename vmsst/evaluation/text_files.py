"""Reading benchmark text files: one line rule and one TSV rule for every reader.

Lines split on "\\n" only: sentences may hold U+2028 or a stray "\\r", which
`str.splitlines` and universal-newline reading would treat as line breaks and
so shift every later line off its gold. A CRLF line ending is removed.
"""

import pathlib


def read_lines(path: pathlib.Path) -> list[str]:
  """A UTF-8 file's lines without their ends; a final newline adds no empty line."""
  lines = pathlib.Path(path).read_text(encoding="utf-8").split("\n")
  if lines and lines[-1] == "":
    lines.pop()
  return [line[:-1] if line.endswith("\r") else line for line in lines]


def one_line(text: str) -> str:
  """Whitespace runs (TABs and line breaks included) collapsed to one space.

  What builders write must fit one line of one TSV field; STSb and its
  translations also differ only in such stray spaces.
  """
  return " ".join(text.split())


def read_tsv(path: pathlib.Path, columns: int, names: str) -> tuple[list[tuple], int]:
  """([(1-based line, field, ...)] of `columns` non-empty fields, blank lines skipped).

  Raises:
    ValueError: naming file and line, when a line has another number of fields
      or an empty one.
  """
  rows, blank = [], 0
  for number, line in enumerate(read_lines(path), 1):
    if not line.strip():
      blank += 1
      continue
    fields = [x.strip() for x in line.split("\t")]
    if len(fields) != columns or not all(fields):
      raise ValueError(f"{path}:{number}: expected {columns} non-empty TAB-separated fields "
                       f"({names}), got {len(fields)}: {line[:80]!r}; fix or delete the line.")
    rows.append((number, *fields))
  return rows, blank
