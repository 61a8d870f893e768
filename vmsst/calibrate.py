r"""Writes a model's int8 calibration for --precision.

  python -m vmsst.calibrate --model_dir=runs/contrastive_cpu --input=calibration.txt
  python -m vmsst.calibrate --saved_model=runs/contrastive_cpu/export --input=calibration.txt

int8 and uint8 embeddings (`--precision` of embed, mine and `Encoder.encode`,
sentence-transformers' layouts: vmsst/encoding/quantize.py) cut each
dimension's range into 256 buckets. The ranges must not change from call to
call, so they are measured once, on sentences like the ones the model will
embed (a few thousand lines of the same kind of text; held-out data, not the
test set), and saved as `quantization.json` beside the model: in --model_dir,
or in a SavedModel's assets.extra/ (or --output, a directory). The ranges of
the raw and of the L2-normalised vectors are both kept. `python -m
vmsst.export` copies a model directory's calibration into the SavedModel and
its quantized signatures (or computes one with its own --calibration).
"""

from vmsst.base import cli  # pylint: disable=g-bad-import-order
from vmsst.base import path_checks  # pylint: disable=g-bad-import-order
from vmsst.base import console  # pylint: disable=g-bad-import-order

if __name__ == "__main__":  # the command, not an import: before TensorFlow and JAX load
  console.quiet_startup()

# pylint: disable=wrong-import-position
from typing import Sequence

from absl import flags

from vmsst.encoding import calibration
from vmsst.encoding import encoder_flags
from vmsst.encoding import quantize

FLAGS = flags.FLAGS


def default_output() -> str:
  """Beside the model: the model directory, or a SavedModel's assets.extra/."""
  return quantize.calibration_dir(model_dir=FLAGS.model_dir, saved_model=FLAGS.saved_model)


def _define_flags() -> None:
  encoder_flags.define()
  flags.DEFINE_string("input", None, "The calibration set: UTF-8 text, one sentence per line.")
  flags.DEFINE_string("output", None, "The directory to write quantization.json in (default: "
                      "--model_dir, or the SavedModel's assets.extra/).")
  flags.mark_flags_as_required(["input"])


def main(argv: Sequence[str]) -> None:
  cli.check_no_arguments(argv)
  encoder_flags.check_one()
  if FLAGS.encoder:
    raise cli.UserError("--encoder has no model directory to keep a calibration beside; give "
                        "--model_dir or --saved_model.")
  path_checks.check_input_file("input", FLAGS.input, "a UTF-8 text file, one sentence per line")
  output = FLAGS.output or default_output()
  try:
    print(calibration.calibrate_file(encoder_flags.unique_from_flags, FLAGS.input, output))
  except (FileNotFoundError, ValueError) as e:
    raise cli.UserError(str(e)) from e


if __name__ == "__main__":
  _define_flags()
  cli.run(main)
