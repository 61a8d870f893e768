"""Mining over quantized codes: candidates from the codes, re-ranked by float cosine."""

import numpy as np
import pytest

from vmsst.mining import bitext
from vmsst.mining import quantized


def _planted(n=400, distractors=200, dim=64, noise=0.35, seed=0):
  """Sources, and targets holding a noisy translation of each source among distractors.

  Returns (source [n, d], target [n + distractors, d], the target row of source i).
  """
  rng = np.random.default_rng(seed)
  source = rng.normal(size=(n, dim)).astype(np.float32)
  translations = source + noise * rng.normal(size=source.shape).astype(np.float32)
  target = np.concatenate([translations, rng.normal(size=(distractors, dim))]).astype(np.float32)
  order = rng.permutation(len(target))
  return source, target[order], np.argsort(order)[:n]


@pytest.mark.parametrize("precision", ["binary", "ubinary", "int8", "uint8"])
def test_quantized_mining_with_rerank_finds_the_planted_pairs_float_mining_finds(precision):
  source, target, planted = _planted()
  float_pairs, _ = bitext.mine(source, target, k=4)
  pairs, scores = bitext.mine(source, target, k=4,
                              quantized_search=quantized.QuantizedSearch(precision))
  assert {tuple(p) for p in pairs.tolist()} == {tuple(p) for p in float_pairs.tolist()}
  found = {tuple(p) for p in pairs.tolist()}
  assert found >= {(i, int(planted[i])) for i in range(len(source))}
  assert np.all(np.diff(scores) <= 0)


def test_binary_ivf_search_keeps_the_planted_pairs():
  source, target, planted = _planted(n=2000, distractors=500, dim=128, noise=0.3)
  pairs, _ = bitext.mine(source, target, k=4, index="ivf",
                         quantized_search=quantized.QuantizedSearch("binary", nprobe=8))
  found = {tuple(p) for p in pairs.tolist()}
  recovered = np.mean([(i, int(planted[i])) in found for i in range(len(source))])
  assert recovered > 0.97, recovered


def test_reranked_neighbours_are_the_float_ones_when_every_key_is_a_candidate():
  source, target, _ = _planted(n=50, distractors=10, dim=32)
  exact = bitext.neighbourhoods(source, target, 4)
  search = quantized.QuantizedSearch("binary", rescore_multiplier=len(target))
  coarse = bitext.neighbourhoods(source, target, 4, quantized_search=search)
  np.testing.assert_array_equal(coarse.forward_indices, exact.forward_indices)
  np.testing.assert_array_equal(coarse.backward_indices, exact.backward_indices)
  np.testing.assert_allclose(coarse.forward_scores, exact.forward_scores, atol=1e-5)


def test_rerank_breaks_ties_to_the_lower_index_and_drops_faiss_fillers():
  queries = np.array([[1.0, 0.0]], np.float32)
  keys = np.array([[0.0, 1.0], [1.0, 0.0], [1.0, 0.0]], np.float32)
  scores, indices = quantized.rerank(queries, keys, np.array([[2, -1, 1, 0]]), 2)
  np.testing.assert_array_equal(indices, [[1, 2]])
  np.testing.assert_allclose(scores, [[1.0, 1.0]])


def test_bad_options_are_errors_naming_the_flag():
  source, target, _ = _planted(n=20, distractors=0, dim=16)
  with pytest.raises(ValueError, match="--rescore_multiplier"):
    bitext.mine(source, target, quantized_search=quantized.QuantizedSearch("binary", 0))
  with pytest.raises(ValueError, match="--index=exact"):
    bitext.mine(source, target, index="ivf", quantized_search=quantized.QuantizedSearch("int8"))
  with pytest.raises(ValueError, match="--precision=float32"):
    bitext.mine(source, target, quantized_search=quantized.QuantizedSearch("float32"))


def test_mine_files_with_binary_codes_writes_the_float_pairs(tmp_path):
  from vmsst.mining import file_mining  # pylint: disable=g-import-not-at-top
  source, target, _ = _planted(n=120, distractors=40, dim=64)
  for name, vectors in (("src", source), ("trg", target)):
    (tmp_path / name).write_text("\n".join(f"{name} {i}" for i in range(len(vectors))),
                                 encoding="utf-8")
    np.save(tmp_path / f"{name}.npy", vectors)
  common = dict(src_embeddings=str(tmp_path / "src.npy"), trg_embeddings=str(tmp_path / "trg.npy"),
                progress=False)
  file_mining.mine_files(None, tmp_path / "src", tmp_path / "trg", tmp_path / "float.tsv", **common)
  summary = file_mining.mine_files(None, tmp_path / "src", tmp_path / "trg",
                                   tmp_path / "binary.tsv",
                                   quantized_search=quantized.QuantizedSearch("binary"), **common)
  assert "binary codes searched" in str(summary)
  pairs = lambda name: {tuple(line.split("\t")[1:]) for line in
                        (tmp_path / name).read_text(encoding="utf-8").splitlines()}
  assert pairs("binary.tsv") == pairs("float.tsv")
