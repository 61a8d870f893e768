"""Objectives compared on the same data and budget: trained, evaluated, tabled with intervals.

The library of `python -m vmsst.compare`: `compare` trains every (objective,
seed) through the one training loop (`run_files` says which gin files, in
parse order; a `presets.Preset` names a whole comparison), evaluates each
checkpoint once (`evaluate_once` reuses results made from the same inputs),
and writes table1.md / table1.json (`vmsst.comparison.stats`) and
learning_curves.png (`vmsst.comparison.curves`).
"""

import json
import logging
import os
import pathlib
from typing import Sequence

import numpy as np

from vmsst.evaluation import runner
from vmsst.base import files
from vmsst.base import run_directory
from vmsst.training import configurables
from vmsst.comparison import curves as learning_curves
from vmsst.comparison import presets
from vmsst.comparison import stats as comparison_stats
from vmsst.encoding import checkpoint
from vmsst.encoding import encoder_flags
from vmsst.evaluation import logged_curves
from vmsst.evaluation import paper_score as score_lib
from vmsst.evaluation import suites as suites_lib
from vmsst.base.gin_utils import gin
from vmsst.base.gin_utils import gin
from vmsst.training import checkpointing
from vmsst.training import loop as train_loop

def run_files(objective: str, *, gin_file: Sequence[str], preset: presets.Preset | None,
              search_paths: Sequence[str] = (".",)) -> list[str]:
  """The gin files of one objective, in parse order (see the module docstring)."""
  base, additions = presets.VARIANTS.get(objective, (objective, ()))
  model_file = f"gin/models/{base}.gin"
  if not _exists(model_file, search_paths):
    raise FileNotFoundError(f"{model_file} does not exist: --objectives names files of "
                            f"gin/models/ or ablations ({', '.join(presets.ALL_OBJECTIVES)}).")
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
                    seed: int | None = None, preset: presets.Preset | None = None) -> bool:
  """Trains one (objective, seed); False (nothing built) when its checkpoint reached `steps`."""
  run = run_files(objective, gin_file=gin_file, preset=preset, search_paths=search_paths)
  if files.isdir(run_directory.of(model_dir).checkpoints):
    latest = checkpointing.make_manager(model_dir).latest_step()
    if latest is not None and latest >= steps:
      logging.info("%s: finished at step %d, skipped", model_dir, latest)
      return False
  seeded = [] if seed is None else [f"train.seed = {seed}"]
  with gin.unlock_config():
    gin.clear_config()
    configurables.parse_gin(run,
                        [f"MODEL_DIR = '{model_dir}'", f"TRAIN_STEPS = {steps}",
                         f"compared_model_dir.output = '{files.parent(model_dir)}'",
                         *seeded, *bindings],
                        search_paths)
    train_loop.train()
  return True


def _exists(gin_file: str, search_paths: Sequence[str]) -> bool:
  return any(files.exists(os.path.join(p, gin_file)) for p in search_paths)


def expand_objectives(objectives: Sequence[str],
                      preset: presets.Preset | None = None) -> list[str]:
  """`all` -> the preset's objectives and the other methods (ALL_OBJECTIVES without a
  preset); other names pass through in the given order."""
  if list(objectives) != ["all"]:
    return list(objectives)
  if preset is not None:
    return list(preset.objectives + presets.OTHER_OBJECTIVES)
  return list(presets.ALL_OBJECTIVES)


def compare(*, objectives: Sequence[str], gin_file: Sequence[str], steps: int, output: str,
            data_dirs: Sequence[str], suite: str, reference: str | None,
            bindings: Sequence[str] = (), options: suites_lib.SuiteOptions | None = None,
            search_paths: Sequence[str] = (".",), seeds: Sequence[int] = (0,),
            curve_points: int = 0, preset: presets.Preset | None = None) -> dict:
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
          files.as_path(run_directory.evaluation(model_dir)),
          lambda d=model_dir: checkpoint.CheckpointEncoder.from_model_dir(d), {"step": step},
          **evaluation)
      curves.setdefault(objective, {})[seed] = logged_curves.read_curves(model_dir)
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
  final = logged_curves.final_values(curves)
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
  results = runner.run_suites(make_encoder(), data_dirs=data_dirs, suite=suite,
                              output=str(output), options=options)
  stamp.write_text(json.dumps(key))
  return results


def write_outputs(output: pathlib.Path, *, summary: dict, runs: dict, curves: dict,
                  reference: tuple[str, dict] | None, meta: dict) -> None:
  """table1.md, table1.json and learning_curves.png under `output`."""
  output.mkdir(parents=True, exist_ok=True)
  learning_curves.plot({name: {seed: c[logged_curves.TAG] for seed, c in by_seed.items()}
                        for name, by_seed in curves.items()
                        if all(logged_curves.TAG in c for c in by_seed.values())},
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
