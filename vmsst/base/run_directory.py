"""The run directory (MODEL_DIR): the one module that knows its layout.

`python -m vmsst.train` fills it; resuming, evaluating, calibrating,
exporting, comparing and starting another run from it read it back. Each
entry is named here once and every writer and reader asks for it by
function, so a directory moved to a bucket, resumed or exported is found the
same way everywhere (`tests/test_run_directory.py` fails on one of these names
written as a literal elsewhere in vmsst/ and vmsst_tasks):

  checkpoints/         orbax's checkpoints: parameters, optimizer and model state
                       (training/checkpointing.py writes, encoding/restore.py reads)
  config.gin           the operative gin config (gin_utils.write_operative_config)
  model.json           the model as plain data: objective, network, length, vocabulary
                       (encoding/restore.py; restoring needs neither gin nor the loop)
  spm.model            the vocabulary the run read, copied (the directory alone restores)
  data_counts.json     read / kept / skipped per task (vmsst_tasks.registry.data_counts)
  data_position/       the input stream's position at each checkpoint
                       (vmsst_tasks.pipeline.input_pipeline.save_position)
  tensorboard/         the logged scalars (training/scalar_writer.py writes,
                       evaluation/logged_curves.py reads)
  progress.json        the furthest step any run reached (training/goodput.py)
  early_stopping.json  the evaluations watched and the best step (training/early_stopping.py)
  quantization.json    the int8 calibration (`python -m vmsst.calibrate`, encoding/quantize.py)
  eval/                evaluation outputs: `python -m vmsst.evaluate --output`'s usual
                       place, the learning curve, `vmsst.compare`'s per-run results

A pre-tokenized stream's directory and an export's extra files hold some of
the same files under the same names (the vocabulary, the data counts,
model.json, config.gin, the calibration) so that they copy across unchanged:
those layouts use the names below too.
"""

from vmsst.base import files

CHECKPOINTS = "checkpoints"
CONFIG = "config.gin"
MODEL_SPEC = "model.json"
VOCABULARY = "spm.model"
DATA_COUNTS = "data_counts.json"
DATA_POSITIONS = "data_position"
TENSORBOARD = "tensorboard"
PROGRESS = "progress.json"
EARLY_STOPPING = "early_stopping.json"
CALIBRATION = "quantization.json"
EVALUATION = "eval"

NAMES = (CHECKPOINTS, CONFIG, MODEL_SPEC, VOCABULARY, DATA_COUNTS, DATA_POSITIONS, TENSORBOARD,
         PROGRESS, EARLY_STOPPING, CALIBRATION, EVALUATION)


def checkpoints(model_dir: str) -> str:
  """The checkpoint folder (orbax wants it absolute: pass files.abspath(model_dir))."""
  return files.join(model_dir, CHECKPOINTS)


def config(model_dir: str) -> str:
  """The operative gin config a run wrote when it started training (a resume compares it)."""
  return files.join(model_dir, CONFIG)


def model_spec(model_dir: str) -> str:
  """model.json: what restoring rebuilds the model from."""
  return files.join(model_dir, MODEL_SPEC)


def vocabulary(model_dir: str) -> str:
  """The copy of the vocabulary the run trained on."""
  return files.join(model_dir, VOCABULARY)


def data_counts(model_dir: str) -> str:
  """The read / kept / skipped report of the run's training data."""
  return files.join(model_dir, DATA_COUNTS)


def data_positions(model_dir: str) -> str:
  """The folder of the input stream's saved positions, one per checkpointed step."""
  return files.join(model_dir, DATA_POSITIONS)


def tensorboard(model_dir: str) -> str:
  """The folder of the run's TensorBoard event files."""
  return files.join(model_dir, TENSORBOARD)


def progress(model_dir: str) -> str:
  """The furthest step reached, which tells a resumed run's redone steps apart."""
  return files.join(model_dir, PROGRESS)


def early_stopping(model_dir: str) -> str:
  """Early stopping's state: the evaluations seen and the best step."""
  return files.join(model_dir, EARLY_STOPPING)


def calibration(model_dir: str) -> str:
  """The int8 calibration beside a model (a run directory or an export's)."""
  return files.join(model_dir, CALIBRATION)


def evaluation(model_dir: str, *names: str) -> str:
  """The evaluation folder, or a file in it (`evaluation(model_dir, "report.md")`)."""
  return files.join(model_dir, EVALUATION, *names)
