r"""Pre-tokenized training streams: seqio's example stream on disk, read without TensorFlow.

  python -m vmsst.pretokenize --gin_file=gin/runs/vmsst_cpu.gin --output=DIR \
      [--examples=N] [--gin.X=Y ...]
  python -m vmsst.train --gin_file=gin/runs/vmsst_cpu.gin --gin.train.pretokenized="'DIR'"

This module is the format and its reader (numpy only), used by
input_pipeline.train_iterator(pretokenized=DIR). The writer,
vmsst/pretokenize.py (needs seqio and TensorFlow, and the train
loop's gin names, so it lives on the model side), runs the run file's
registration and takes the first N examples of the very stream `train`
would read through seqio (tasks/pipeline/input_pipeline.py: the mixture shuffled by
the run's seed, its rates, preprocessors and PairFeatureConverter features,
the global stream of host_data="slice"); the reader (`open_stream`,
`StreamBatches`) cuts that stream into batches again. One host's batches are
therefore those of the seqio path batch for batch, for any batch size
(tests/tasks/test_pretokenized.py), and P hosts take their rows of each
global batch as host_data="slice" does. Past N examples the reader starts
the written stream again (logged once): write N ≥ train_steps × batch_size
to avoid it.

The format is plain numpy, one compressed `.npz` per shard of examples
(`shard-00000.npz` … holding every feature, in the smallest integer type
that holds its values; `stream.json` records the original types), rather
than ArrayRecord read by Grain, because:
- an accelerator image has numpy but neither grain nor array_record (both
  would travel as wheels, array_record with a native extension), and a
  shard of fixed-length integer arrays needs no record format;
- the position in the stream is one integer (the next global batch), so a
  resume is constant time without Grain's iterator state, and it is saved
  as an item of each checkpoint the same way as a tf.data position
  (MODEL_DIR/checkpoints/<step>/data_position/stream.pretokenized.json);
- compressed, NTREX-128 + Multi30k at length 32 take ~40 bytes an example
  (padding and masks compress away), so a comparison's stream travels in the
  64 MiB a device call carries.

DIR also holds `spm.model` (the vocabulary `train` copies into MODEL_DIR)
and `data_counts.json` (the registration's read/kept/skipped counts).
"""

import json
from typing import Any

import numpy as np
from absl import logging

from vmsst.base import cli
from vmsst.base import files
from vmsst.base import run_directory

STREAM_FILE = "stream.json"
_POSITION_FILE = "stream.pretokenized.json"  # in a checkpoint's data position item
SHARD_EXAMPLES = 1 << 16


def _shard_name(index: int) -> str:
  return f"shard-{index:05d}.npz"


def _narrowest(values: np.ndarray) -> np.ndarray:
  """`values` in the smallest integer type that holds them (floats unchanged)."""
  if not np.issubdtype(values.dtype, np.integer) or not values.size:
    return values
  low, high = int(values.min()), int(values.max())
  for dtype in (np.uint8, np.int8, np.uint16, np.int16, np.uint32, np.int32):
    info = np.iinfo(dtype)
    if info.min <= low and high <= info.max:
      return values.astype(dtype)
  return values


def write_shard(directory: str, index: int, examples: dict[str, np.ndarray]) -> None:
  """Writes one shard: every feature [n, ...] of n consecutive examples of the stream."""
  files.save_npz_compressed(files.join(directory, _shard_name(index)),
                            **{k: _narrowest(v) for k, v in examples.items()})


class Stream:
  """A written stream: its description and its examples, a shard in memory at a time.

  Attributes:
    directory: where it was written.
    meta: stream.json (mixture, seed, sequence_length, examples,
      shard_examples, features {name: [dtype, shape]}, vocab_size).
  """

  def __init__(self, directory: str, meta: dict[str, Any]):
    self.directory, self.meta = directory, meta
    self._shard_index, self._shard = -1, {}

  @property
  def examples(self) -> int:
    return int(self.meta["examples"])

  @property
  def vocabulary_file(self) -> str:
    return run_directory.of(self.directory).vocabulary  # named as in the run it feeds

  def _load(self, index: int) -> dict[str, np.ndarray]:
    if index != self._shard_index:
      path = files.join(self.directory, _shard_name(index))
      if not files.exists(path):
        raise cli.UserError(f"{path} is missing: {self.directory} is incomplete; write it again "
                            "with `python -m vmsst.pretokenize`.")
      dtypes = {k: v[0] for k, v in self.meta["features"].items()}
      self._shard = {k: v.astype(dtypes[k]) for k, v in files.load_npz(path).items()}
      self._shard_index = index
    return self._shard

  def rows(self, start: int, stop: int) -> dict[str, np.ndarray]:
    """Examples [start, stop) of the stream, counting on from the start after its end."""
    per_shard, parts = int(self.meta["shard_examples"]), []
    position = start
    while position < stop:
      within = position % self.examples
      shard, offset = divmod(within, per_shard)
      arrays = self._load(shard)
      take = min(stop - position, len(next(iter(arrays.values()))) - offset)
      parts.append({k: v[offset:offset + take] for k, v in arrays.items()})
      position += take
    return {k: np.concatenate([p[k] for p in parts]) for k in parts[0]}


