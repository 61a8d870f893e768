"""Matplotlib figures without pyplot: no global backend or figure registry.

Evaluation runs inside training jobs and tests; the object-oriented Agg
canvas draws PNGs without touching process-wide matplotlib state.
"""

from matplotlib import figure as figure_lib
from matplotlib.backends import backend_agg

from vmsst.base import files


def figure(size: tuple[float, float]) -> figure_lib.Figure:
  """A Figure of `size` inches attached to an Agg canvas (ready for savefig)."""
  fig = figure_lib.Figure(figsize=size)
  backend_agg.FigureCanvasAgg(fig)
  return fig


def save(fig: figure_lib.Figure, path) -> None:
  """Writes `fig` to `path` (local or gs://; the format from its extension).

  matplotlib writes only to the local disk, so a bucket path is drawn into a
  local file first (`files.local_output`); `pathlib` would turn gs:// into a
  local folder named `gs:`.
  """
  with files.local_output(path) as local:
    fig.savefig(local, dpi=120, bbox_inches="tight")
