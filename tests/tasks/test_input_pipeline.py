"""tasks/pipeline/input_pipeline.py: a saved stream position resumes at the same data, any host count.

Real pipelines (the registry's tasks over the first lines of NTREX-128 and
Multi30k) in one process; hosts are given by process_index/process_count,
the same code path a multi-process run takes (tests/training/test_multihost.py runs
the processes). Speed is not asserted here: bench/resume_time.py measures it.
"""

import logging

import numpy as np
import pytest

from vmsst_tasks import registry
from vmsst_tasks.pipeline import input_pipeline

BATCH, LENGTH, SEED = 8, 16, 5
MIXTURE = "vmsst_ntrex_multi30k"


@pytest.fixture(scope="module", autouse=True)
def _registered(small_data_dir, tiny_vocab_path):
  registry.register_tasks(str(small_data_dir), tiny_vocab_path)


def _iterator(start_step=0, position=None, index=0, count=1, **kwargs):
  """The stream; a resume at `start_step` restores the position saved in the folder `position`
  (a checkpoint's data position item, here written by hand)."""
  kwargs.setdefault("host_data", "slice")  # the host-count independent split
  kwargs.setdefault("seed", SEED)
  return input_pipeline.train_iterator(
      MIXTURE, batch_size=BATCH, sequence_length=LENGTH, start_step=start_step,
      restore_position=position and (lambda fresh: fresh.restore(position)),
      process_index=index, process_count=count, **kwargs)


def _take(batches, n):
  return [next(batches) for _ in range(n)]


def _assert_equal(got, want):
  assert len(got) == len(want)
  for g, w in zip(got, want):
    assert g.keys() == w.keys()
    for key in w:
      np.testing.assert_array_equal(g[key], w[key], err_msg=key)


@pytest.fixture(scope="module", name="uninterrupted")
def _uninterrupted():
  """Batches 1..9 of one uninterrupted 1-host stream."""
  return _take(_iterator(), 9)


@pytest.mark.slow  # over ~7 s (docs/results/tests/)
def test_a_restored_position_continues_with_the_uninterrupted_batches(uninterrupted, tmp_path):
  batches = _iterator()
  _take(batches, 5)
  batches.save(str(tmp_path))
  assert (tmp_path / "stream.position.json").exists()
  resumed = _iterator(start_step=5, position=str(tmp_path))
  assert resumed.restored_from == 5
  _assert_equal(_take(resumed, 4), uninterrupted[5:])
  assert not np.array_equal(uninterrupted[5]["tokens_a"], uninterrupted[6]["tokens_a"])


@pytest.mark.slow  # ~16 s: five pipelines
def test_two_hosts_resume_a_one_host_position_and_one_host_a_two_host_position(
    uninterrupted, tmp_path):
  one = _iterator()
  _take(one, 3)
  one.save(str(tmp_path / "one"))
  hosts = [_iterator(3, str(tmp_path / "one"), index=h, count=2) for h in range(2)]
  assert [h.restored_from for h in hosts] == [3, 3]
  for step in range(3, 6):
    rows = [next(h) for h in hosts]
    _assert_equal([{k: np.concatenate([r[k] for r in rows]) for k in rows[0]}],
                  [uninterrupted[step]])
  # The reverse: two hosts train to step 4 (host 1's save writes nothing), one host resumes.
  two = [_iterator(index=h, count=2) for h in range(2)]
  for host in two:
    _take(host, 4)
    host.save(str(tmp_path / "two"))
  resumed = _iterator(4, str(tmp_path / "two"))
  assert resumed.restored_from == 4
  _assert_equal(_take(resumed, 3), uninterrupted[4:7])


@pytest.mark.slow  # over ~7 s (docs/results/tests/)
def test_without_a_saved_position_the_stream_is_skipped_and_the_log_says_so(
    uninterrupted, tmp_path, caplog):
  """A checkpoint from before positions were saved (or of another stream) resumes the old way."""
  with caplog.at_level(logging.WARNING):
    old = _iterator(start_step=6, position=str(tmp_path))
  assert old.restored_from is None
  assert "no saved data position" in caplog.text and "skipping 6 batches" in caplog.text
  _assert_equal(_take(old, 3), uninterrupted[6:9])
  batches = _iterator()
  _take(batches, 2)
  batches.save(str(tmp_path))
  caplog.clear()
  with caplog.at_level(logging.WARNING):
    other = _iterator(start_step=2, position=str(tmp_path), seed=SEED + 1)
  assert other.restored_from is None and "another stream" in caplog.text


@pytest.mark.slow  # over ~7 s (docs/results/tests/)
def test_shard_info_positions_are_per_host(tmp_path):
  hosts = [_iterator(index=h, count=2, host_data="shard_info") for h in range(2)]
  for host in hosts:
    _take(host, 4)
    host.save(str(tmp_path))
  want = [_take(h, 2) for h in hosts]
  assert sorted(p.name for p in tmp_path.iterdir()) == [
      "host0-of-2", "host0-of-2.position.json", "host1-of-2", "host1-of-2.position.json"]
  for h in range(2):
    resumed = _iterator(4, str(tmp_path), index=h, count=2, host_data="shard_info")
    assert resumed.restored_from == 4
    _assert_equal(_take(resumed, 2), want[h])
  # On another host count the shards differ: skipped, not restored.
  assert _iterator(4, str(tmp_path), index=0, count=4, host_data="shard_info").restored_from is None


@pytest.mark.slow  # over ~7 s (docs/results/tests/)
def test_a_position_that_does_not_restore_falls_back_to_skipping(uninterrupted, tmp_path, caplog):
  batches = _iterator()
  _take(batches, 2)
  batches.save(str(tmp_path))
  for path in (tmp_path / "stream").iterdir():  # e.g. a pipeline changed by a code update
    path.write_bytes(b"not a checkpoint")
  with caplog.at_level(logging.WARNING):
    resumed = _iterator(start_step=2, position=str(tmp_path))
  assert resumed.restored_from is None and "does not fit this pipeline" in caplog.text
  _assert_equal(_take(resumed, 2), uninterrupted[2:4])
