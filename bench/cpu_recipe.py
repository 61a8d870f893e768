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
A candidate measured earlier, whose run directory is gone, joins from the CSV
this script wrote then: --recorded=batch64=docs/cpu_recipe/contrastive_20min_batch.csv
(its rows for candidate `batch64`, copied and plotted beside the new runs).
"""

from vmsst.base import console  # pylint: disable=g-bad-import-order

console.quiet_startup()  # before JAX loads: with libtpu installed, no TPU probe on a CPU machine

import csv
import pathlib

from absl import app, flags

from vmsst.comparison import curves as learning_curves
from vmsst.evaluation import logged_curves

FLAGS = flags.FLAGS


def _define_flags() -> None:
  """Defined when run as a script, so tests can import several bench modules."""
  flags.DEFINE_list("runs", None, "name=MODEL_DIR pairs, one per candidate.", required=True)
  flags.DEFINE_list("recorded", [], "name=CSV pairs: candidate `name`'s rows of a CSV this "
                    "script wrote earlier, for a candidate whose run directory is gone.")
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


def recorded_rows(item: str) -> list[dict]:
  """Candidate `name`'s rows of an earlier CSV (item `name=CSV`), values as floats.

  Raises:
    app.UsageError: the item is malformed, or the CSV has no row for `name` (naming both).
  """
  name, sep, path = item.partition("=")
  if not sep or not name or not path:
    raise app.UsageError(f"--recorded: '{item}' is not name=CSV "
                         "(e.g. batch64=docs/cpu_recipe/contrastive_20min_batch.csv)")
  with open(path, newline="") as f:
    table = list(csv.DictReader(f))
  out = [{k: (v if k == "candidate" else float(v)) for k, v in row.items() if v != ""}
         for row in table if row["candidate"] == name]
  if not out:
    found = sorted({row["candidate"] for row in table})
    raise app.UsageError(f"--recorded: {path} has no rows for candidate '{name}' (it has: "
                         f"{', '.join(found)})")
  for row in out:
    row["step"] = int(row["step"])
  return out


def curve_of(table: list[dict]) -> dict:
  """read_curve's dict of the mean, from one candidate's rows."""
  return {"step": [r["step"] for r in table], "seconds": [r["seconds"] for r in table],
          "value": [r["mean"] for r in table]}


def rows(name: str, curves: dict[str, dict]) -> list[dict]:
  """One row per evaluation step of a run: step, seconds and every retrieval tag's value."""
  mean = curves[logged_curves.TAG]
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
  for item in FLAGS.recorded:
    earlier = recorded_rows(item)
    table += earlier
    plotted[earlier[0]["candidate"]] = {0: curve_of(earlier)}
  for name, model_dir in runs.items():
    curves = logged_curves.read_curves(model_dir)
    table += rows(name, curves)
    plotted[name] = {0: curves[logged_curves.TAG]}
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
