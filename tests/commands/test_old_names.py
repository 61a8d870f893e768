"""Every `python -m` name a user could have typed before the reorganisation still answers: a
command, or one line naming what replaced it (vmsst/base/old_names.py), exit 2, nothing run.

Subprocesses: what `python -m OLD` prints is what a process prints.
"""

import re
import subprocess
import sys

import pytest

import vmsst_testing
from vmsst import __main__ as index
from vmsst.base import old_names

# The commands of vmsst 0.1 before its folders were reorganised (every module with a `__main__`).
COMMANDS_BEFORE = (
    "vmsst", "vmsst.build_data.bucc", "vmsst.build_data.clustering", "vmsst.build_data.flores",
    "vmsst.build_data.question_retrieval", "vmsst.calibrate", "vmsst.compare", "vmsst.compile",
    "vmsst.embed", "vmsst.evaluate", "vmsst.evaluation.preservation", "vmsst.export",
    "vmsst.hard_negatives", "vmsst.learning_curves", "vmsst.memory_report", "vmsst.mine",
    "vmsst.mine_beam", "vmsst.model_json", "vmsst.mt5_import", "vmsst.score",
    "vmsst.teacher_cache", "vmsst.train", "vmsst.train.pretokenize", "vmsst.vocabulary",
    "vmsst_tasks.opus_download", "vmsst_tasks.triplets", "vmsst_tasks.wiki_entities")
# The flags each renamed command showed under its --help then (the gin three: a run file).
GIN = ("gin_file", "gin_bindings", "gin_search_path")
FLAGS_BEFORE = {
    "vmsst.memory_report": (*GIN, "devices", "mesh", "batch_size", "variants", "num_slices",
                            "find_max_batch", "output", "print_slice", "reuse"),
    "vmsst.train.pretokenize": (*GIN, "output", "examples"),
    "vmsst.evaluation.preservation": ("before", "after", "data_dir", "triplets", "sts_languages",
                                      "tatoeba_languages", "margin", "output"),
    "vmsst.build_data.bucc": ("data_dir", "output", "pairs", "aligned_fraction", "seed",
                              "near_duplicate_jaccard"),
    "vmsst.build_data.question_retrieval": ("data_dir", "output", "languages", "min_score",
                                            "kb_splits", "sts16"),
    "vmsst.build_data.clustering": ("data_dir", "output", "languages", "max_per_category", "seed"),
    "vmsst.build_data.flores": ("data_dir", "output"),
}
OLD_NAMES = sorted([*old_names.RENAMED, *old_names.REMOVED])


def test_every_command_from_before_is_a_command_or_an_old_name():
  now = {c.name for c in index.commands()} | {"vmsst"}
  assert set(COMMANDS_BEFORE) - now <= set(OLD_NAMES), set(COMMANDS_BEFORE) - now - set(OLD_NAMES)
  assert set(OLD_NAMES) <= set(COMMANDS_BEFORE), "an old name nobody could have typed"
  assert not now & set(OLD_NAMES), "an old name that is a command again"


def _run(*args: str, cwd) -> subprocess.CompletedProcess:
  return subprocess.run([sys.executable, "-m", *args], cwd=cwd, capture_output=True, text=True,
                        timeout=300, check=False)


@pytest.mark.parametrize("old", OLD_NAMES)
def test_python_m_an_old_name_says_what_replaced_it_and_runs_nothing(old, tmp_path):
  """Whether its module is a library now, gone, or below a module (vmsst.train.pretokenize)."""
  for args in ((old,), ("vmsst", old.split(".", 1)[1])):
    done = _run(*args, "--data_dir=../shared/data", f"--output={tmp_path}/out",
                "--gin_file=gin/runs/vmsst_cpu.gin", cwd=vmsst_testing.ROOT)
    assert done.returncode == 2 and done.stdout == "", (args, done.stderr[-2000:])
    assert done.stderr.splitlines()[-1] == f"error: {old_names.message(old)}", done.stderr
    assert not (tmp_path / "out").exists()


def test_importing_an_old_name_whose_module_is_gone_names_its_successor():
  with pytest.raises(ModuleNotFoundError, match="is now python -m vmsst.compile --topology=cpu"):
    import vmsst.memory_report  # pylint: disable=import-outside-toplevel,unused-import
  with pytest.raises(ModuleNotFoundError, match="model_json is removed"):
    import vmsst.model_json  # pylint: disable=import-outside-toplevel,unused-import


def _flags_now(command: str) -> set[str]:
  """Every flag `python -m command` accepts, wherever it is defined (its --helpfull)."""
  done = subprocess.run([sys.executable, "-m", command, "--helpfull"], cwd=vmsst_testing.ROOT,
                        capture_output=True, text=True, timeout=300, check=False)
  assert done.returncode == 0, done.stderr[-2000:]
  return set(re.findall(r"^\s+--(?:\[no\])?(\w+):", done.stdout, re.M))


@pytest.mark.parametrize("old", sorted(old_names.RENAMED))
def test_the_message_says_truly_how_the_old_flags_map(old):
  """"same flags" only where the successor takes every old flag; else each one it lacks named."""
  successor = old_names.RENAMED[old]
  lacking = set(FLAGS_BEFORE[old]) - _flags_now(successor.command.split()[0])
  if successor.flags == "same flags":
    assert not lacking, lacking
  else:
    assert lacking and all(f"--{flag}" in successor.flags for flag in lacking), lacking


def test_memory_reports_successor_runs_every_variant_as_it_did():
  from vmsst.compiler import variants  # pylint: disable=import-outside-toplevel
  command = old_names.RENAMED["vmsst.memory_report"].command
  assert f"--variants={','.join(variants.VARIANTS)}" in command.split()
