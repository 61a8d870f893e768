"""Plots held-out retrieval against step and wall-clock.

One run's curve, read back from training's TensorBoard events by
`vmsst.evaluation.logged_curves` and drawn by `vmsst.comparison.curves` (the
main job draws its own next to its evaluation report; `vmsst.compare` draws
every objective's).

  python -m vmsst.learning_curves --model_dir=runs/vmsst_cpu [--output=curve.png]
"""

from vmsst.base import cli  # pylint: disable=g-bad-import-order
from vmsst.base import path_checks  # pylint: disable=g-bad-import-order
from vmsst.base import console  # pylint: disable=g-bad-import-order

if __name__ == "__main__":  # the command, not an import: before TensorFlow and JAX load
  console.quiet_startup()

# pylint: disable=wrong-import-position
from absl import flags

from vmsst.base import files
from vmsst.base import run_directory
from vmsst.comparison import curves as curves_lib
from vmsst.evaluation import logged_curves

_MODEL_DIR = flags.DEFINE_string("model_dir", None, "The run's MODEL_DIR.", required=True)
_OUTPUT = flags.DEFINE_string("output", None,
                              "PNG path (default MODEL_DIR/eval/learning_curve.png).")


def main(argv):
  """Reads MODEL_DIR's held-out retrieval curve and plots it to --output."""
  del argv
  model_dir = _MODEL_DIR.value
  output = _OUTPUT.value or run_directory.evaluation(model_dir, "learning_curve.png")
  if not files.isdir(model_dir):
    raise cli.UserError(f"--model_dir={model_dir} is not a directory; give a MODEL_DIR written "
                        "by `python -m vmsst.train`.")
  path_checks.check_output_path("output", output)
  try:
    curve = logged_curves.read_curve(model_dir)
  except FileNotFoundError as e:  # the message names the folder and the fix
    raise cli.UserError(str(e)) from e
  if not curve["step"]:
    raise cli.UserError(f"{model_dir} has no {logged_curves.TAG} events; train with "
                        "train.eval_every > 0.")
  files.makedirs(files.parent(output) or ".")
  curves_lib.plot({files.name(model_dir): {0: curve}}, output)
  print(f"wrote {output}: {logged_curves.TAG} {curve['value'][-1]:.2f}% at step "
        f"{curve['step'][-1]}")


if __name__ == "__main__":
  cli.run(main)
