"""A macro a run reads and nothing sets is one `error:` line naming it, the run file and the
`--gin.NAME=...` that sets it (gin itself says only "macro() missing ... 'value'").

In-process through configurables.parse_gin (what train, compile, teacher_cache and pretokenize
parse with), over every paper run file; then the commands' `main`s, in this process as well
(`vmsst_testing.command_here`: absl's parsing and `cli.user_errors`, as the commands run them).
"""

import re

import pytest

import vmsst.training.loop  # pylint: disable=unused-import  # registers train, what run files bind
import vmsst_testing
from vmsst.base import cli
from vmsst.compiler import step as compile_step
from vmsst.base import gin_utils
from vmsst.training import configurables
from vmsst.base.gin_utils import gin

ROOT = vmsst_testing.ROOT
PAPER_RUNS = sorted(p for pattern in ("*_paper.gin", "*_pretrained.gin")
                    for p in (ROOT / "gin" / "runs").glob(pattern)
                    if p.name != "base_paper.gin")  # the shared body, not a run
DISTILLATION = str(ROOT / "gin/runs/distillation_paper.gin")

# Registering imports TensorFlow, whose import starts a process (h5py asks `uname -p`): done
# once here, while the module loads, so the in-process cases stay in the unit tier.
configurables.register()


@pytest.fixture(autouse=True)
def _clean_gin():
  gin.clear_config()
  yield
  gin.clear_config()


def _named(message: str) -> list[str]:
  """The macros an error names, from its `--gin.NAME=` examples."""
  return sorted(set(re.findall(r"--gin\.([A-Z][A-Z0-9_]*)=", message)))


def test_every_paper_run_file_is_checked():
  assert len(PAPER_RUNS) >= 15 and any(p.name == "distillation_paper.gin" for p in PAPER_RUNS)


@pytest.mark.parametrize("run", PAPER_RUNS, ids=lambda p: p.name)
def test_a_paper_run_names_every_macro_it_leaves_unset_and_those_are_all_it_needs(run):
  with pytest.raises(cli.UserError) as error:
    configurables.parse_gin([str(run)], [])
  message = str(error.value)
  names = _named(message)
  assert names and "MODEL_DIR" in names, message  # the paper runs leave the paths to the user
  assert message.startswith(str(run)) and "\n" not in message
  for name in names:
    assert re.search(rf"\b{name} \(read by \w+\.\w+", message), (name, message)
  gin.clear_config()
  configurables.parse_gin([str(run)], [f"{name} = 'x'" for name in names])  # then it parses


def test_distillation_paper_names_the_teacher_width_with_what_reads_it():
  with pytest.raises(cli.UserError) as error:
    configurables.parse_gin([DISTILLATION], [])
  message = str(error.value)
  assert _named(message) == ["MODEL_DIR", "TEACHER_DIM", "TEACHER_MODEL_DIR", "VOCAB_PATH"]
  assert "TEACHER_DIM (read by Distillation.teacher_dim)" in message
  assert "--gin.TEACHER_DIM=<value>" in message
  assert "--gin.MODEL_DIR=\"'<model_dir>'\"" in message  # a path: a quoted string


def test_compile_needs_only_what_the_step_is_built_from():
  with pytest.raises(cli.UserError) as error:
    compile_step.load_run([DISTILLATION], [])
  assert _named(str(error.value)) == ["TEACHER_DIM"]  # not MODEL_DIR, VOCAB_PATH, ...
  run = compile_step.load_run([DISTILLATION], ["TEACHER_DIM = 512"])
  assert run.model.teacher_dim == 512


@pytest.mark.parametrize("run", [p for p in PAPER_RUNS if p.name != "distillation_paper.gin"],
                         ids=lambda p: p.name)
def test_compile_builds_the_other_paper_runs_with_their_paths_unset(run):
  configurables.parse_gin([str(run)], [], needs=compile_step.STEP_NEEDS)
  assert gin_utils.unset_macros(("train",))  # the paths stay unset: not the step's


def test_cpu_run_files_leave_nothing_unset():
  for run in sorted((ROOT / "gin" / "runs").glob("*_cpu*.gin")):
    if run.name.startswith("base_"):  # shared bodies, not runs
      continue
    gin.clear_config()
    configurables.parse_gin([str(run)], [])


@pytest.mark.parametrize("command, names", [
    ("vmsst.compile", ["TEACHER_DIM"]),
    ("vmsst.train", ["MODEL_DIR", "TEACHER_DIM", "TEACHER_MODEL_DIR", "VOCAB_PATH"]),
])
def test_the_command_prints_one_error_line_and_exits_2(command, names, monkeypatch, capfd):
  """`python -m COMMAND` past its imports, in this process (`vmsst_testing.command_here`): the
  macros are found where its `main` parses the run, after any check made before the imports."""
  monkeypatch.chdir(ROOT)
  with vmsst_testing.command_module(command) as module:
    result = vmsst_testing.command_here(module.main, command,
                                        ["--gin_file=gin/runs/distillation_paper.gin"], capfd)
  assert result.returncode == cli.USAGE_EXIT_CODE, result.stderr[-3000:]
  errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
  assert len(errors) == 1, result.stderr[-3000:]
  assert "gin/runs/distillation_paper.gin" in errors[0] and _named(errors[0]) == names
  assert "macro()" not in result.stderr and "Traceback" not in result.stderr
