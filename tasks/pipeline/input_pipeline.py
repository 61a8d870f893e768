"""The training loop's input: this host's batches, and the stream position saved at checkpoints.

  batches = train_iterator("vmsst_ntrex_multi30k", batch_size=B, sequence_length=L, seed=0,
                           start_step=N, restore_position=put_back)
  next(batches)              -> {feature: numpy [B/P, ...]}
  batches.save(directory)    # its position; batches.restore(directory) puts a fresh one there

Resume in constant time: the position of the input stream (a tf.data
iterator checkpoint, as t5x saves one per host) is saved as an item of each
model checkpoint (`MODEL_DIR/checkpoints/<step>/data_position/`: the loop
hands the stream to vmsst.training.checkpointing.save, whose orbax handler
calls `save`), and restored with it (`restore_position`).
A restored iterator continues with the batch the uninterrupted run would
have drawn next, without replaying the `N` batches before it (before, a
restart skipped them through the whole pipeline: 98 s at step 5,000 of a
tiny run, and every host re-tokenizing 184M pairs at step 90,000 of a paper
run). tf.data's own checkpoint was chosen over an index-based source
(ArrayRecord/Grain) because every seqio source, mixture rate, shuffle
buffer and preprocessor keeps working unchanged: the saved state is theirs.

With host_data="slice" (host-count independence) the position is the
stream's, not a host's: the tf.data pipeline yields the global batch B,
identical on every host, and each host keeps its rows in Python; that
global iterator is what is saved (once, by process 0), so a checkpoint of a
run on P hosts resumes on any P' that divides B at the same data. With
host_data="shard_info" (the default: each host reads its own share) each
host's pipeline is saved (`host<h>-of-<P>`), resumable on the same P only
(the global batch depends on P in that mode anyway; on another P the
stream is skipped to the step, logged).

A pipeline that cannot be saved (a Python generator inside: the OPUS
sources under InputPolicy.strict) and a checkpoint without a saved position
(written before positions were, or by another configuration) resume the old
way, by skipping `N` batches, with a log line saying so.

Where seqio and TensorFlow are absent (an accelerator image), the same
stream is read from files written ahead by `python -m vmsst.pretokenize`
(`train.pretokenized = DIR`, vmsst_tasks/pipeline/pretokenized.py): the same batches
for the seed, its position (one integer) saved the same way.
"""

import json
import os
from typing import Any, Callable, Sequence

import jax
from absl import logging

from vmsst.base import files
from vmsst.base.gin_utils import gin
from vmsst_tasks.pipeline import pretokenized as pretokenized_lib

# seqio and TensorFlow are imported where the seqio path runs: the
# pre-tokenized path (`train_iterator(pretokenized=DIR)`) needs neither, on an
# accelerator image that has neither.

HOST_DATA_MODES = ("slice", "shard_info")
_DESCRIPTION = "position.json"  # written last: its presence marks a complete position


