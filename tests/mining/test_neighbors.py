"""neighbors.knn against a plain numpy full-matrix search, ties, the two backends, and
key blocks sharded over the 8 forced CPU devices of tests/conftest.py."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import PartitionSpec as P

from vmsst.base import files
from vmsst.mining import approximate
from vmsst.mining import neighbors
from vmsst.mining import exact_scores
from vmsst.mining import twin_rows


def _brute_force(queries: np.ndarray, keys: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
  """Full cosine matrix, stable sort: equal scores keep the lower key index first."""
  q = queries / np.linalg.norm(queries, axis=1, keepdims=True)
  x = keys / np.linalg.norm(keys, axis=1, keepdims=True)
  sims = q.astype(np.float64) @ x.T.astype(np.float64)
  order = np.argsort(-sims, axis=1, kind="stable")[:, :k]
  return np.take_along_axis(sims, order, axis=1), order


def _random(n: int, d: int, seed: int) -> np.ndarray:
  return np.random.default_rng(seed).standard_normal((n, d)).astype(np.float32)


@pytest.mark.parametrize("k", [1, 4])
@pytest.mark.parametrize("query_block,key_block", [(7, 11), (64, 5), (1000, 1000), (3, 4)])
def test_jax_matches_brute_force(k, query_block, key_block):
  # 37 and 53 are prime: the last blocks pad (except where one block holds a whole side).
  queries, keys = _random(37, 16, 0), _random(53, 16, 1)
  scores, indices = neighbors.knn(queries, keys, k, query_block=query_block,
                                  key_block=key_block)
  want_scores, want_indices = _brute_force(queries, keys, k)
  assert scores.shape == indices.shape == (37, k)
  assert scores.dtype == np.float64 and indices.dtype == np.int64
  np.testing.assert_array_equal(indices, want_indices)
  np.testing.assert_allclose(scores, want_scores, atol=1e-5)
  assert np.all(np.diff(scores, axis=1) <= 0)


def test_key_block_smaller_than_k_is_raised_to_k():
  queries, keys = _random(5, 8, 2), _random(20, 8, 3)
  _, indices = neighbors.knn(queries, keys, 6, key_block=2)
  np.testing.assert_array_equal(indices, _brute_force(queries, keys, 6)[1])


def test_padding_is_never_returned_even_when_real_scores_are_negative():
  # Every real cosine is -1 < 0 = the cosine of a zero padding row; the mask
  # (-inf) must still keep padding out.
  keys = -np.ones((5, 3), np.float32)
  _, indices = neighbors.knn(np.ones((2, 3), np.float32), keys, 5, key_block=4)
  np.testing.assert_array_equal(indices, [[0, 1, 2, 3, 4]] * 2)


def test_lax_top_k_puts_the_lower_index_first_among_equal_values():
  # The merge relies on this; if XLA ever changes it, this fails first.
  values, positions = jax.lax.top_k(jnp.array([[1., 3., 3., 2., 3., 1.]]), 4)
  np.testing.assert_array_equal(positions, [[1, 2, 4, 3]])
  np.testing.assert_array_equal(values, [[3., 3., 3., 2.]])


@pytest.mark.parametrize("backend", ["jax", "faiss"])
def test_ties_resolve_to_the_lower_key_index_across_blocks(backend):
  # Keys are one-hot, 10 copies each of e_0..e_3 interleaved: cosines are a
  # single product, so copies tie exactly, and copies span several key blocks.
  keys = np.eye(4, dtype=np.float32)[np.arange(40) % 4]
  queries = _random(9, 4, 4)
  _, indices = neighbors.knn(queries, keys, 6, key_block=7, query_block=4, backend=backend)
  best = np.argmax(queries, axis=1)
  np.testing.assert_array_equal(indices, best[:, None] + 4 * np.arange(6)[None, :])


def test_ties_within_a_row_straddling_blocks_match_brute_force():
  keys = np.repeat(_random(6, 5, 5), 3, axis=0)  # rows 3i, 3i+1, 3i+2 equal
  queries = _random(4, 5, 6)
  _, indices = neighbors.knn(queries, keys, 5, key_block=4)
  np.testing.assert_array_equal(indices, _brute_force(queries, keys, 5)[1])


@pytest.mark.parametrize("k", [1, 4])
def test_faiss_and_jax_agree(k):
  queries, keys = _random(45, 12, 7), _random(70, 12, 8)
  jax_scores, jax_indices = neighbors.knn(queries, keys, k, query_block=16, key_block=32)
  faiss_scores, faiss_indices = neighbors.knn(queries, keys, k, query_block=16,
                                              backend="faiss")
  np.testing.assert_array_equal(jax_indices, faiss_indices)
  np.testing.assert_allclose(jax_scores, faiss_scores, atol=1e-5)
  assert faiss_scores.dtype == np.float64 and faiss_indices.dtype == np.int64


def test_scale_of_inputs_does_not_matter():
  queries, keys = _random(10, 6, 9), _random(12, 6, 10)
  _, a = neighbors.knn(queries, keys, 3)
  _, b = neighbors.knn(3 * queries, 0.01 * keys, 3)
  np.testing.assert_array_equal(a, b)


# ------------------------------------------------------------- sharded over devices


@pytest.fixture(name="devices")
def _devices() -> list[jax.Device]:
  if jax.device_count() < 8:
    pytest.skip("needs XLA_FLAGS=--xla_force_host_platform_device_count=8 (tests/conftest.py)")
  return jax.devices()


@pytest.mark.parametrize("k,key_block", [(1, 8), (3, 24), (4, 40), (5, 1)])
def test_eight_devices_match_one_device_and_brute_force(devices, k, key_block):
  # 61 keys: the last block pads, so some devices hold only padding; (5, 1) raises
  # the block to 8 slices of 5.
  queries, keys = _random(19, 8, 14), _random(61, 8, 15)
  one = neighbors.knn(queries, keys, k, query_block=7, key_block=key_block,
                      devices=devices[:1])
  eight = neighbors.knn(queries, keys, k, query_block=7, key_block=key_block,
                        devices=devices)
  three = neighbors.knn(queries, keys, k, query_block=7, key_block=key_block,
                        devices=devices[2:5])
  want_scores, want_indices = _brute_force(queries, keys, k)
  for scores, indices in (one, eight, three):
    np.testing.assert_array_equal(indices, want_indices)
    np.testing.assert_allclose(scores, want_scores, atol=1e-5)
  # Bit for bit: a slice's float32 matmul rounds otherwise than the whole block's, but the
  # float64 re-score depends on the two rows only.
  np.testing.assert_array_equal(one[0], eight[0])
  np.testing.assert_array_equal(three[0], eight[0])


def test_ties_across_device_slices_resolve_to_the_lower_key_index(devices):
  # 10 interleaved copies each of e_0..e_3; with 8 slices of 3 keys every tie
  # spans several devices and two key blocks.
  keys = np.eye(4, dtype=np.float32)[np.arange(40) % 4]
  queries = _random(9, 4, 16)
  _, indices = neighbors.knn(queries, keys, 6, key_block=24, query_block=4, devices=devices)
  best = np.argmax(queries, axis=1)
  np.testing.assert_array_equal(indices, best[:, None] + 4 * np.arange(6)[None, :])


def test_each_key_block_is_split_over_every_device(devices):
  merge = neighbors._block_merger(tuple(devices), 2)  # pylint: disable=protected-access
  args = (np.zeros((4, 2), np.float32), np.zeros((4, 2), np.int32), np.zeros((4, 3), np.float32),
          np.zeros((16, 3), np.float32), np.int32(0), np.int32(16))
  keys_sharding = merge.lower(*args).compile().input_shardings[0][3]
  assert keys_sharding.spec == P("keys") and len(keys_sharding.device_set) == 8
  assert keys_sharding.shard_shape((16, 3)) == (2, 3)


@pytest.mark.parametrize("num_keys,key_block,k,num_devices,want", [
    (53, 8192, 4, 8, 56),         # one block: 8 slices of 7
    (10_000, 8192, 4, 1, 5000),   # two equal blocks, not 8192 + 1808 padded
    (10**6, 8192, 4, 8, 8136),    # 123 blocks of 8 slices of 1017
    (10**6, 100, 4, 3, 102),      # 3 slices of 34
    (20, 2, 6, 1, 6),             # raised to k
    (100, 16, 4, 8, 32),          # 2 per device < k: raised to 4 per device
])
def test_block_sizes(num_keys, key_block, k, num_devices, want):
  _, keys = neighbors.block_sizes(37, num_keys, k, query_block=7, key_block=key_block,
                                  num_devices=num_devices)
  assert keys == want


@pytest.mark.parametrize("num_queries,query_block,want", [
    (37, 7, 7), (10_000, 2048, 2000), (5, 2048, 5), (0, 2048, 1), (4096, 2048, 2048)])
def test_query_blocks_are_balanced(num_queries, query_block, want):
  queries, _ = neighbors.block_sizes(num_queries, 10, 1, query_block=query_block, key_block=10,
                                     num_devices=1)
  assert queries == want


def test_no_queries():
  scores, indices = neighbors.knn(np.zeros((0, 4)), _random(3, 4, 11), 2)
  assert scores.shape == indices.shape == (0, 2)


@pytest.mark.parametrize("k", [0, 4])
def test_k_out_of_range_is_a_clear_error(k):
  with pytest.raises(ValueError, match=r"k=\d+ nearest neighbours requested but there are 3 keys"):
    neighbors.knn(_random(2, 4, 12), _random(3, 4, 13), k)


def test_bad_inputs_are_clear_errors():
  with pytest.raises(ValueError, match="width 4 but keys 5"):
    neighbors.knn(_random(2, 4, 0), _random(3, 5, 0), 1)
  with pytest.raises(ValueError, match="2-D"):
    neighbors.knn(np.zeros(4), _random(3, 4, 0), 1)
  with pytest.raises(ValueError, match="'jax' or 'faiss'"):
    neighbors.knn(_random(2, 4, 0), _random(3, 4, 0), 1, backend="annoy")


@pytest.mark.parametrize("k,query_block,key_block", [(1, 7, 11), (4, 64, 5), (3, 1000, 1000)])
def test_both_directions_from_one_pass_equal_two_searches(k, query_block, key_block):
  source, target = _random(37, 16, 20), _random(53, 16, 21)
  forward_scores, forward, backward_scores, backward = neighbors.knn_both(
      source, target, k, query_block=query_block, key_block=key_block)
  for scores, indices, (queries, keys) in ((forward_scores, forward, (source, target)),
                                           (backward_scores, backward, (target, source))):
    want_scores, want_indices = _brute_force(queries, keys, k)
    np.testing.assert_array_equal(indices, want_indices)
    np.testing.assert_allclose(scores, want_scores, atol=1e-5)


def test_both_directions_break_ties_to_the_lower_index_on_any_device_count(devices):
  # Repeated unit vectors on both sides: every neighbour list is a run of ties.
  source = np.eye(4, dtype=np.float32)[np.arange(22) % 4]
  target = np.eye(4, dtype=np.float32)[np.arange(41) % 4]
  for subset in (devices[:1], devices[2:5], devices):
    _, forward, _, backward = neighbors.knn_both(source, target, 5, query_block=6,
                                                 key_block=16, devices=subset)
    np.testing.assert_array_equal(forward, (np.arange(22) % 4)[:, None] + 4 * np.arange(5))
    np.testing.assert_array_equal(backward, (np.arange(41) % 4)[:, None] + 4 * np.arange(5))


@pytest.mark.parametrize("axis", [0, 1])
@pytest.mark.parametrize("k", [1, 4, 7])
@pytest.mark.parametrize("values", ["random", "ties"])
def test_top_k_by_chunks_equals_lax_top_k(axis, k, values):
  shape = (512, 480)  # both axes are whole chunks and long enough for the chunked path
  scores = _random(*shape, 30)
  if values == "ties":  # five distinct values: every top-k is decided by the index order
    scores = np.floor(np.abs(scores) * 2) + 1
  scores[:, -3:] = -np.inf  # padding, as the kernels mask it
  scores[-3:, :] = -np.inf
  want = jax.lax.top_k(scores if axis == 1 else scores.T, k)
  got = jax.jit(neighbors.top_k_by_chunks, static_argnums=(1, 2))(scores, k, axis)
  np.testing.assert_array_equal(got[0], want[0])
  np.testing.assert_array_equal(got[1], want[1])


@pytest.mark.parametrize("num_devices", [1, 2])
def test_both_directions_on_chunked_blocks_match_brute_force(devices, num_devices):
  # Blocks of 304 x 608 keys per device (or 2 x 304): both top-k take the chunked path.
  rows, per_device, _ = neighbors.both_block_sizes(300, 600, 4, num_devices=num_devices,
                                                   query_block=512, key_block=1024)
  chunk = neighbors._CHUNK  # pylint: disable=protected-access
  assert rows % chunk == 0 and per_device >= 4 * 4 * chunk
  source, target = _random(300, 8, 31), _random(600, 8, 32)
  tied_source = np.eye(8, dtype=np.float32)[np.arange(300) % 8]
  tied_target = np.eye(8, dtype=np.float32)[np.arange(600) % 8]
  for queries, keys in ((source, target), (tied_source, tied_target)):
    _, forward, _, backward = neighbors.knn_both(queries, keys, 4, query_block=512,
                                                 key_block=1024,
                                                 devices=devices[:num_devices])
    np.testing.assert_array_equal(forward, _brute_force(queries, keys, 4)[1])
    np.testing.assert_array_equal(backward, _brute_force(keys, queries, 4)[1])


@pytest.mark.parametrize("num_devices,want", [(1, (1008, 1008, 10)), (8, (1008, 128, 10))])
def test_both_block_sizes_are_balanced_whole_chunks(num_devices, want):
  assert neighbors.both_block_sizes(10_000, 10_000, 4, num_devices=num_devices) == want


# ------------------------------------------- float64 re-score: one answer per geometry


def _float64_search(queries: np.ndarray, keys: np.ndarray, k: int):
  """The definition the re-score implements: float64 unit rows, products summed along d,
  stable sort (equal cosines keep the lower key row)."""
  def unit(x):
    x = x.astype(np.float64)
    return x / np.sqrt(np.sum(x * x, axis=1, keepdims=True))
  sims = np.sum(unit(queries)[:, None, :] * unit(keys)[None, :, :], axis=-1)
  order = np.argsort(-sims, axis=1, kind="stable")[:, :k]
  return np.take_along_axis(sims, order, axis=1), order


def _tied(seed: int) -> tuple[np.ndarray, np.ndarray]:
  """Queries and keys drawn with repeats from 120 vectors (exact ties in groups of up to
  about ten, as sentences cut at the same length share a vector), and 40 keys copied and
  moved by about one float32 ulp (near-ties a float32 product's rounding can reorder; a
  vector gets a few such copies, fewer than exact_scores.TIE_MARGIN)."""
  rng = np.random.default_rng(seed)
  base = _random(120, 48, seed)
  keys = base[rng.integers(0, 120, 400)]
  near = keys[rng.choice(400, 40, replace=False)]
  near += (1.5e-7 * rng.standard_normal(near.shape)).astype(np.float32)
  keys = np.concatenate([keys, near])[rng.permutation(440)]
  return base[rng.integers(0, 120, 150)], keys


def _sharded(queries, keys, k, shards, **options):
  """What the Beam pipeline does: one search per contiguous key shard, lists merged."""
  bounds = np.linspace(0, len(keys), shards + 1).round().astype(int)
  lists = []
  for start, stop in zip(bounds[:-1], bounds[1:]):
    scores, rows = neighbors.knn(queries, keys[start:stop], min(k, stop - start), **options)
    lists.append((scores, rows + start))
  return approximate.merge_top_k(lists, k)


@pytest.mark.parametrize("k", [1, 4])
def test_ties_give_the_same_scores_and_rows_whatever_the_blocks_devices_and_shards(
    devices, k):
  queries, keys = _tied(41)
  want_scores, want_rows = _float64_search(queries, keys, k)
  backward_scores, backward_rows = _float64_search(keys, queries, k)
  both = neighbors.knn_both(queries, keys, k, query_block=32, key_block=64, devices=devices)
  searches = {
      "default": neighbors.knn(queries, keys, k),
      "small blocks, 3 devices": neighbors.knn(queries, keys, k, query_block=17, key_block=13,
                                               devices=devices[2:5]),
      "faiss": neighbors.knn(queries, keys, k, backend="faiss", query_block=50),
      "both directions": both[:2],
      "7 faiss shards": _sharded(queries, keys, k, 7, backend="faiss"),
      "5 jax shards": _sharded(queries, keys, k, 5, key_block=16, devices=devices[:1]),
  }
  for name, (scores, rows) in searches.items():
    np.testing.assert_array_equal(rows, want_rows, err_msg=name)
    np.testing.assert_array_equal(scores, searches["default"][0], err_msg=name)
    np.testing.assert_allclose(scores, want_scores, rtol=0, atol=1e-15, err_msg=name)
  np.testing.assert_array_equal(both[3], backward_rows)
  np.testing.assert_array_equal(both[2], neighbors.knn(keys, queries, k, backend="faiss")[0])
  np.testing.assert_allclose(both[2], backward_scores, rtol=0, atol=1e-15)


def test_rescore_orders_by_float64_cosine_then_the_lower_row_and_drops_fillers():
  keys = np.array([[1, 0], [0, 1], [1, 0], [3, 1e-7], [1, 1]], np.float32)
  queries = np.array([[2, 0], [0, 0]], np.float32)  # a zero row scores 0 against every key
  scores, rows = exact_scores.rescore(queries, keys, np.array([[4, 2, -1, 3, 0], [3, 1, 0, -1, 2]]),
                                   3)
  # Key 3's float32 cosine rounds to 1.0, tying keys 0 and 2; in float64 it is below them.
  np.testing.assert_array_equal(rows, [[0, 2, 3], [0, 1, 2]])
  assert scores[0, 0] == scores[0, 1] == 1.0 and 1 - 1e-14 < scores[0, 2] < 1.0
  np.testing.assert_array_equal(scores[1], [0, 0, 0])
  assert scores.dtype == np.float64


def test_a_near_tie_just_past_the_kth_float32_place_is_still_a_candidate():
  assert exact_scores.candidates(4, 10**6) == 4 + exact_scores.TIE_MARGIN
  assert exact_scores.candidates(4, 6) == 6  # never more than the keys


def _twin_rows_by_whole_rows(keys: np.ndarray, k: int):
  """The definition `_twin_rows` implements: rows sorted bytewise as wholes (np.unique over
  the rows as bytes), each group's k lowest rows, -1 filling; None when every row differs."""
  keys = np.ascontiguousarray(keys)
  whole = keys.view(np.dtype((np.void, keys.dtype.itemsize * keys.shape[1])))[:, 0]
  _, group, sizes = np.unique(whole, return_inverse=True, return_counts=True)
  if sizes.max() == 1:
    return None
  members = [np.flatnonzero(group.reshape(-1) == g)[:k] for g in range(len(sizes))]
  lowest = np.array([np.pad(rows, (0, k - len(rows)), constant_values=-1) for rows in members])
  return lowest[group.reshape(-1)]


