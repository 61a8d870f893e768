"""The flags of `python -m vmsst.export` and their checks, importing no TensorFlow or JAX.

export.py needs both (about 9 s of imports on 2 cores), so the command parses
and checks its flags with this module first (`cli.check_early`): a mistyped
--output or --step is one `error:` line in under a second, never after a
restore or a trace.
"""


from absl import flags

from vmsst.base import cli
from vmsst.base import path_checks
from vmsst.base import files
from vmsst.base import run_directory
from vmsst.encoding import encoder_flags

FLAGS = flags.FLAGS
DTYPES = ("bfloat16", "float32")  # encoding.restore.PRECISIONS (a test holds them equal)
# savedmodel, then hf_export.FORMATS
FORMATS = ("savedmodel", "sentence-transformers", "huggingface")


def define() -> None:
  """Only when run as a command: importers (tests, other entrypoints) own their flags."""
  encoder_flags.define_model_dir()
  flags.DEFINE_enum("format", "savedmodel", list(FORMATS), "savedmodel: TensorFlow "
                    "SavedModel; sentence-transformers and huggingface: one directory that "
                    "SentenceTransformer(OUT), mteb and transformers' AutoModel (pooled and "
                    "projected as the model card shows) all read, no custom code; the format "
                    "picks the loader the card leads with (vmsst/export_formats/huggingface.py).")
  flags.DEFINE_integer("step", None, "Checkpoint step (default: the latest).")
  flags.DEFINE_string("output", None, "New directory for the SavedModel and params.")
  encoder_flags.define_normalize("the exported embeddings")
  flags.DEFINE_string("calibration", None, "A calibration set (one sentence a line) for the "
                      "int8/uint8 signatures; default: --model_dir's quantization.json (python "
                      "-m vmsst.calibrate), if any.")
  flags.DEFINE_list("platforms", ["cpu"], "jax2tf lowering targets: cpu, cuda, tpu.")
  flags.DEFINE_enum("dtype", None, list(DTYPES), "Activation/matmul precision "
                    "of the graph (default: the trained one); embeddings stay float32.")
  import sys  # pylint: disable=import-outside-toplevel
  cli.show_in_help(module=sys.modules[__name__])


def check() -> None:
  """What the user can get wrong, checked before the imports, the restore and the trace.

  Raises:
    cli.UserError: a missing flag, a --model_dir that is not a training
      directory, a --step it does not hold, or an --output that is a file or
      a non-empty directory, each naming the flag and the fix.
  """
  model_dir, output, step = FLAGS.model_dir, FLAGS.output, FLAGS.step
  if not model_dir or not output:
    raise cli.UserError("give --model_dir (a python -m vmsst.train directory) and --output "
                        "(a new directory for the SavedModel).")
  encoder_flags.check_paths(model_dir=model_dir)  # one error line, not a restore traceback
  path_checks.check_output_path("output", output, directory=True)
  if files.isdir(output) and files.listdir(output):
    raise cli.UserError(f"--output={output} exists and is not empty; pick a new directory or "
                        "delete it first.")
  if FLAGS.format != "savedmodel" and (FLAGS.normalize or FLAGS.dtype
                                       or FLAGS.platforms != ["cpu"]):
    raise cli.UserError(f"--normalize, --dtype and --platforms shape the SavedModel only; drop "
                        f"them with --format={FLAGS.format} (its weights are float32).")
  if FLAGS.calibration:
    if FLAGS.format != "savedmodel":
      raise cli.UserError(f"--calibration calibrates the SavedModel's int8 signatures; drop it "
                          f"with --format={FLAGS.format}.")
    path_checks.check_input_file("calibration", FLAGS.calibration, "a calibration set, one sentence "
                                 "a line")
  checkpoints = run_directory.of(model_dir).checkpoints
  if step is not None:
    steps = run_directory.checkpoint_steps(checkpoints)
    if step not in steps:
      raise cli.UserError(f"--step={step}: {checkpoints} holds steps "
                          f"{', '.join(map(str, steps)) or 'none'}; pick one, or drop --step "
                          "for the latest.")
