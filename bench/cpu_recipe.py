"""The CPU recipe search: held-out retrieval curves of candidate runs, side by side.

Candidates are compared by held-out retrieval against step (wall-clock on a
shared 2-core machine is noisy) plus their steps/s measured in the same window,
so the table says both how fast a candidate learns per step and what a step
costs. Reads what training already wrote (MODEL_DIR/tensorboard, via
vmsst.learning_curves), so a search is just training runs plus this command:

  python bench/cpu_recipe.py --runs=base=/tmp/r/A,lr1e-2=/tmp/r/B \
      --output=docs/cpu_recipe/vmsst

writes OUTPUT.csv (one row per candidate and evaluation, every held-out set)
and OUTPUT.png (mean held-out retrieval against step and against wall-clock).
"""

import csv
import pathlib

from absl import app, flags

from vmsst import learning_curves

FLAGS = flags.FLAGS


def _define_flags() -> None:
  """Defined when run as a script, so tests can import several bench modules."""
  flags.DEFINE_list("runs", None, "name=MODEL_DIR pairs, one per candidate.", required=True)
  flags.DEFINE_string("output", None, "Path prefix of the .csv and .png written.",
                      required=True)


def parse_runs(items: list[str]) -> dict[str, pathlib.Path]:
  """name -> model dir; a malformed item is one clear error naming it."""
  runs = {}
  for item in items:
    name, sep, path = item.partition("=")
    if not sep or not name or not path:
      raise app.UsageError(f"--runs: '{item}' is not name=MODEL_DIR (e.g. base=runs/vmsst_cpu)")
    runs[name] = pathlib.Path(path)
  return runs


def rows(name: str, curves: dict[str, dict]) -> list[dict]:
  """One row per evaluation step of a run: step, seconds and every retrieval tag's value."""
  mean = curves[learning_curves.TAG]
  out = []
  for i, step in enumerate(mean["step"]):
    row = {"candidate": name, "step": step, "seconds": round(mean["seconds"][i], 1)}
    for tag, curve in sorted(curves.items()):
      if step in curve["step"]:
        row[tag.removeprefix("retrieval/")] = round(float(curve["value"][curve["step"].index(step)]), 2)
    out.append(row)
  return out


def main(argv):
  del argv
  runs = parse_runs(FLAGS.runs)
  table, plotted = [], {}
  for name, model_dir in runs.items():
    curves = learning_curves.read_curves(model_dir)
    table += rows(name, curves)
    plotted[name] = {0: curves[learning_curves.TAG]}
  output = pathlib.Path(FLAGS.output)
  output.parent.mkdir(parents=True, exist_ok=True)
  fields = list(dict.fromkeys(key for row in table for key in row))
  with open(output.with_suffix(".csv"), "w", newline="") as f:
    writer = csv.DictWriter(f, fieldnames=fields)
    writer.writeheader()
    writer.writerows(table)
  learning_curves.plot(plotted, output.with_suffix(".png"))
  print(f"wrote {output.with_suffix('.csv')} and {output.with_suffix('.png')}")


if __name__ == "__main__":
  _define_flags()
  app.run(main)
