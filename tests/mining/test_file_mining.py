"""vmsst.mining.file_mining (`python -m vmsst.mine`'s library) against a brute-force reference:
the full cosine matrix, every margin x retrieval, ties, repeated and empty lines; bad input; IVF
runs, sharded and merged; and bitext.mine over device counts and backends on the same task."""

import dataclasses
import itertools
import pathlib

import jax
import numpy as np
import pytest

import vmsst_testing
from vmsst.encoding import protocol
from vmsst.mining import approximate
from vmsst.mining import bitext
from vmsst.mining import file_mining

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




# ------------------------------------------------------------------------ random sentences


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




# ------------------------------------------------------------------------------------ ties


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




# -------------------------------------------------------------------- devices and backends


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




# ---------------------------------------------------------------------------------- errors


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




# --------------------------------------------------- an approximate (IVF) index over files


def _ivf_inputs(tmp_path) -> dict:
  """600 clustered sentences a side as text files and .npy, for mine_files with an IVF index."""
  source, target = vmsst_testing.clustered_embeddings(600)
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
