"""The run directory (MODEL_DIR): the one module that knows its layout.

`python -m vmsst.train` fills it; resuming, evaluating, calibrating,
exporting, comparing and starting another run from it read it back. Each
entry is named here once and every writer and reader asks for its path
(`of(model_dir).checkpoints`), so a directory moved to a bucket, resumed or exported is found the
same way everywhere (`tests/test_run_directory.py` fails on one of these names
written as a literal elsewhere in vmsst/ and vmsst_tasks):

  checkpoints/<step>/  orbax's checkpoints (training/checkpointing.py writes them,
                       encoding/restore.py reads the state), two items each:
    default/           the train state: parameters, optimizer and model state
    data_position/     the input stream's position after that step, each host's share
                       (vmsst_tasks.pipeline.input_pipeline.HostBatches.save)
  config.gin           the operative gin config (gin.config_str(), as t5x writes it);
                       config-<step>.gin: the one before a resume with changed settings
  model.json           the model as plain data: objective, network, length, vocabulary
                       (encoding/restore.model_spec; restoring needs neither gin nor the loop)
  spm.model            the vocabulary the run read, copied (the directory alone restores)
  data_counts.json     read / kept / skipped per task (vmsst_tasks.registry.data_counts)
  tensorboard/         the logged scalars (training/scalar_writer.py writes,
                       evaluation/logged_curves.py reads)
  progress.json        the furthest step any run reached (goodput's redone steps)
  early_stopping.json  the evaluations watched and the best step (training/early_stopping.py)
  quantization.json    the int8 calibration (`python -m vmsst.calibrate`, encoding/quantize.py)
  eval/                evaluation outputs: `python -m vmsst.evaluate --output`'s usual
                       place, the learning curve, `vmsst.compare`'s per-run results

A pre-tokenized stream's directory and an export's extra files hold some of
the same files under the same names (the vocabulary, the data counts,
model.json, config.gin, the calibration) so that they copy across unchanged:
those layouts use the names below too.

A run reads what earlier runs left once, when it starts (`read`: the saved
steps, config.gin, model.json, the progress), and writes its own records once
it goes ahead (`write_start`), so the stages in between decide on plain values
and only this module and vmsst.base.files touch the directory's small files.
"""

import dataclasses
import json
from typing import Any

from absl import logging

from vmsst.base import files

CHECKPOINTS = "checkpoints"
CONFIG = "config.gin"
MODEL_SPEC = "model.json"
VOCABULARY = "spm.model"
DATA_COUNTS = "data_counts.json"
TENSORBOARD = "tensorboard"
PROGRESS = "progress.json"
EARLY_STOPPING = "early_stopping.json"
CALIBRATION = "quantization.json"
EVALUATION = "eval"

NAMES = (CHECKPOINTS, CONFIG, MODEL_SPEC, VOCABULARY, DATA_COUNTS, TENSORBOARD,
         PROGRESS, EARLY_STOPPING, CALIBRATION, EVALUATION)

# The items of each checkpoint step: the state under orbax's name for a lone item (so a step
# saved before the data position was an item restores the same way), and the data position.
STATE = "default"
DATA_POSITION = "data_position"


@dataclasses.dataclass(frozen=True)
class Paths:
  """One run directory's entries as paths (local or gs://, as the directory is given).

  A run computes it once (`train`) and hands it down, so the stages that read
  or write the directory take the directory, not a string to rejoin.
  """
  root: str  # the directory itself, as given (messages name it)
  checkpoints: str  # absolute, as orbax wants it
  config: str  # written when training starts; a resume compares its bindings
  model_spec: str  # what restoring rebuilds the model from
  vocabulary: str  # the vocabulary the run trained on, copied
  data_counts: str  # the read / kept / skipped report of the training data
  tensorboard: str  # the event files
  progress: str  # the furthest step reached: a resume's redone steps
  early_stopping: str  # the evaluations seen and the best step
  calibration: str  # the int8 calibration (a run directory's or an export's)


_ENTRIES = {"checkpoints": CHECKPOINTS, "config": CONFIG, "model_spec": MODEL_SPEC,
            "vocabulary": VOCABULARY, "data_counts": DATA_COUNTS,
            "tensorboard": TENSORBOARD, "progress": PROGRESS,
            "early_stopping": EARLY_STOPPING, "calibration": CALIBRATION}


