"""Held-out retrieval against step and wall-clock: the comparison's figure.

What `python -m vmsst.learning_curves` plots for one run and `vmsst.compare` for
every objective and seed; the curves themselves are read by
vmsst/evaluation/logged_curves.py.
"""

import pathlib
from typing import Mapping

import numpy as np

from vmsst.evaluation import plots


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
