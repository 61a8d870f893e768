"""The run directory (MODEL_DIR): the one module that knows its layout.

`python -m vmsst.train` fills it; resuming, evaluating, calibrating,
exporting, comparing and starting another run from it read it back. Each
entry is named here once and every writer and reader asks for its path
(`of(model_dir).checkpoints`), so a directory moved to a bucket, resumed or exported is found the
same way everywhere (`tests/test_run_directory.py` fails on one of these names
written as a literal elsewhere in vmsst/ and vmsst_tasks):

  checkpoints/         orbax's checkpoints: parameters, optimizer and model state
                       (training/checkpointing.py writes, encoding/restore.py reads)
  config.gin           the operative gin config (gin_utils.write_operative_config);
                       config-<step>.gin: the one before a resume with changed settings
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

import dataclasses

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


@dataclasses.dataclass(frozen=True)
class Paths:
  """One run directory's entries as paths (local or gs://, as the directory is given).

  A run computes it once (`train`) and hands it down, so the stages that read
  or write the directory take the directory, not a string to rejoin.
  """
  root: str  # the directory itself, as given (messages name it)
  checkpoints: str  # orbax wants it absolute: of(files.abspath(model_dir)).checkpoints
  config: str  # written when training starts; a resume compares its bindings
  model_spec: str  # what restoring rebuilds the model from
  vocabulary: str  # the vocabulary the run trained on, copied
  data_counts: str  # the read / kept / skipped report of the training data
  data_positions: str  # the stream's saved positions, one folder per checkpointed step
  tensorboard: str  # the event files
  progress: str  # the furthest step reached: a resume's redone steps
  early_stopping: str  # the evaluations seen and the best step
  calibration: str  # the int8 calibration (a run directory's or an export's)


_ENTRIES = {"checkpoints": CHECKPOINTS, "config": CONFIG, "model_spec": MODEL_SPEC,
            "vocabulary": VOCABULARY, "data_counts": DATA_COUNTS,
            "data_positions": DATA_POSITIONS, "tensorboard": TENSORBOARD, "progress": PROGRESS,
            "early_stopping": EARLY_STOPPING, "calibration": CALIBRATION}


def of(model_dir: str) -> Paths:
  """The entries of the run directory `model_dir`."""
  return Paths(root=model_dir,
               **{field: files.join(model_dir, name) for field, name in _ENTRIES.items()})


def kept_config(step: int) -> str:
  """The name config.gin is kept under when a run resumes at `step` with changed settings
  (model.json's step ranges name it)."""
  return f"config-{step}.gin"


def evaluation(model_dir: str, *names: str) -> str:
  """The evaluation folder, or a file in it (`evaluation(model_dir, "report.md")`)."""
  return files.join(model_dir, EVALUATION, *names)
