"""Matplotlib figures without pyplot: no global backend or figure registry.

Evaluation runs inside training jobs and tests; the object-oriented Agg
canvas draws PNGs without touching process-wide matplotlib state.
"""

from matplotlib import figure as figure_lib
from matplotlib.backends import backend_agg


def figure(size: tuple[float, float]) -> figure_lib.Figure:
  """A Figure of `size` inches attached to an Agg canvas (ready for savefig)."""
  fig = figure_lib.Figure(figsize=size)
  backend_agg.FigureCanvasAgg(fig)
  return fig
