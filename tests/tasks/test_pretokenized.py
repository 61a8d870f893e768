"""tasks/pipeline/pretokenized.py reads back the seqio path's batches, batch by batch.

Real pipelines (the registry's tasks over the first lines of NTREX-128 and
Multi30k) written by vmsst/pretokenize.py's `write_stream` (and its
command), read back through
`input_pipeline.train_iterator(pretokenized=...)` and compared with the
seqio path for the same seed; the position saved at a step resumes there.
"""

import logging

import numpy as np
import pytest

from vmsst.base import cli
from vmsst import pretokenize
from vmsst.base import run_directory
from vmsst_tasks.pipeline import input_pipeline
from vmsst_tasks.pipeline import pretokenized
from vmsst_tasks import registry

LENGTH, SEED = 16, 5
MIXTURE = "vmsst_ntrex_multi30k"
EXAMPLES = 101  # not a multiple of the batch or the shard: batches cross shards and the end


@pytest.fixture(scope="module", autouse=True)
def _registered(small_data_dir, tiny_vocab_path):
  registry.register_tasks(str(small_data_dir), tiny_vocab_path)


@pytest.fixture(scope="module", name="stream")
def _stream(tmp_path_factory):
  directory = str(tmp_path_factory.mktemp("stream"))
  pretokenize.write_stream(MIXTURE, directory, examples=EXAMPLES, sequence_length=LENGTH,
                           seed=SEED, shard_examples=24)
  return directory


def _iterator(batch_size, *, start_step=0, index=0, count=1, **kwargs):
  kwargs.setdefault("seed", SEED)
  return input_pipeline.train_iterator(MIXTURE, batch_size=batch_size, sequence_length=LENGTH,
                                       start_step=start_step, process_index=index,
                                       process_count=count, **kwargs)


def _take(batches, n):
  return [next(batches) for _ in range(n)]


def _assert_equal(got, want):
  assert len(got) == len(want)
  for g, w in zip(got, want):
    assert g.keys() == w.keys()
    for key in w:
      assert g[key].dtype == w[key].dtype, key
      np.testing.assert_array_equal(g[key], w[key], err_msg=key)


@pytest.mark.slow
@pytest.mark.parametrize("batch_size", [8, 12])
@pytest.mark.parametrize("host_data", ["slice", "shard_info"])
def test_the_stream_read_back_is_the_seqio_stream_batch_by_batch(stream, batch_size, host_data):
  steps = EXAMPLES // batch_size
  want = _take(_iterator(batch_size, host_data=host_data), steps)
  _assert_equal(_take(_iterator(batch_size, pretokenized=stream), steps), want)


@pytest.mark.slow
def test_two_hosts_take_their_rows_of_the_global_batch(stream):
  whole = _take(_iterator(8, pretokenized=stream), 3)
  halves = [_take(_iterator(8, index=h, count=2, pretokenized=stream), 3) for h in (0, 1)]
  for step, batch in enumerate(whole):
    for key, value in batch.items():
      np.testing.assert_array_equal(
          np.concatenate([halves[0][step][key], halves[1][step][key]]), value)


def test_a_saved_position_resumes_at_the_next_batch(stream, tmp_path):
  uninterrupted = _take(_iterator(8, pretokenized=stream), 6)
  first = _iterator(8, pretokenized=stream)
  _take(first, 4)
  first.save(str(tmp_path))
  resumed = _iterator(8, start_step=4, pretokenized=stream,
                      restore_position=lambda fresh: fresh.restore(str(tmp_path)))
  assert resumed.restored_from == 4
  _assert_equal(_take(resumed, 2), uninterrupted[4:])


