"""vmsst.mining.approximate: IVF neighbours (flat, PQ, SQ8 keys; key shards merged) against exact
search, its recall sample, training sample and option checks."""

import numpy as np
import pytest

import vmsst_testing
from vmsst.mining import approximate
from vmsst.mining import bitext


@pytest.mark.slow  # over ~7 s (docs/results/tests/)
@pytest.mark.parametrize("pq,sq8", [(0, False), (8, False), (0, True)])
def test_ivf_mines_the_pairs_exact_mining_finds(pq, sq8):
  source, target = vmsst_testing.clustered_embeddings()
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
  source, target = vmsst_testing.clustered_embeddings(600)
  want = bitext.neighbourhoods(source, target, 4)
  got = bitext.neighbourhoods(source, target, 4,
                            ivf=approximate.IvfOptions(nlist=8, nprobe=8))
  np.testing.assert_array_equal(got.forward_indices, want.forward_indices)
  np.testing.assert_array_equal(got.backward_indices, want.backward_indices)
  np.testing.assert_allclose(got.forward_scores, want.forward_scores, atol=1e-5)


def test_key_shards_of_a_full_probe_give_the_exact_neighbours():
  """Each shard's index answers for its slice; the merged lists are one exact search's."""
  source, target = vmsst_testing.clustered_embeddings(600)
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


def test_sampled_recall_counts_the_exact_neighbours_found():
  source, target = vmsst_testing.clustered_embeddings(600)
  exact = bitext.neighbourhoods(source, target, 4)
  assert approximate.sampled_recall(source, target, exact.forward_indices,
                                              block=64) == 1.0
  half = exact.forward_indices.copy()
  half[:, 2:] = 10**6  # rows no key has: two of the four neighbours missed
  assert approximate.sampled_recall(source, target, half, sample=100) == 0.5


def test_the_training_sample_grows_with_the_cells_faiss_asks_39_per_cell():
  options = approximate.IvfOptions()
  assert options.cells(10**6) == 4000 and options.training_keys(10**6) == 256_000
  assert options.training_keys(10**5) == 100_000 and options.training_keys(5_000) == 5_000
  assert approximate.IvfOptions(train_size=2000).training_keys(10**6) == 2000


def test_sq8_keys_rescored_by_exact_cosine_give_the_exact_neighbours_of_a_full_probe():
  """8-bit codes only choose the RERANK * k candidates; their true cosines rank them."""
  source, target = vmsst_testing.clustered_embeddings(600)
  want = bitext.neighbourhoods(source, target, 4)
  got = bitext.neighbourhoods(source, target, 4,
                            ivf=approximate.IvfOptions(nlist=8, nprobe=8, sq8=True))
  np.testing.assert_array_equal(got.forward_indices, want.forward_indices)
  np.testing.assert_allclose(got.forward_scores, want.forward_scores, atol=1e-5)


@pytest.mark.parametrize("options,message", [
    ({"nlist": 5000}, r"--nlist=5000 exceeds the 600 keys; pass --nlist=0"),
    ({"pq": 7}, r"--pq=7 must divide the embedding width 32 \(e\.g\. --pq=32\)"),
    ({"pq": 8, "sq8": True}, r"--pq=8 and --sq8 are two codes for the keys; pass one"),
    ({"nprobe": 0}, r"--nprobe=0 and --shards=1 must be >= 1"),
    ({"shards": 0}, r"--nprobe=16 and --shards=0 must be >= 1"),
    ({"train_size": -1}, r"--train_size=-1 must be >= 0 \(0: automatic\)"),
])
def test_bad_ivf_options_name_the_flag(options, message):
  source, target = vmsst_testing.clustered_embeddings(600)
  with pytest.raises(ValueError, match=message):
    bitext.mine(source, target, index="ivf", ivf=approximate.IvfOptions(**options))