def open_stream(directory: str, *, mixture_name: str, sequence_length: int,
                seed: int) -> Stream:
  """The stream written in `directory`, checked against the run that reads it.

  Raises:
    cli.UserError: no stream there, or one of another mixture, length or seed
      (its batches would not be the run's), naming the fix.
  """
  path = files.join(directory, STREAM_FILE)
  if not files.exists(path):
    raise cli.UserError(f"train.pretokenized = {directory!r}: no {STREAM_FILE} there; write "
                        "the stream with `python -m vmsst.pretokenize --gin_file=RUN.gin "
                        f"--output={directory}`.")
  meta = json.loads(files.read_text(path))
  wanted = {"mixture": mixture_name, "sequence_length": sequence_length, "seed": seed}
  differ = {k: (meta.get(k), v) for k, v in wanted.items() if meta.get(k) != v}
  if differ:
    raise cli.UserError(f"{path} was written for another run: {differ} (written, this run); "
                        "write it again with this run's file and bindings "
                        "(`python -m vmsst.pretokenize`).")
  if not meta.get("examples"):
    raise cli.UserError(f"{path} holds no example: write it again with --examples > 0.")
  return Stream(directory, meta)


class StreamBatches:
  """This host's batches of a written stream, and save / restore of its position.

  The same interface as input_pipeline.HostBatches (`description`,
  `restored_from`, `save`, `restore`), so `train` and the checkpoint treat
  both alike. The position is the next global batch: one integer.
  """

  def __init__(self, stream: Stream, *, batch_size: int, rows: slice | None,
               description: dict[str, Any], writer: bool, start_batch: int = 0):
    self._stream, self._batch_size, self._rows, self._writer = stream, batch_size, rows, writer
    self.description = description
    self.restored_from = None
    self.saveable = True
    self.next_batch = start_batch
    self._wrapped = False

  def __iter__(self):
    return self

  def __next__(self) -> dict[str, np.ndarray]:
    start = self.next_batch * self._batch_size
    stop = start + self._batch_size
    if stop > self._stream.examples and not self._wrapped:
      self._wrapped = True
      logging.warning("the pre-tokenized stream %s holds %d examples, fewer than the %d this "
                      "run has read: it starts again from its first example (write it with a "
                      "larger --examples to avoid this)", self._stream.directory,
                      self._stream.examples, stop)
    batch = self._stream.rows(start, stop)
    self.next_batch += 1
    return batch if self._rows is None else {k: v[self._rows] for k, v in batch.items()}

  def save(self, directory: str) -> None:
    """Writes directory/stream.pretokenized.json: the description and the next batch."""
    if self._writer:
      files.write_text(files.join(directory, _POSITION_FILE),
                       json.dumps({"description": self.description,
                                   "next_batch": self.next_batch}, sort_keys=True) + "\n")

  def restore(self, directory: str) -> str | None:
    """Continues from a position saved by `save`; None if restored, else why not."""
    path = files.join(directory, _POSITION_FILE)
    if not files.exists(path):
      return f"no saved data position {path}"
    saved = json.loads(files.read_text(path))
    differ = {k: (saved["description"].get(k), v) for k, v in self.description.items()
              if k not in ("process_index", "process_count")
              and saved["description"].get(k) != v}
    if differ:
      return f"the saved data position is of another stream {differ} (saved, now)"
    self.next_batch = int(saved["next_batch"])
    return None


def train_batches(directory: str, mixture_name: str, *, batch_size: int, sequence_length: int,
                  seed: int, start_step: int, process_index: int, process_count: int,
                  restore_position=None) -> StreamBatches:
  """input_pipeline.train_iterator's pre-tokenized path: host rows of the global batches.

  A resume restores the position saved with its checkpoint (`restore_position`,
  as train_iterator's); without one it starts at batch `start_step` directly
  (as cheap: the reader seeks).
  """
  stream = open_stream(directory, mixture_name=mixture_name, sequence_length=sequence_length,
                       seed=seed)
  local = batch_size // process_count
  description = {"pretokenized": files.abspath(directory), "mixture": mixture_name,
                 "batch_size": batch_size, "sequence_length": sequence_length, "seed": seed,
                 "examples": stream.examples, "process_index": process_index,
                 "process_count": process_count}
  rows = None if process_count == 1 else slice(process_index * local, (process_index + 1) * local)
  batches = StreamBatches(stream, batch_size=batch_size, rows=rows, description=description,
                          writer=process_index == 0, start_batch=start_step)
  if start_step and restore_position:
    why = restore_position(batches)
    if why is None:
      batches.restored_from = start_step
      logging.info("data position of step %d restored", start_step)
    else:
      logging.warning("%s; the pre-tokenized stream continues at batch %d", why, start_step)
      batches.next_batch = start_step
  return batches