class HostBatches:
  """This host's batches of a tf.data stream, and save / restore of its position.

  Attributes:
    description: what the stream is (mixture, seed, sizes, host split);
      a saved position restores only into the same description.
    restored_from: the step whose saved position this iterator continues,
      or None (a fresh stream, or one skipped to its step).
  """

  def __init__(self, dataset: "tf.data.Dataset", *, rows: slice | None,
               description: dict[str, Any], writer: bool):
    self._iterator = iter(dataset)
    self._rows, self._writer = rows, writer
    self.description = description
    self.restored_from = None
    self.saveable = True

  def __iter__(self):
    return self

  def __next__(self) -> dict[str, Any]:
    batch = {k: v.numpy() for k, v in next(self._iterator).items()}
    return batch if self._rows is None else {k: v[self._rows] for k, v in batch.items()}

  def _name(self) -> str:
    if self.description["host_data"] == "slice":
      return "stream"
    return f"host{self.description['process_index']}-of-{self.description['process_count']}"

  def save(self, directory: str) -> None:
    """Writes the iterator's state under directory/<name> (this host's share of the work)."""
    if not self._writer or not self.saveable:
      return
    import tensorflow as tf  # pylint: disable=import-outside-toplevel
    name = self._name()
    try:
      tf.train.Checkpoint(iterator=self._iterator).write(os.path.join(directory, name, "ckpt"))
    except tf.errors.FailedPreconditionError as e:  # e.g. "PyFunc is stateful"
      self.saveable = False
      logging.warning("the input pipeline cannot be saved (%s): a resume from a later "
                      "checkpoint will skip its steps' batches instead (time grows with the "
                      "step). Read files with tf.data (not a Python generator) to avoid it.",
                      str(e).splitlines()[0][:200])
      return
    files.write_text(files.join(directory, f"{name}.{_DESCRIPTION}"),
                     json.dumps(self.description, sort_keys=True) + "\n")

  def restore(self, directory: str) -> str | None:
    """Restores a position saved by `save`; None if restored, else why not (for the log)."""
    import tensorflow as tf  # pylint: disable=import-outside-toplevel
    name = self._name()
    marker = files.join(directory, f"{name}.{_DESCRIPTION}")
    if not files.exists(marker):
      return f"no saved data position {marker}"
    saved = json.loads(files.read_text(marker))
    differ = {k: (saved.get(k), v) for k, v in self.description.items()
              if k not in _ANY_HOST_COUNT and saved.get(k) != v}
    if differ:
      return f"the saved data position is of another stream {differ} (saved, now)"
    try:
      tf.train.Checkpoint(iterator=self._iterator).read(
          os.path.join(directory, name, "ckpt")).assert_consumed()
    except (tf.errors.OpError, AssertionError) as e:  # e.g. a pipeline changed by a code update
      return f"the saved data position {directory} does not fit this pipeline ({str(e)[:200]})"
    return None


def seqio_available() -> bool:
  """Whether seqio (and so TensorFlow) imports: the registry's task families need it."""
  try:
    import seqio  # pylint: disable=import-outside-toplevel,unused-import
  except ImportError:
    return False
  return True


# Keys of the description a "slice" position restores across: the host split.
_ANY_HOST_COUNT = ("process_index", "process_count")


@gin.configurable(denylist=["mixture_name", "batch_size", "sequence_length", "seed",
                            "start_step", "process_index", "process_count",
                            "restore_position", "pretokenized"])