def _planted_twins(seed: int) -> np.ndarray:
  """500 random rows in which 60 rows are overwritten by copies of 25 others (groups of
  2 to about 6, spread over the whole matrix and so over any blocks), a group of 0.0
  rows, a -0.0 row (other bytes than 0.0: not its twin) and two NaN rows (same bytes)."""
  rng = np.random.default_rng(seed)
  keys = _random(500, 12, seed)
  sources = rng.choice(500, 25, replace=False)
  targets = rng.choice(np.setdiff1d(np.arange(500), sources), 60, replace=False)
  keys[targets] = keys[rng.choice(sources, 60)]
  keys[[3, 250, 499]] = 0.0
  keys[100] = -0.0
  keys[[7, 411]] = np.nan
  return keys


@pytest.mark.parametrize("block", [1, 37, 64, 10_000])
@pytest.mark.parametrize("k", [1, 3])
def test_twin_rows_equal_the_whole_row_sort_in_any_blocks(block, k):
  keys = _planted_twins(block + k)
  got = twin_rows._twin_rows(keys, k, block=block)
  want = _twin_rows_by_whole_rows(keys, k)
  np.testing.assert_array_equal(got, want)
  assert got[100].tolist() == [100] + [-1] * (k - 1)  # -0.0 is not 0.0's twin
  assert got[3, 0] == got[499, 0] == 3 and got[411, 0] == 7


