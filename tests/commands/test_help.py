"""Every command's `--help` shows its own flags and an example; `python -m vmsst` the index.

Subprocesses: `--help` is what a process prints.
"""

import pathlib
import re
import subprocess
import sys

import pytest

import vmsst_testing
from vmsst import __main__ as index
from vmsst.base import old_names


def _help(*args: str) -> str:
  result = subprocess.run([sys.executable, "-m", *args], cwd=vmsst_testing.ROOT,
                          capture_output=True, text=True, timeout=300, check=False)
  assert result.returncode == 0, result.stderr[-2000:]  # asked for: not absl's exit 1
  assert not any(line in result.stderr for line in ("oneDNN", "cudart_stub", "InitializeLog")), (
      result.stderr[-2000:])  # TensorFlow's start-up lines (imported with stderr muted)
  return result.stdout


@pytest.mark.parametrize("command, own_flags", [
    ("embed", ["--input", "--output", "--normalize"]),
    ("score", ["--input", "--output"]),
    ("mine", ["--src", "--trg", "--k", "--margin"]),
    ("evaluate", ["--suite", "--output", "--data_dir", "--src", "--trg"]),
])
def test_inference_commands_list_their_own_and_the_encoder_flags(command, own_flags):
  text = _help(f"vmsst.{command}", "--help")
  for flag in [*own_flags, "--model_dir", "--saved_model", "--encoder", "--batch_size",
               "--verbosity"]:
    assert any(f"{lead}{flag[2:]}" in text for lead in ("  --", "  --[no]", ",--")), flag
  assert f"python -m vmsst.{command} --" in text  # an example
  assert "--xml_output_file" not in text  # absl's own flags stay under --helpfull


def test_train_help_lists_the_gin_flags_and_an_example():
  text = _help("vmsst.train", "--help")
  for flag in ["--gin_file", "--gin_bindings", "--gin_search_path", "--verbosity"]:
    assert f"  {flag}:" in text or f",{flag}:" in text, (flag, text)
  assert "python -m vmsst.train --gin_file=gin/runs/vmsst_cpu.gin" in text


def test_teacher_cache_help_lists_the_gin_flags_and_an_example():
  text = _help("vmsst.teacher_cache", "--help")
  for flag in ["--gin_file", "--gin_bindings", "--gin_search_path", "--verbosity"]:
    assert f"  {flag}:" in text or f",{flag}:" in text, (flag, text)
  assert "python -m vmsst.teacher_cache --gin_file=gin/runs/distillation_cpu.gin" in text
  assert "--coordinator_address" not in text  # train's other flags are not this command's


def _modules_with_a_main_guard() -> tuple[list[str], list[str]]:
  """Modules of vmsst/ and tasks/ (as vmsst_tasks) that run under `python -m`: (top level, below).

  Read independently of the index: a `__main__` guard, not a `def main`.
  """
  top, below = [], []
  for folder, package in (("vmsst", "vmsst"), ("tasks", "vmsst_tasks")):
    root = vmsst_testing.ROOT / folder
    for path in root.rglob("*.py"):
      parts = [package, *path.relative_to(root).with_suffix("").parts]
      if path.name != "__main__.py" and 'if __name__ == "__main__":' in path.read_text():
        (top if len(parts) == 2 else below).append(".".join(parts))
  return sorted(top), sorted(below)


def test_the_index_lists_every_command_module_and_no_other():
  top, below = _modules_with_a_main_guard()
  assert sorted(c.name for c in index.commands()) == top
  assert set(below) <= set(old_names.RENAMED), "a command below the top level: move it up"
  assert all(c.summary.endswith(".") for c in index.commands()), index.commands()
  assert max(len(line) for line in index.index().splitlines()) <= 100  # one line a command


def test_the_index_puts_the_first_steps_first_and_the_rest_alphabetically():
  names = [c.name.split(".", 1)[1] for c in index.commands() if c.name.startswith("vmsst.")]
  ordered = [n for n in index.ORDER if n in names]
  assert names[:len(ordered)] == ordered
  assert names[len(ordered):] == sorted(names[len(ordered):])


def test_python_m_vmsst_indexes_every_command_and_every_one_the_readme_uses():
  text = _help("vmsst")
  commands = [line.split()[2] for line in text.splitlines() if line.startswith("  python -m ")]
  assert commands == [c.name for c in index.commands()]
  readme = (vmsst_testing.ROOT / "README.md").read_text(encoding="utf-8")
  used = set(re.findall(r"python -m (vmsst[\w.]*)", readme)) - {"vmsst"}
  assert used <= set(commands) | set(old_names.RENAMED), used - set(commands)  # an old name answers
  assert max(len(line) for line in text.splitlines()) <= 100


def test_python_m_vmsst_name_runs_the_command_or_names_the_closest():
  assert "python -m vmsst.embed --" in _help("vmsst", "embed", "--help")
  done = subprocess.run([sys.executable, "-m", "vmsst", "embd"], cwd=vmsst_testing.ROOT,
                        capture_output=True, text=True, timeout=300, check=False)
  assert done.returncode == 2 and "embed" in done.stderr.splitlines()[-1], done.stderr
  assert done.stdout == ""


def _own_flags(command: str) -> list[str]:
  """The flags a command's own module (package: __init__ and __main__) defines."""
  module = command.replace("vmsst_tasks.", "tasks.").replace(".", "/")
  paths = [vmsst_testing.ROOT / f"{module}.py", vmsst_testing.ROOT / module / "__main__.py",
           vmsst_testing.ROOT / module / "__init__.py"]
  text = "".join(p.read_text(encoding="utf-8") for p in paths if p.exists())
  return re.findall(r"DEFINE_\w+\(\s*[\"'](\w+)[\"']", text)


@pytest.mark.slow  # a subprocess per command, most of them import TensorFlow or JAX
@pytest.mark.parametrize("command", [c.name for c in index.commands()])
def test_every_help_exits_0_and_shows_the_commands_own_flags(command):
  text = _help(command, "--help")
  for flag in _own_flags(command):
    assert re.search(rf"^\s+--(\[no\])?{flag}:", text, re.M), (flag, text[-3000:])


def test_compare_help_shows_the_flags_its_examples_use():
  text = _help("vmsst.compare", "--help")
  examples = text.split("flags:")[0]
  for flag in set(re.findall(r"--(\w+)=", examples)):
    assert re.search(rf"^\s+--(\[no\])?{flag}:", text, re.M), flag


def test_every_command_spells_its_output_flag_output_and_parses_flags_with_absl():
  repo = pathlib.Path(__file__).resolve().parents[2]
  offenders = []
  for path in sorted(p for d in ("vmsst", "tasks", "bench") for p in (repo / d).rglob("*.py")):
    text = path.read_text(encoding="utf-8")
    if (re.search(r"DEFINE_\w+\(\s*[\"'](output_dir|out_dir|out)[\"']", text)
        or re.search(r"^\s*(import|from) argparse", text, re.M)):
      offenders.append(path.relative_to(repo).as_posix())
  assert not offenders


def test_dataset_builders_live_in_build_data_not_in_evaluation():
  repo = pathlib.Path(__file__).resolve().parents[2]
  builder = re.compile(r"^def build(_\w*(task|retrieval))?\(", re.M)  # not build_index
  in_evaluation = [p.name for p in sorted((repo / "vmsst" / "evaluation").glob("*.py"))
                   if builder.search(p.read_text(encoding="utf-8"))]
  assert not in_evaluation
  assert {p.stem for p in (repo / "vmsst" / "build_data").glob("*.py")} >= {
      "bucc", "question_retrieval", "clustering"}