def train_iterator(mixture_name: str, *, batch_size: int, sequence_length: int, seed: int,
                   start_step: int, host_data: str = "shard_info",
                   process_index: int | None = None,
                   process_count: int | None = None,
                   restore_position: Callable[[Any], str | None] | None = None,
                   use_cached: bool = False, cache_dirs: Sequence[str] = (),
                   pretokenized: str | None = None
                   ) -> "HostBatches | pretokenized_lib.StreamBatches":
  """Host-local numpy batches of `batch_size / process_count` pairs, from `start_step` on.

  How the P hosts split the data (`host_data`, gin: train_iterator.host_data):
    "shard_info" (default): seqio.ShardInfo(h, P): each host reads and
      preprocesses only its 1/P of the examples and shuffles them itself, so
      the input work per host falls with P (bench/input_pipeline.py); the
      global batch then depends on P (same distribution, different pairs), so
      runs on different host counts diverge, and a saved position resumes on
      the same P only.
    "slice" (host-count independence): every host builds the same
      deterministic global stream (seqio, shuffled by `seed`) and keeps its
      rows [h·B/P, (h+1)·B/P) of each global batch B. The union of the host
      batches is exactly the 1-process batch, so a run's parameters, and its
      saved data position, do not depend on the host count (a v4-64 run
      resumes on a v4-128 at the same data); each host reads and tokenizes
      all the data, so each must keep up with the global rate.
  With one host both are the same stream.
  Host h's rows land on its devices because partitioning.make_mesh orders the
  data axis by process (Trainer.global_batch assembles them).

  Args:
    batch_size: the global batch B; must divide over the P hosts.
    start_step: batches already trained on: the stream continues after them,
      from the position saved at that step if `restore_position` restores
      one, else by skipping them (the module docstring).
    process_index, process_count: h and P; default jax.process_index() and
      jax.process_count() (given explicitly to check the split in one process).
    restore_position: called with the fresh stream when `start_step` > 0: puts
      it at the position saved with that step's checkpoint and returns None,
      or returns why not (vmsst.training.checkpointing.restore_position;
      `lambda fresh: fresh.restore(directory)` for a position saved by hand).
    use_cached: read the mixture's tasks from the cache that
      `python -m seqio.scripts.cache_tasks_main` wrote (tokens and language
      ids, preprocessed once: tasks/cache_registration.py) instead of
      preprocessing on the fly; gin: train_iterator.use_cached = True.
    cache_dirs: where to look for those caches (they become the process's seqio cache
      directories, replacing an earlier run's).
    pretokenized: a directory written by `python -m vmsst.pretokenize`
      (train.pretokenized): the same stream read from files, without seqio or
      TensorFlow (vmsst_tasks/pipeline/pretokenized.py); `host_data`, `use_cached` and
      `cache_dirs` are then the writer's business: every host takes its rows
      of the global batch, as with "slice".
  Returns:
    a HostBatches (or, pre-tokenized, a pretokenized.StreamBatches) iterator of
    {feature: numpy [B/P, ...]} (PairFeatureConverter features).
  """
  index = jax.process_index() if process_index is None else process_index
  count = jax.process_count() if process_count is None else process_count
  if host_data not in HOST_DATA_MODES:
    raise ValueError(f"train_iterator.host_data = {host_data!r}; pick one of {HOST_DATA_MODES}")
  if batch_size % count:
    raise ValueError(f"BATCH_SIZE {batch_size} does not divide over {count} hosts; set it to a "
                     f"multiple of {count}.")
  if pretokenized:
    return pretokenized_lib.train_batches(
        pretokenized, mixture_name, batch_size=batch_size, sequence_length=sequence_length,
        seed=seed, start_step=start_step, process_index=index, process_count=count,
        restore_position=restore_position)
  import seqio  # pylint: disable=import-outside-toplevel
  from vmsst_tasks.registry.feature_converters import PairFeatureConverter  # pylint: disable=import-outside-toplevel
  description = {"mixture": mixture_name, "batch_size": batch_size,
                 "sequence_length": sequence_length, "seed": seed, "host_data": host_data,
                 "use_cached": use_cached, "process_index": index, "process_count": count}
  if cache_dirs:
    # Set, not added to: seqio's cache directories are the process's, and a task's cache is
    # looked up in the first that holds one, so an earlier run's (another in this process:
    # a comparison, a test) would serve its examples instead of this run's.
    seqio.set_global_cache_dirs(list(cache_dirs))

  def build(skip: int) -> HostBatches:
    shard_info = (seqio.ShardInfo(index=index, num_shards=count)
                  if host_data == "shard_info" else None)
    dataset = seqio.get_dataset(
        mixture_name,
        task_feature_lengths={"tokens_a": sequence_length, "tokens_b": sequence_length},
        feature_converter=PairFeatureConverter(pack=False),
        dataset_split="train", shuffle=True, num_epochs=None, seed=seed, verbose=False,
        shard_info=shard_info, use_cached=use_cached)
    local = batch_size // count
    if host_data == "slice":  # the global batch; this host's rows are cut in HostBatches
      dataset, rows = dataset.batch(batch_size, drop_remainder=True), slice(index * local,
                                                                              (index + 1) * local)
    else:
      dataset, rows = dataset.batch(local, drop_remainder=True), None
    dataset = dataset.skip(skip).prefetch(2)
    return HostBatches(dataset, rows=None if count == 1 else rows, description=description,
                       writer=host_data == "shard_info" or index == 0)

  if not start_step:
    return build(0)
  batches = build(0)
  why = restore_position(batches) if restore_position else "no saved position given"
  if why is None:
    batches.restored_from = start_step
    logging.info("data position of step %d restored", start_step)
    return batches
  logging.warning("%s; resuming the input by skipping %d batches through the pipeline (time "
                  "grows with the step; checkpoints written from now on save the position)",
                  why, start_step)
  return build(start_step)