def test_the_position_is_an_item_of_its_checkpoint_kept_and_deleted_with_it(stream, tmp_path):
  """checkpointing.save(batches=) writes the position into the step; a resume puts a fresh
  stream there; orbax's max_to_keep removes a step's position with it; a step saved without
  one (by an earlier version) says so and the stream continues by the step."""
  from vmsst.training import checkpointing  # pylint: disable=import-outside-toplevel
  state = {"w": np.arange(3.0, dtype=np.float32)}
  manager = checkpointing.make_manager(str(tmp_path), max_to_keep=2, asynchronous=False)
  uninterrupted = _take(_iterator(8, pretokenized=stream), 6)
  batches = _iterator(8, pretokenized=stream)
  for step in (1, 2, 3):
    next(batches)
    checkpointing.save(manager, step, state, batches=batches, force=True)
  checkpointing.save(manager, 4, state, force=True)  # no position
  assert manager.all_steps() == [3, 4]
  step_3 = tmp_path / run_directory.CHECKPOINTS / "3"
  assert (step_3 / run_directory.DATA_POSITION / "stream.pretokenized.json").is_file()
  resumed = _iterator(8, start_step=3, pretokenized=stream, restore_position=lambda fresh: (
      checkpointing.restore_position(manager, 3, fresh)))
  assert resumed.restored_from == 3
  _assert_equal(_take(resumed, 3), uninterrupted[3:])
  fresh = _iterator(8, pretokenized=stream)
  assert "holds no data position" in checkpointing.restore_position(manager, 4, fresh)
  assert "no checkpoint of step 1" in checkpointing.restore_position(manager, 1, fresh)


def test_past_its_end_the_stream_starts_again_and_says_so(stream, caplog):
  caplog.set_level(logging.WARNING)
  batches = _iterator(50, pretokenized=stream)
  first, _, third = _take(batches, 3)  # examples 0-49, 50-99, then 100 and 0-48
  np.testing.assert_array_equal(third["tokens_a"][1:], first["tokens_a"][:49])
  assert sum("starts again" in r.getMessage() for r in caplog.records) == 1


@pytest.mark.parametrize("change", [{"seed": SEED + 1}, {"sequence_length": LENGTH * 2}])
def test_a_stream_of_another_run_is_refused(stream, change):
  args = {"mixture_name": MIXTURE, "sequence_length": LENGTH, "seed": SEED, **change}
  with pytest.raises(cli.UserError, match="another run"):
    pretokenized.open_stream(stream, **args)


def test_a_missing_stream_names_the_command_that_writes_it(tmp_path):
  with pytest.raises(cli.UserError, match="python -m vmsst.pretokenize"):
    pretokenized.open_stream(str(tmp_path), mixture_name=MIXTURE, sequence_length=LENGTH,
                             seed=SEED)


def test_the_stream_holds_its_vocabulary_and_data_counts(stream):
  from vmsst.base import files  # pylint: disable=import-outside-toplevel
  assert files.exists(run_directory.of(stream).vocabulary)
  assert files.exists(run_directory.of(stream).data_counts)
  meta = pretokenized.open_stream(stream, mixture_name=MIXTURE, sequence_length=LENGTH,
                                  seed=SEED).meta
  assert meta["examples"] == EXAMPLES and meta["shards"] == 5
  assert meta["features"]["tokens_a"] == ["int32", [LENGTH]]


def _command(small_data_dir, tiny_vocab_path, output, *more):
  import subprocess  # pylint: disable=import-outside-toplevel
  import sys  # pylint: disable=import-outside-toplevel
  from vmsst.base import sentencepiece_vocabulary  # pylint: disable=import-outside-toplevel
  from vmsst_testing import ROOT  # pylint: disable=import-outside-toplevel
  size = sentencepiece_vocabulary.get_vocabulary(tiny_vocab_path).vocab_size
  return subprocess.run(
      [sys.executable, "-m", "vmsst.pretokenize", "--gin_file=gin/runs/contrastive_cpu.gin",
       f"--gin.DATA_DIR='{small_data_dir}'", f"--gin.VOCAB_PATH='{tiny_vocab_path}'",
       f"--gin.VOCAB_SIZE={size}", f"--output={output}", *more],
      cwd=ROOT, capture_output=True, text=True, timeout=600, check=False)


@pytest.mark.slow
def test_the_command_writes_a_run_files_stream(small_data_dir, tiny_vocab_path, tmp_path):
  done = _command(small_data_dir, tiny_vocab_path, tmp_path / "stream", "--examples=40")
  assert done.returncode == 0, done.stderr[-3000:]
  assert "train.pretokenized" in done.stdout
  meta = pretokenized.open_stream(str(tmp_path / "stream"), mixture_name=MIXTURE,
                                  sequence_length=32, seed=0).meta
  assert meta["examples"] == 40 and meta["shards"] == 1


def test_the_command_refuses_no_examples(small_data_dir, tiny_vocab_path, tmp_path):
  from vmsst_testing import assert_user_error  # pylint: disable=import-outside-toplevel
  assert_user_error(_command(small_data_dir, tiny_vocab_path, tmp_path / "s", "--examples=-1"),
                    "--examples")
