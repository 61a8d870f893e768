r"""Runs every benchmark, collects their JSON lines, and plots them.

  .venv/bin/python bench/run_all.py [--quick] [--only=train_throughput,mining] \
      [--output=docs/results/benchmarks/runs] [--script_args=mining:--sizes=10000]

Each script runs as its own process (so one's memory and compilations do not
touch another's), its table streams to the console, and every comparison
line it prints ({"name", "ours", "peer", "unit", "ratio", "target", ...},
bench/common.py) is appended to OUTPUT_DIR/<UTC date and time>.jsonl, with
one PNG per script next to it (<stem>_<script>.png). --quick runs each
script's smoke mode (tiny sizes, seconds of work each on an idle machine;
the figures mean nothing). The full run takes about 30 minutes on 2 cores.
"""

from vmsst.base import console  # pylint: disable=g-bad-import-order

console.quiet_startup()  # before JAX loads: with libtpu installed, no TPU probe on a CPU machine

import json
import os
import pathlib
import subprocess
import sys
import time

from absl import app
from absl import flags

HERE = pathlib.Path(__file__).resolve().parent
SCRIPTS = ("train_throughput", "encode_throughput", "mining", "scaling")

FLAGS = flags.FLAGS


def _define_flags() -> None:
  """Defined when run as a script, so tests can import several bench modules."""
  flags.DEFINE_bool("quick", False, "Each script's smoke mode.")
  flags.DEFINE_list("only", list(SCRIPTS), "Scripts to run.")
  flags.DEFINE_string("output", str(HERE.parent / "docs" / "results" / "benchmarks" / "runs"),
                      "Where the .jsonl and PNGs go.")
  flags.DEFINE_multi_string("script_args", [], "script:--flag=value passed to one script.")
  flags.DEFINE_bool("plots", True, "Write PNG plots.")


def run_script(name: str, extra: list[str]) -> list[dict]:
  """Runs bench/<name>.py, echoing its output; returns its comparison lines."""
  command = [sys.executable, str(HERE / f"{name}.py"), *extra]
  print(f"== {' '.join(command[1:])}", flush=True)
  env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3", "PYTHONPATH": os.pathsep.join(
      [str(HERE), str(HERE.parent), os.environ.get("PYTHONPATH", "")])}
  process = subprocess.Popen(command, stdout=subprocess.PIPE, text=True, env=env)
  results = []
  for line in process.stdout:
    parsed = _comparison(line)
    if parsed is None:
      print(line, end="", flush=True)
    else:
      results.append({**parsed, "script": name})
  if process.wait():
    raise RuntimeError(f"bench/{name}.py exited with {process.returncode}")
  return results


def _comparison(line: str) -> dict | None:
  if not line.startswith("{"):
    return None
  try:
    parsed = json.loads(line)
  except json.JSONDecodeError:
    return None
  return parsed if isinstance(parsed, dict) and "ratio" in parsed else None


def main(argv) -> None:
  del argv
  output = pathlib.Path(FLAGS.output)
  output.mkdir(parents=True, exist_ok=True)
  stem = time.strftime("%Y-%m-%dT%H%M", time.gmtime()) + ("_quick" if FLAGS.quick else "")
  jsonl = output / f"{stem}.jsonl"
  per_script = {}
  for name in FLAGS.only:
    if name not in SCRIPTS:
      raise app.UsageError(f"--only: unknown script {name!r}; choose from {SCRIPTS}.")
    extra = ["--quick"] * FLAGS.quick + [a.split(":", 1)[1] for a in FLAGS.script_args
                                         if a.split(":", 1)[0] == name]
    per_script[name] = run_script(name, extra)
    with jsonl.open("a") as f:
      f.writelines(json.dumps(r) + "\n" for r in per_script[name])
  if FLAGS.plots:
    import plots  # pylint: disable=import-outside-toplevel
    for name, results in per_script.items():
      if results:
        path = output / f"{stem}_{name}.png"
        plots.PLOTS[name](results, str(path))
        print(f"wrote {path}")
  missed = [r["name"] for rs in per_script.values() for r in rs if r.get("met") is False]
  print(f"wrote {jsonl}: {sum(map(len, per_script.values()))} comparisons, "
        f"{len(missed)} below target{': ' + ', '.join(missed) if missed else ''}")


if __name__ == "__main__":
  _define_flags()
  app.run(main)
