"""`--help` of every command answers before the command's slow imports: no TensorFlow.

A help text used to load TensorFlow (15 s and 1 GB on 2 cores) to print flags.
Each command of the index runs as `python -m` would, asked for --help, in a
child process that then reports which heavy libraries it imported
(bench/help_time.py's probe, which also times them into docs/results/help_time/).
Asserted on the modules loaded, not on seconds.
"""

import importlib.util

import pytest

import vmsst_testing

_spec = importlib.util.spec_from_file_location("help_time",
                                               vmsst_testing.ROOT / "bench" / "help_time.py")
help_time = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(help_time)

# Commands whose help loads no JAX either (their flags are defined before any JAX import).
JAX_FREE = ("vmsst.vocabulary", "vmsst.train", "vmsst.pretokenize", "vmsst.teacher_cache",
            "vmsst.embed", "vmsst.score", "vmsst.export")


@pytest.mark.slow
@pytest.mark.parametrize("command", help_time.commands())
def test_help_loads_no_tensorflow(command):
  found = help_time.heavy_modules(command)
  assert found["code"] in (0, None), found
  assert "flags:" in found["help"] or "--" in found["help"], found["help"][-2000:]
  assert "tensorflow" not in found["heavy"], found["heavy"]
  if command in JAX_FREE:
    assert not {"jax", "flax", "orbax", "seqio"} & set(found["heavy"]), found["heavy"]


@pytest.mark.slow
def test_the_probe_sees_a_heavy_import():
  """The probe is no tautology: a module that imports TensorFlow is reported."""
  assert "tensorflow" in help_time.heavy_modules("tensorflow.python.tools.saved_model_cli")[
      "heavy"]


def test_the_index_names_every_export_format():
  from vmsst import __main__ as index  # pylint: disable=import-outside-toplevel
  from vmsst.export_formats import export_flags  # pylint: disable=import-outside-toplevel
  (line,) = [line for line in index.index().splitlines() if "python -m vmsst.export " in line]
  described = line.split("python -m vmsst.export", 1)[1].lower().replace("-", "")
  for name in export_flags.FORMATS:
    assert name.replace("-", "") in described, (name, line)