def test_twin_rows_read_a_memory_map_in_blocks(tmp_path):
  keys = _planted_twins(5)
  files.save_npy(str(tmp_path / "keys.npy"), keys)
  mapped = files.load_npy(str(tmp_path / "keys.npy"), mmap=True)
  assert isinstance(mapped, np.memmap)
  np.testing.assert_array_equal(twin_rows._twin_rows(mapped, 4, block=64),
                                _twin_rows_by_whole_rows(keys, 4))


def test_a_hash_collision_never_joins_different_rows():
  keys = _planted_twins(9)
  sign = lambda rows: (np.asarray(rows)[:, 0] > 0).astype(np.uint64)  # two hashes in all
  one = lambda rows: np.zeros(len(rows), np.uint64)  # every row collides
  for row_hash in (sign, one):
    for block in (16, 10_000):
      np.testing.assert_array_equal(
          twin_rows._twin_rows(keys, 3, block=block, row_hash=row_hash),
          _twin_rows_by_whole_rows(keys, 3))
  distinct = _random(40, 6, 3)
  assert twin_rows._twin_rows(distinct, 2, row_hash=one) is None
  assert twin_rows._twin_rows(distinct, 2) is None


def test_no_twins_leave_the_candidates_as_they_are():
  keys = _random(30, 4, 2)
  found = np.array([[3, 1, -1], [0, 29, 5]])
  assert twin_rows.with_twins(found, keys, 2) is found
  keys[29] = keys[1]
  np.testing.assert_array_equal(twin_rows.with_twins(found, keys, 2),
                                [[-1, -1, -1, 1, 3, 29], [-1, -1, 0, 1, 5, 29]])
