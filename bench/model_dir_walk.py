r"""Where MODEL_DIR travels during `train`: the modules a reader walks through, and how often
the walk climbs back up the layers.

  .venv/bin/python bench/model_dir_walk.py --data_dir=../shared/data \
      --output=docs/results/model_dir_walk

Trains gin/runs/vmsst_cpu.gin shrunk to two steps (tiny widths, no evaluator, one
device, a 2,000-piece vocabulary trained here from NTREX and Multi30k) with a
profile hook on: every call of a vmsst or vmsst_tasks function that receives the
model directory, a path inside it, or a record carrying one (a dataclass such as
run_directory.Paths, two levels deep) as an argument is a step of the walk. Runs of
steps in one module are one *stay* (calls in other threads count too: orbax saves a
checkpoint's items in its own); a stay in a module of a higher layer than the
one before (the layers of tests/test_import_graph.py) is a *climb back up*, and a
stay in a module the walk already left is a *return*. Counted two ways: every call
(repeats and file access included), and a reader's walk (each function followed
once, stopping at the base layer's path modules `files` and `run_directory`).
The counts, each reader's walk and the command go to OUTPUT/walk.json and
OUTPUT/README.md; `--checkout=DIR` walks another checkout of the repository too
(the same measurement before a code move).
"""

import dataclasses
import importlib
import json
import os
import pathlib
import subprocess
import sys
import tempfile
import threading

from absl import app
from absl import flags

ROOT = pathlib.Path(__file__).resolve().parents[1]
FLAGS = flags.FLAGS


def walk(model_dir: str, run) -> list[tuple[str, str]]:
  """(module, function) of each call that receives `model_dir`, a path in it or a record
  carrying one, in order."""
  inside = model_dir.rstrip("/")
  steps = []

  def holds(value, depth: int = 2) -> bool:
    """A path in the directory, or a record carrying one (run_directory.Paths, a stage's state)."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type) and depth:
      return any(holds(getattr(value, field.name, None), depth - 1)
                 for field in dataclasses.fields(value))
    if isinstance(value, os.PathLike):
      value = os.fspath(value)
    return isinstance(value, str) and (value == inside or value.startswith(inside + "/"))

  def profile(frame, event, _):
    if event != "call":
      return
    module = frame.f_globals.get("__name__", "")
    if not (module.startswith("vmsst.") or module.startswith("vmsst_tasks")):
      return
    code = frame.f_code
    arguments = code.co_varnames[:code.co_argcount + code.co_kwonlyargcount]
    if any(holds(frame.f_locals.get(name)) for name in arguments):
      steps.append((module, code.co_name))

  sys.setprofile(profile)
  threading.setprofile(profile)  # orbax runs a checkpoint's items in its threads
  try:
    run()
  finally:
    sys.setprofile(None)
    threading.setprofile(None)
  return steps


LEAVES = ("files", "run_directory")  # the base layer's path modules: a reader stops at them


def summarise(steps: list[tuple[str, str, int]], *, reader: bool = False) -> dict:
  """Stays, modules, climbs back up and returns of a walk of (module, function, layer rank).

  reader: a reader's walk: each function followed once (its first call), and the calls
  into the base layer's path modules (`files`, `run_directory`: what a path is, not what
  the run does with it) left out.
  """
  if reader:
    firsts = {}
    for module, function, rank in steps:
      if module.rsplit(".", 1)[-1] not in LEAVES:
        firsts.setdefault((module, function), rank)
    steps = [(module, function, rank) for (module, function), rank in firsts.items()]
  stays = []
  for module, function, rank in steps:
    if stays and stays[-1]["module"] == module:
      stays[-1]["functions"].append(function)
    else:
      stays.append({"module": module, "functions": [function], "rank": rank})
  climbs = returns = 0
  seen = set()
  for before, after in zip(stays, stays[1:]):
    seen.add(before["module"])
    climbs += after["rank"] > before["rank"]
    returns += after["module"] in seen
  return {"stays": len(stays), "modules": len({s["module"] for s in stays}),
          "climbs_back_up": climbs, "returns": returns, "walk": stays}


def import_from(checkout: pathlib.Path) -> None:
  """vmsst and vmsst_tasks (installed from tasks/) imported from `checkout`, whichever
  checkout the virtual environment's editable install points at."""
  import importlib.util  # pylint: disable=import-outside-toplevel,redefined-outer-name
  sys.path[:0] = [str(checkout), str(checkout / "tests")]
  spec = importlib.util.spec_from_file_location(
      "vmsst_tasks", checkout / "tasks" / "__init__.py",
      submodule_search_locations=[str(checkout / "tasks")])
  sys.modules["vmsst_tasks"] = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(sys.modules["vmsst_tasks"])


def _module(*names: str):
  """The first of `names` that imports: a module moved between the checkouts compared."""
  for name in names:
    try:
      return importlib.import_module(name)
    except ModuleNotFoundError:
      continue
  raise ModuleNotFoundError(f"none of {names} in {pathlib.Path.cwd()}")