def of(model_dir: str) -> Paths:
  """The entries of the run directory `model_dir`."""
  return Paths(root=model_dir,
               **{field: files.join(model_dir, name) for field, name in _ENTRIES.items()
                  if field != "checkpoints"},
               checkpoints=files.join(files.abspath(model_dir), CHECKPOINTS))


@dataclasses.dataclass(frozen=True)
class Found:
  """What a run starting in the directory finds there, read once (`read`)."""
  paths: Paths
  checkpoint_steps: tuple[int, ...]  # orbax's saved steps, oldest first
  config: str | None  # config.gin's text (None: none yet)
  model_spec: dict[str, Any]  # model.json ({}: none, or a directory from before model.json)
  progress: int | None  # the furthest step an earlier run reached (None: no record)


def read(model_dir: str) -> Found:
  """The directory's paths and what earlier runs left in it (nothing: a fresh run)."""
  paths = of(model_dir)
  return Found(paths=paths, checkpoint_steps=tuple(checkpoint_steps(paths.checkpoints)),
               config=files.read_text(paths.config) if files.isfile(paths.config) else None,
               model_spec=read_model_spec(paths), progress=_read_progress(paths.progress))


def checkpoint_steps(folder: str) -> list[int]:
  """The saved steps in a checkpoints `folder` (orbax's numbered directories)."""
  if not files.isdir(folder):
    return []
  return sorted(int(n.rstrip("/")) for n in files.listdir(folder) if n.rstrip("/").isdigit())


def read_model_spec(paths: Paths) -> dict[str, Any]:
  """model.json as written (`write_model_spec`); {} when there is none."""
  if not files.isfile(paths.model_spec):
    return {}
  return json.loads(files.read_text(paths.model_spec))


def write_model_spec(paths: Paths, spec: dict[str, Any]) -> None:
  """model.json: the model as plain data (vmsst.encoding.restore.model_spec builds it)."""
  files.write_text(paths.model_spec, json.dumps(spec, indent=2, sort_keys=True))


def read_data_counts(paths: Paths) -> dict[str, Any] | None:
  """The data counts report a run or a pre-tokenized stream kept; None when there is none."""
  if not files.exists(paths.data_counts):
    return None
  return json.loads(files.read_text(paths.data_counts))


def write_data_counts(paths: Paths, report: dict[str, Any]) -> None:
  """The read / kept / skipped report (vmsst_tasks.registry.data_counts builds it)."""
  files.write_text(paths.data_counts, json.dumps(report, indent=1) + "\n")


def write_start(paths: Paths, *, config: str, model_spec: dict[str, Any],
                data_counts: dict[str, Any] | None, vocabulary: str,
                keep_config_as: str | None = None) -> None:
  """What a run writes once it goes ahead, so that the directory alone restores its model.

  Args:
    config: the operative gin config, for config.gin.
    model_spec: model.json's fields.
    data_counts: the training data's read / kept / skipped report (None: none).
    vocabulary: the SentencePiece file the run reads, copied in.
    keep_config_as: a resume with changed settings first keeps the earlier
      config.gin under this name (`kept_config`), which model.json's step ranges name.
  """
  if keep_config_as and files.isfile(paths.config):
    files.rename(paths.config, files.join(paths.root, keep_config_as))
  files.write_text(paths.config, config)
  write_model_spec(paths, model_spec)
  if data_counts is not None:
    write_data_counts(paths, data_counts)
  files.copy(vocabulary, paths.vocabulary)


def record_progress(paths: Paths, step: int, *, previous: int | None = None) -> None:
  """The furthest step reached, this run's `step` or an earlier run's `previous` (what `read`
  found): a later resume counts the steps up to it as redone."""
  files.write_text(paths.progress, json.dumps({"step": max(int(step), previous or 0)}) + "\n")


def _read_progress(path: str) -> int | None:
  if not files.exists(path):
    return None
  try:
    return int(json.loads(files.read_text(path))["step"])
  except (ValueError, KeyError, TypeError) as e:
    logging.warning("%s is unreadable (%s); redone steps are not counted", path, e)
    return None


def kept_config(step: int) -> str:
  """The name config.gin is kept under when a run resumes at `step` with changed settings
  (model.json's step ranges name it)."""
  return f"config-{step}.gin"


def evaluation(model_dir: str, *names: str) -> str:
  """The evaluation folder, or a file in it (`evaluation(model_dir, "report.md")`)."""
  return files.join(model_dir, EVALUATION, *names)
