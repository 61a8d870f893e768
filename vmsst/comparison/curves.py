"""Held-out retrieval against step and wall-clock, read back from training's TensorBoard events.

What `python -m vmsst.learning_curves` plots for one run, `vmsst.compare` for
every objective and seed, and a model card quotes (its last values).

The training loop already writes `retrieval/<set>` and `retrieval/mean` every
`train.eval_every` steps (clu's writer, MODEL_DIR/tensorboard); reading those
events, rather than a second log, keeps one record of a run. Wall-clock is
seconds since the run's first event, so it covers training and the in-loop
evaluations; a run resumed after an interruption includes the pause.
"""

import pathlib
from typing import Mapping

import numpy as np
from tensorboard.backend.event_processing import event_accumulator
from tensorboard.util import tensor_util

from vmsst import files
from vmsst.evaluation import plots

TAG = "retrieval/mean"


def read_curve(model_dir: str | pathlib.Path, tag: str = TAG) -> dict:
  """{"step": [...], "seconds": [...], "value": [...]} of `tag`, by step (last write wins)."""
  return read_curves(model_dir, prefix=tag).get(tag, {"step": [], "seconds": [], "value": []})


def read_curves(model_dir: str | pathlib.Path, prefix: str = "retrieval/") -> dict[str, dict]:
  """tag -> read_curve's dict, for every tag starting with `prefix`.

  Raises:
    FileNotFoundError: model_dir has no TensorBoard events (naming the folder).
  """
  folder = files.join(model_dir, "tensorboard")  # TensorBoard's reader handles gs:// itself
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


def plot(curves: Mapping[str, Mapping[int, dict]], path: pathlib.Path, *,
         ylabel: str = "held-out retrieval (%)") -> None:
  """Two panels (against step, against wall-clock): one line per objective, the mean
  over seeds, shaded between the lowest and highest seed. `curves`: objective -> seed
  -> read_curve(...)."""
  fig = plots.figure((11, 3.8))
  by_step, by_time = fig.subplots(1, 2)
  for name, by_seed in curves.items():
    steps, values, seconds = _aligned(by_seed)
    if not steps:
      continue
    line, = by_step.plot(steps, values.mean(0), label=f"{name} ({len(by_seed)} seeds)")
    by_step.fill_between(steps, values.min(0), values.max(0), color=line.get_color(), alpha=0.2)
    by_time.plot(seconds.mean(0) / 60, values.mean(0), color=line.get_color())
    by_time.fill_between(seconds.mean(0) / 60, values.min(0), values.max(0),
                         color=line.get_color(), alpha=0.2)
  by_step.set_xlabel("step")
  by_time.set_xlabel("wall-clock (minutes, mean over seeds)")
  for ax in (by_step, by_time):
    ax.set_ylabel(ylabel)
    ax.grid(alpha=0.3)
  by_step.legend(fontsize=8)
  plots.save(fig, path)


def _aligned(by_seed: Mapping[int, dict]) -> tuple[list[int], np.ndarray, np.ndarray]:
  """The steps every seed evaluated, with [seeds, steps] values and seconds."""
  common = sorted(set.intersection(*(set(c["step"]) for c in by_seed.values())))
  values = np.array([[c["value"][c["step"].index(s)] for s in common] for c in by_seed.values()])
  seconds = np.array([[c["seconds"][c["step"].index(s)] for s in common]
                      for c in by_seed.values()])
  return common, values, seconds
