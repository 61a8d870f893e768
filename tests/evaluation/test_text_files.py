"""text_files: the one line reader every caller shares, and the TSV rule."""

import gzip
import pathlib

import pytest

from vmsst_tasks.sources import pair_readers
from vmsst.encoding import embed_files
from vmsst.base import text_files

REPO = pathlib.Path(__file__).resolve().parents[2]


def test_read_lines_splits_on_newline_only_and_strips_the_ends(tmp_path):
  path = tmp_path / "a.txt"
  path.write_bytes("\ufeff a b \r\nx\u2028y\n z\rw \n a\t\n".encode("utf-8"))
  assert text_files.read_lines(path) == ["a b", "x\u2028y", "z\rw", "a\t"]  # TAB: a field


def test_read_lines_reads_gzip_and_keeps_blank_lines_in_place(tmp_path):
  path = tmp_path / "a.txt.gz"
  with gzip.open(path, "wb") as f:
    f.write(b"one\n\nthree")
  assert text_files.read_lines(path) == ["one", "", "three"]


def test_read_lines_names_file_and_line_of_a_non_utf8_byte(tmp_path):
  path = tmp_path / "latin1.txt"
  path.write_bytes("ok\ncaf\u00e9\n".encode("latin1"))
  with pytest.raises(ValueError, match=r"latin1\.txt:2: byte 0xe9 is not UTF-8; re-encode"):
    text_files.read_lines(path)


def test_there_is_one_read_lines():
  assert not hasattr(pair_readers, "read_lines") and not hasattr(embed_files, "read_lines")
  defining = [p.relative_to(REPO).as_posix() for d in ("vmsst", "tasks", "bench")
              for p in sorted((REPO / d).rglob("*.py")) if "def read_lines(" in p.read_text()]
  assert defining == ["vmsst/base/text_files.py"]


def test_read_tsv_names_the_line_with_a_missing_field(tmp_path):
  path = tmp_path / "t.tsv"
  path.write_text("a\tb\n\nc\t\n", encoding="utf-8")
  with pytest.raises(ValueError, match=r"t\.tsv:3: expected 2 non-empty"):
    text_files.read_tsv(path, 2, "x, y")