def measure_here(data_dir: str) -> list[tuple[str, str, int]]:
  """(module, function, layer rank) of each step of the walk of the current directory's
  checkout's `train` (a child process per checkout; the layers of its import-graph test)."""
  import_from(pathlib.Path.cwd())
  import test_import_graph  # pylint: disable=import-outside-toplevel
  from vmsst.training import loop  # pylint: disable=import-outside-toplevel
  import vmsst_testing  # pylint: disable=import-outside-toplevel
  # Modules that moved between the checkouts this compares: this layout's name first.
  text_files = _module("vmsst.base.text_files", "vmsst.text_files")
  gin = _module("vmsst.base.gin_utils", "vmsst.gin_utils").gin
  pair_readers = _module("vmsst_tasks.sources.pair_readers", "vmsst_tasks.sources")
  vocabulary_training = _module("vmsst_tasks.sources.vocabulary_training",
                                "vmsst_tasks.vocabulary_training")
  work = pathlib.Path(tempfile.mkdtemp(prefix="model_dir_walk_"))
  data = pathlib.Path(data_dir)
  sentences = [line for path in pair_readers.ntrex_files(data).values()
               for line in text_files.read_lines(path)[:16]]
  for short in pair_readers.MULTI30K_LANGUAGES:
    sentences += text_files.read_lines(data / "multi30k" / f"train.{short}.gz")[:500]
  vocab = vocabulary_training.train_vocabulary(sentences, str(work / "spm"), 2000,
                                               character_coverage=0.995)
  model_dir = str(work / "run")
  vmsst_testing.configure_small_run(data, vocab, model_dir, steps=2,
                                    extra=["train.evaluator = None"])
  steps = walk(model_dir, loop.train)
  gin.clear_config()
  rank = {layer: r for r, peers in enumerate(test_import_graph.LAYERS) for layer in peers}
  return [(module, function, rank[test_import_graph.layer(module)])
          for module, function in steps]


def render(results: dict) -> str:
  """OUTPUT/README.md: the counts per checkout and way of counting, then each reader's walk."""
  lines = ["# MODEL_DIR's walk through `train`", "",
           f"Generated by `{results['command']}`; do not edit.", "",
           "Every call of a vmsst or vmsst_tasks function that receives the model directory, a "
           "path in it or a record carrying one (a dataclass, two levels deep), during a "
           "two-step tiny VMSST run (no evaluator). A *stay* is a run of such calls in one "
           "module; a *climb back up* a stay in a higher layer than the one before "
           "(tests/test_import_graph.py's layers); a *return* a stay in a module the walk "
           "already left. *Every call* counts them all, repeats and file access included; *a "
           "reader's walk* follows each function once (its first call) and stops at the base "
           "layer's path modules (`files`, `run_directory`).", "",
           "| checkout | count | stays | modules | climbs back up | returns |",
           "|---|---|---:|---:|---:|---:|"]
  for name, ways in results["walks"].items():
    for way, walked in ways.items():
      lines.append(f"| {name} | {way} | {walked['stays']} | {walked['modules']} | "
                   f"{walked['climbs_back_up']} | {walked['returns']} |")
  for name, ways in results["walks"].items():
    lines += ["", f"## {name}: a reader's walk", ""]
    lines += [f"{i + 1}. `{s['module']}`: {', '.join(dict.fromkeys(s['functions']))}"
              for i, s in enumerate(ways["a reader's walk"]["walk"])]
  return "\n".join(lines) + "\n"


def main(argv):
  del argv
  if FLAGS.child:
    print(json.dumps(measure_here(FLAGS.data_dir)))
    return
  output = pathlib.Path(FLAGS.output)
  output.mkdir(parents=True, exist_ok=True)
  walks = {}
  for checkout in [ROOT, *map(pathlib.Path, FLAGS.checkout)]:
    commit = subprocess.run(["git", "-C", str(checkout), "rev-parse", "--short", "HEAD"],
                            capture_output=True, text=True, check=True).stdout.strip()
    name = f"{checkout} ({commit})"
    env = {**os.environ, "XLA_FLAGS": "--xla_force_host_platform_device_count=1"}
    env.pop("PYTHONPATH", None)
    done = subprocess.run([sys.executable, __file__, "--child",
                           f"--data_dir={os.path.abspath(FLAGS.data_dir)}"],
                          cwd=checkout, env=env, check=True, capture_output=True, text=True)
    steps = json.loads(done.stdout.strip().splitlines()[-1])
    walks[name] = {"every call": summarise(steps), "a reader's walk": summarise(steps, reader=True)}
  command = " ".join(["bench/model_dir_walk.py", *sys.argv[1:]])
  results = {"command": command, "walks": walks}
  (output / "walk.json").write_text(json.dumps(results, indent=1) + "\n")
  (output / "README.md").write_text(render(results))
  print(render(results).split("\n## ")[0])


if __name__ == "__main__":
  flags.DEFINE_string("data_dir", str(ROOT.parent / "shared" / "data"), "The shared data.")
  flags.DEFINE_string("output", str(ROOT / "docs" / "results" / "model_dir_walk"),
                      "Where walk.json and README.md go.")
  flags.DEFINE_multi_string("checkout", [], "Another checkout to walk too (e.g. before a move).")
  flags.DEFINE_bool("child", False, "Internal: measure this checkout, print JSON.")
  app.run(main)
