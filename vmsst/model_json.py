"""Writes model.json into an older model directory.

`encoding.restore.restore` builds the model from MODEL_DIR/model.json alone (no
gin). Older directories have only config.gin; this command reads it once,
with the training entrypoint's gin names, and writes the model.json that the
run would write today. It is the one place outside training that parses a
run's config.gin.

  python -m vmsst.model_json --model_dir=runs/old_vmsst
"""

from vmsst import cli  # pylint: disable=g-bad-import-order

if __name__ == "__main__":  # the command, not an import: before TensorFlow and JAX load
  cli.quiet_startup()

# pylint: disable=wrong-import-position
import gin
from absl import flags

from vmsst import files

_MODEL_DIR = flags.DEFINE_string("model_dir", None, "A directory written by "
                                 "`python -m vmsst.train` that has config.gin.")

if __name__ == "__main__":  # --help before the model side's imports (TensorFlow, JAX)
  cli.answer_help()

from vmsst.encoding import restore  # pylint: disable=g-bad-import-order
# pylint: disable-next=unused-import,g-bad-import-order
from vmsst.training import loop  # registers train, the configurable config.gin binds


def convert(model_dir: str) -> str:
  """Writes MODEL_DIR/model.json from MODEL_DIR/config.gin; returns its path.

  An entrypoint: it replaces the process's gin config with the run's.
  """
  config_path = files.join(model_dir, restore.CONFIG_FILE)
  if not files.exists(config_path):
    raise FileNotFoundError(f"{config_path} not found: --model_dir must be a directory "
                            "written by `python -m vmsst.train`.")
  with gin.unlock_config():
    gin.clear_config()
    gin.parse_config(files.read_text(config_path))  # an operative config: no includes
  model = gin.query_parameter("train.model").scoped_configurable_fn()
  sequence_length = int(_value(gin.query_parameter("train.sequence_length")))
  vocabulary = restore.VOCABULARY_FILE
  if not files.exists(files.join(model_dir, vocabulary)):  # before spm.model was copied
    vocabulary = files.abspath(_value(gin.query_parameter("get_vocabulary.path")))
  restore.write_model_json(model_dir, model, sequence_length, vocabulary)
  return files.join(model_dir, restore.MODEL_FILE)


def _value(binding):
  """A gin binding's value, resolving `%MACRO` references."""
  return binding.scoped_configurable_fn() if isinstance(
      binding, gin.config.ConfigurableReference) else binding


def main(argv):
  if len(argv) > 1:
    raise cli.UserError(f"unexpected arguments {argv[1:]}: pass --model_dir=DIR only.")
  if not _MODEL_DIR.value:
    raise cli.UserError("--model_dir is required: a directory with config.gin.")
  try:
    print(convert(_MODEL_DIR.value))
  except FileNotFoundError as e:  # the message names the file and the fix
    raise cli.UserError(str(e)) from e


if __name__ == "__main__":
  cli.run(main)
