"""The README's "Use a trained model in Python" output, printed by the model `make train` leaves.

The README shows a Python example and what it prints. What it prints must come
from the model a user has after `make train` (runs/vmsst_cpu, its last step),
not from an earlier checkpoint, so this script is its only source:

  # after `make train`, in the checkout holding runs/vmsst_cpu:
  .venv/bin/python bench/readme_output.py --write
  # a fresh clone's model (bench/main_job.py --measure --seeds keeps its clone):
  .venv/bin/python bench/readme_output.py --project=/tmp/main_job_seeds/vmsst --write
  # only compare: exit 1 when the README's block is not what the model prints
  .venv/bin/python bench/readme_output.py --project=... --check

It runs the README's own ```python block as written (its working directory is
--project, where `runs/vmsst_cpu` resolves), then rewrites the ```text block
under it and the caption line after that. `example`, `output_block` and
`caption` parse the README; tests/bench/test_readme_output.py holds the README to
this format without training.
"""

import pathlib
import re
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
SECTION = "## Use a trained model in Python"
MODEL_DIR = "runs/vmsst_cpu"  # what `make train` trains (gin/runs/vmsst_cpu.gin)
_BLOCKS = re.compile(r"```python\n(?P<code>.*?)```\n\n```text\n(?P<output>.*?)```\n\n"
                     r"(?P<caption>\(Printed by [^\n]*(?:\n[^\n]+)*\))", re.S)
CAPTION = ("(Printed by `{model_dir}` at step {step}, the model `make train` leaves;\n"
           "`.venv/bin/python bench/readme_output.py --write` prints it again.)")


def _section(text: str) -> str:
  start = text.index(SECTION)
  end = text.find("\n## ", start + len(SECTION))
  return text[start:end if end >= 0 else len(text)]


def _match(text: str) -> re.Match:
  found = _BLOCKS.search(_section(text))
  if found is None:
    raise ValueError(f"{README}: the section {SECTION!r} has no ```python block followed by a "
                     "```text block and a '(Printed by ...)' caption")
  return found


def example(text: str) -> str:
  """The README's Python example, as a user copies it."""
  return _match(text)["code"]


def output_block(text: str) -> str:
  """What the README says the example prints."""
  return _match(text)["output"]


def caption(text: str) -> str:
  """The line after the printed output, naming the model and step it came from."""
  return _match(text)["caption"]


def latest_step(model_dir: pathlib.Path) -> int:
  """The step the example's Encoder.from_checkpoint loads: the newest checkpoint."""
  steps = [int(p.name) for p in (model_dir / "checkpoints").iterdir() if p.name.isdigit()]
  if not steps:
    raise SystemExit(f"error: {model_dir} has no checkpoints; run `make train` first.")
  return max(steps)


def run_example(code: str, project: pathlib.Path) -> str:
  """The example's standard output, run with `project` as the working directory."""
  done = subprocess.run([sys.executable, "-c", code], cwd=project, capture_output=True,
                        text=True, timeout=1200, check=False)
  if done.returncode:
    raise SystemExit(f"error: the README example failed in {project}:\n{done.stderr[-3000:]}")
  return done.stdout


def rewritten(text: str, printed: str, step: int) -> str:
  """The README with the example's output block and caption replaced."""
  section = _section(text)
  found = _match(text)
  new = (section[:found.start("output")] + printed + section[found.end("output"):
                                                             found.start("caption")]
         + CAPTION.format(model_dir=MODEL_DIR, step=f"{step:,}") + section[found.end("caption"):])
  return text.replace(section, new, 1)


def _define_flags() -> None:
  """Defined when run as a script, so tests can import several bench modules."""
  from absl import flags  # pylint: disable=import-outside-toplevel
  flags.DEFINE_string("project", str(ROOT), "The checkout whose runs/vmsst_cpu prints the "
                      "example (its working directory).")
  flags.DEFINE_bool("write", False, "Rewrite README.md's printed output and caption.")
  flags.DEFINE_bool("check", False, "Exit 1 when README.md's block is not what the model prints.")


def main(argv) -> None:
  del argv
  from absl import flags  # pylint: disable=import-outside-toplevel
  f = flags.FLAGS
  project = pathlib.Path(f.project).resolve()
  text = README.read_text(encoding="utf-8")
  step = latest_step(project / MODEL_DIR)
  printed = run_example(example(text), project)
  print(printed, end="")
  new = rewritten(text, printed, step)
  if f.write and new != text:
    README.write_text(new, encoding="utf-8")
    print(f"{README} rewritten: printed by {MODEL_DIR} at step {step}")
  if f.check and new != text:
    raise SystemExit(f"{README}'s printed output is not what {project / MODEL_DIR} prints "
                     "(above); rerun with --write.")


if __name__ == "__main__":
  from absl import app  # pylint: disable=import-outside-toplevel
  _define_flags()
  app.run(main)
