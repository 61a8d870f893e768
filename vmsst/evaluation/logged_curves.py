"""Held-out retrieval read back from a training run's TensorBoard events.

The training loop writes `retrieval/<set>` and `retrieval/mean` every
`train.eval_every` steps (clu's writer, MODEL_DIR/tensorboard); reading those
events, rather than a second log, keeps one record of a run. A model card
quotes their last values (vmsst/export_formats/model_card.py); the comparison
harness plots them (vmsst/comparison/curves.py). Wall-clock is seconds since the
run's first event, so it covers training and the in-loop evaluations; a run
resumed after an interruption includes the pause.
"""

import pathlib
from typing import Mapping

import numpy as np
from tensorboard.backend.event_processing import event_accumulator
from tensorboard.util import tensor_util

from vmsst.base import files
from vmsst.base import run_directory

TAG = "retrieval/mean"


def read_curve(model_dir: str | pathlib.Path, tag: str = TAG) -> dict:
  """{"step": [...], "seconds": [...], "value": [...]} of `tag`, by step (last write wins)."""
  return read_curves(model_dir, prefix=tag).get(tag, {"step": [], "seconds": [], "value": []})


def read_curves(model_dir: str | pathlib.Path, prefix: str = "retrieval/") -> dict[str, dict]:
  """tag -> read_curve's dict, for every tag starting with `prefix`.

  Raises:
    FileNotFoundError: model_dir has no TensorBoard events (naming the folder).
  """
  folder = run_directory.of(model_dir).tensorboard  # TensorBoard's reader handles gs:// itself
  if not files.glob(files.join(folder, "events.out.tfevents.*")):
    raise FileNotFoundError(f"no TensorBoard events in {folder}: train the run first "
                            "(python -m vmsst.compare resumes it).")
  events = event_accumulator.EventAccumulator(
      folder, size_guidance={event_accumulator.TENSORS: 0, event_accumulator.SCALARS: 0})
  events.Reload()
  points = {}  # tag -> [(step, wall time, value)]
  for kind in ("tensors", "scalars"):
    for tag in events.Tags().get(kind, []):
      items = events.Tensors(tag) if kind == "tensors" else events.Scalars(tag)
      points.setdefault(tag, []).extend(
          (e.step, e.wall_time, float(np.asarray(_value(e)).reshape(()))) for e in items)
  start = min((p[1] for series in points.values() for p in series), default=0.0)
  curves = {}
  for tag, series in points.items():
    if tag.startswith(prefix):
      by_step = {step: (wall - start, value) for step, wall, value in sorted(series, key=lambda p: p[1])}
      steps = sorted(by_step)
      curves[tag] = {"step": steps, "seconds": [by_step[s][0] for s in steps],
                     "value": [by_step[s][1] for s in steps]}
  return curves


def final_values(curves: Mapping[str, dict], prefix: str = "retrieval/") -> dict[str, float]:
  """name -> the value at the last step of each curve, `prefix` removed."""
  return {tag[len(prefix):]: c["value"][-1] for tag, c in curves.items() if c["value"]}


def _value(event):
  if hasattr(event, "tensor_proto"):
    return tensor_util.make_ndarray(event.tensor_proto)
  return event.value
