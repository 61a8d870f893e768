"""bench/readme_output.py: the README's printed output names the model `make train` leaves.

No training here: the README's block is checked against the script's format and
against the step `make train` ends at; the script itself reruns the example.
"""

import importlib.util
import pathlib
import re

ROOT = pathlib.Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("readme_output", ROOT / "bench" / "readme_output.py")
readme_output = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(readme_output)

README = (ROOT / "README.md").read_text(encoding="utf-8")


def _final_step() -> int:
  """TRAIN_STEPS of the run `make train` trains: the step its last checkpoint holds."""
  text = (ROOT / "gin" / "runs" / "vmsst_cpu.gin").read_text()
  return int(re.search(r"^TRAIN_STEPS = (\d+)", text, re.M).group(1))


def test_the_example_loads_the_model_make_train_leaves():
  assert f'from_checkpoint("{readme_output.MODEL_DIR}")' in readme_output.example(README)


def test_the_caption_names_make_trains_last_step_and_the_command_that_prints_it():
  expected = readme_output.CAPTION.format(model_dir=readme_output.MODEL_DIR,
                                          step=f"{_final_step():,}")
  assert readme_output.caption(README) == expected


def test_the_printed_block_is_a_shape_and_one_row_of_similarities():
  lines = readme_output.output_block(README).splitlines()
  assert re.fullmatch(r"\(3, \d+\)", lines[0]), lines
  assert re.fullmatch(r"\[\[ *-?\d\.\d+ +-?\d\.\d+\]\]", lines[1]), lines
  assert len(lines) == 2


def test_rewriting_replaces_only_the_output_and_the_caption():
  new = readme_output.rewritten(README, "(3, 64)\n[[0.5 0.25]]\n", 1600)
  assert readme_output.output_block(new) == "(3, 64)\n[[0.5 0.25]]\n"
  assert "at step 1,600," in readme_output.caption(new)
  assert readme_output.example(new) == readme_output.example(README)
  assert new.replace(readme_output.output_block(new), "").replace(
      readme_output.caption(new), "") == README.replace(
          readme_output.output_block(README), "").replace(readme_output.caption(README), "")
