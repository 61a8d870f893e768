"""Where `train` writes its metrics: TensorBoard event files and the log, with or without TensorFlow.

clu's writers import TensorFlow (clu.metric_writers' SummaryWriter is
tf.summary), which an accelerator image lacks; there the events are written
by the tensorboard package's own event-file writer (pure Python, installed
with JAX images), as plain scalars that TensorBoard and
`vmsst.learning_curves` read the same way. Where TensorFlow imports, clu's
writer is kept, so events of existing runs keep their form.
"""

import time
from typing import Mapping

from absl import logging


def _tensorflow_available() -> bool:
  try:
    import tensorflow  # pylint: disable=import-outside-toplevel,unused-import
  except ImportError:
    return False
  return True


class EventWriter:
  """clu's MetricWriter subset `train` uses (write_scalars, flush, close), without TensorFlow."""

  def __init__(self, logdir: str, *, just_logging: bool):
    self._events = None
    if not just_logging:
      from tensorboard.summary.writer import event_file_writer  # pylint: disable=import-outside-toplevel
      self._events = event_file_writer.EventFileWriter(logdir)

  def write_scalars(self, step: int, scalars: Mapping[str, float]) -> None:
    logging.info("[%d] %s", step, ", ".join(f"{k}={float(v):.6g}" for k, v in scalars.items()))
    if self._events is None:
      return
    from tensorboard.compat.proto import event_pb2, summary_pb2  # pylint: disable=import-outside-toplevel
    values = [summary_pb2.Summary.Value(tag=k, simple_value=float(v)) for k, v in scalars.items()]
    self._events.add_event(event_pb2.Event(wall_time=time.time(), step=int(step),
                                           summary=summary_pb2.Summary(value=values)))

  def flush(self) -> None:
    if self._events is not None:
      self._events.flush()

  def close(self) -> None:
    if self._events is not None:
      self._events.close()


def create_writer(logdir: str, *, just_logging: bool):
  """clu's default writer where TensorFlow imports, else an EventWriter (same folder, same tags)."""
  if _tensorflow_available():
    from clu import metric_writers  # pylint: disable=import-outside-toplevel
    return metric_writers.create_default_writer(logdir, just_logging=just_logging)
  return EventWriter(logdir, just_logging=just_logging)
