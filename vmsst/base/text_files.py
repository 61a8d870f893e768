"""Reading text files: one line rule and one TSV rule for every reader.

`read_lines` is the only line reader (training side files, benchmarks, the
embed / score / mine inputs). Lines split on "\\n" only: sentences may hold
U+2028 or a stray "\\r", which `str.splitlines` and universal-newline reading
would treat as line breaks and so shift every later line off its gold. Each
line is stripped of whitespace other than TAB at both ends (a CRLF's "\\r" and
a byte-order mark included): the tokenizer drops it anyway, and a stray
trailing space would otherwise make two equal sentences differ. TABs stay:
they separate fields, and "a<TAB>" is a pair with an empty side.
"""

import gzip
import pathlib
import re

from vmsst.base import files

FIX_ENCODING = ("re-encode the file as UTF-8 (iconv -f <its encoding> -t utf-8 in > out) or "
                "drop the bad bytes (iconv -f utf-8 -t utf-8 -c in > out)")
_ENDS = re.compile(r"^[^\S\t]+|[^\S\t]+$")  # Whitespace but TAB, at either end.


def read_lines(path: str | pathlib.Path) -> list[str]:
  """A UTF-8 (or .gz) file's lines, stripped; a final newline adds no empty line.

  Raises:
    ValueError: naming file and 1-based line of the first byte that is not
      UTF-8, or of a NUL byte (a binary file), and the fix (one bad line would
      shift every later one, so no skip).
  """
  data = files.read_bytes(path)
  if str(path).endswith(".gz"):
    data = gzip.decompress(data)
  try:
    text = data.decode("utf-8")
  except UnicodeDecodeError as e:
    line = data[:e.start].count(b"\n") + 1
    raise ValueError(f"{path}:{line}: byte {data[e.start]:#04x} is not UTF-8; "
                     f"{FIX_ENCODING}.") from None
  if "\0" in text:  # valid UTF-8, yet no sentence: a binary file given as text
    line = text[:text.index("\0")].count("\n") + 1
    raise ValueError(f"{path}:{line}: a NUL byte; this is a binary file, not text: give a UTF-8 "
                     "text file, one sentence per line.")
  lines = text.split("\n")
  if lines and lines[-1] == "":
    lines.pop()
  return [clean_line(line) for line in lines]


def clean_line(line: str) -> str:
  """One line as `read_lines` returns it (BOM dropped, whitespace but TAB cut at the ends):
  the Beam miner reads files through Beam's filesystems and must see the same sentences."""
  return _ENDS.sub("", line.replace("\ufeff", ""))


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
