"""A trained model directory, restored: model, parameters and vocabulary.

A model directory written by `python -m vmsst.train` holds everything needed:
`model.json` (objective, network, sequence length, vocabulary file: plain
data, so restoring needs neither gin nor the training loop and leaves a
caller's gin config alone), `spm.model` (the vocabulary) and `checkpoints/`.
Only the parameters are restored (orbax partial restore), never the optimizer
state, so evaluating a 24-layer model needs no room for its Adafactor/Adam
moments. Embedding
sentences with what is restored is `encoding.checkpoint.CheckpointEncoder`.

A directory an earlier vmsst wrote (no model.json, or a checkpoint without
the language table `language_embed`) is not read: restoring one is a
cli.UserError naming the fix, a fresh run started from its parameters
(`OLD_DIRECTORY_FIX`).
"""

import dataclasses
import inspect
import json
from typing import Any, Sequence

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import orbax.checkpoint as ocp

from vmsst.base import cli
from vmsst.base import files
from vmsst.base import run_directory
from vmsst.model import models
from vmsst.model import param_files
from vmsst.model import partitioning
from vmsst.base import sentencepiece_vocabulary
from vmsst.model.config import NetworkConfig
from vmsst.objectives import MODELS
from vmsst.objectives import nested as nested_lib
from vmsst.objectives import query_tower


@dataclasses.dataclass(frozen=True)
class RestoredModel:
  """A model, its parameters (sharded over `mesh`) and its input pipeline."""
  model: models.EmbeddingModel
  params: Any
  vocabulary: sentencepiece_vocabulary.SentencePieceVocabulary  # ids in Python, no TensorFlow
  sequence_length: int
  step: int
  mesh: jax.sharding.Mesh


PRECISIONS = ("bfloat16", "float32")


def restore(model_dir: str, *, step: int | None = None,
            mesh: jax.sharding.Mesh | None = None, dtype: str | None = None) -> RestoredModel:
  """Rebuilds the model from MODEL_DIR/model.json and restores its parameters.

  Args:
    model_dir: a directory written by `python -m vmsst.train`.
    step: checkpoint step (default: the latest).
    mesh: where to place the parameters (default: all devices on "data").
    dtype: activation/matmul precision to run at ("bfloat16" or "float32"),
      whatever the run trained with (default: the trained one). Parameters
      stay float32, so a float32 checkpoint encodes in bf16 (about 1.6x the
      throughput on CPUs with AVX512-BF16) and back.
  """
  if dtype is not None and dtype not in PRECISIONS:
    raise ValueError(f"dtype={dtype!r}: choose one of {PRECISIONS} (or None for the "
                     f"precision {model_dir} trained with).")
  model, sequence_length, vocab_path = read_model_json(model_dir, dtype, step)
  vocab = sentencepiece_vocabulary.read_vocabulary(vocab_path)
  mesh = mesh or partitioning.make_mesh()
  manager = ocp.CheckpointManager(run_directory.of(model_dir).checkpoints)
  step = manager.latest_step() if step is None else step
  if step is None:
    raise FileNotFoundError(f"{model_dir}/checkpoints has no checkpoint; train first "
                            "(`python -m vmsst.train --gin.MODEL_DIR=...`).")
  boxed = jax.eval_shape(
      lambda rng: model.get_initial_variables(rng, models.batch_shapes(1, sequence_length)),
      jax.random.key(0))["params"]
  shardings = partitioning.logical_shardings(boxed, mesh)
  abstract = jax.tree.map(lambda x, s: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=s),
                          nn.unbox(boxed), shardings)
  _check_language_table(model_dir, step, abstract)
  item = {"params": abstract}
  restored = manager.restore(step, args=ocp.args.PyTreeRestore(
      item=item, restore_args=ocp.checkpoint_utils.construct_restore_args(item),
      partial_restore=True))
  return RestoredModel(model=model, params=restored["params"], vocabulary=vocab,
                       sequence_length=sequence_length, step=step, mesh=mesh)


LANGUAGE_TABLE = "language_embed"


def _check_language_table(model_dir: str, step: int, abstract: dict[str, Any]) -> None:
  """The model has a language table, so its checkpoint must (earlier ones had `<2xxx>` pieces).

  Raises:
    cli.UserError: the checkpoint predates the table, naming the fix.
  """
  if LANGUAGE_TABLE not in abstract:
    return
  metadata = ocp.PyTreeCheckpointer().metadata(param_files.checkpoint_item(model_dir, step))
  if LANGUAGE_TABLE not in metadata.item_metadata.tree["params"]:
    raise cli.UserError(f"{model_dir}: its checkpoint (step {step}) has no language table "
                        f"(params/{LANGUAGE_TABLE}): "
                        + OLD_DIRECTORY_FIX.format(model_dir=model_dir))


# What a directory an earlier vmsst wrote needs: a run of this version started from its
# parameters writes model.json and a language table (tests/encoding/test_old_model_dirs.py).
OLD_DIRECTORY_FIX = (
    "an earlier vmsst wrote it, and this version does not read such directories. Train a "
    "fresh MODEL_DIR from its parameters: python -m vmsst.train --gin_file=gin/runs/<the run "
    "that trained it>.gin --gin.MODEL_DIR=\"'<new directory>'\" "
    "--gin.train.init_params=\"'{model_dir}'\" (every parameter of the same name and shape "
    "is loaded; a language table starts fresh); that run writes model.json.")


def write_model_json(model_dir: str, model: models.EmbeddingModel, sequence_length: int,
                     vocabulary: str = run_directory.VOCABULARY,
                     step_ranges: Sequence[dict[str, Any]] | None = None) -> None:
  """MODEL_DIR/model.json: what `restore` rebuilds the model from, as plain data.

  vocabulary is relative to model_dir (or absolute, for directories trained
  before spm.model was copied into them).

  objective_args are the constructor's keyword arguments the model keeps as
  attributes (or gin bound) and JSON can hold; the others (data paths read at
  training time, NLI examples) do not change the parameter tree.

  step_ranges: only for a run resumed with changed settings
  (`train --resume_with_changes`): [{"first_step", "last_step" (null: the
  latest), "sequence_length", "config" (that range's config.gin)}]; the
  top-level sequence_length is the latest range's.
  """
  spec = model_spec(model, sequence_length, vocabulary)
  if step_ranges:
    spec["step_ranges"] = list(step_ranges)
  run_directory.write_model_spec(run_directory.of(model_dir), spec)


def model_spec(model: models.EmbeddingModel, sequence_length: int,
               vocabulary: str = run_directory.VOCABULARY) -> dict[str, Any]:
  """model.json's fields for `model` (see write_model_json)."""
  names = [k for k, cls in MODELS.items() if type(model) is cls]  # pylint: disable=unidiomatic-typecheck
  if not names:
    raise ValueError(f"{type(model).__name__} is not in vmsst.objectives.MODELS: add it there "
                     "so its model directories restore.")
  network = {k: _json_value(v) for k, v in dataclasses.asdict(model.network_config).items()}
  return {"objective": names[0], "objective_args": _objective_args(model), "network": network,
          "sequence_length": int(sequence_length), "vocabulary": vocabulary}


def _json_value(value: Any) -> Any:
  """Dtypes by name (NetworkConfig takes "bfloat16"), tuples as lists."""
  if isinstance(value, (type, np.dtype)) or hasattr(value, "dtype") and callable(value):
    return str(jnp.dtype(value))
  if isinstance(value, nested_lib.NestedDims):  # objectives' `nested`: its sizes and weights
    return {"sizes": list(value.sizes), "weights": list(value.weights)}
  return list(value) if isinstance(value, tuple) else value


def _objective_args(model: models.EmbeddingModel) -> dict[str, Any]:
  """The keyword arguments of the model's constructor that JSON can hold."""
  from vmsst.base.gin_utils import gin  # pylint: disable=import-outside-toplevel  # read, never set
  try:
    bound = gin.get_bindings(type(model))
  except (ValueError, KeyError, AttributeError):  # not a gin configurable; gin-config absent
    bound = {}
  args = {}
  for name, param in inspect.signature(type(model).__init__).parameters.items():
    if param.kind is not inspect.Parameter.KEYWORD_ONLY:
      continue
    value = _json_value(getattr(model, name, bound.get(name, param.default)))
    try:
      json.dumps(value)
    except TypeError:
      continue
    args[name] = value
  return args


def read_model_json(model_dir: str, dtype: str | None = None, step: int | None = None
                    ) -> tuple[models.EmbeddingModel, int, str]:
  """(model, sequence length, vocabulary path) from MODEL_DIR/model.json.

  The sequence length is the one `step` was trained at (model.json's
  `step_ranges`, written by a resume with changed settings); the latest's by default.
  """
  paths = run_directory.of(model_dir)
  path = paths.model_spec
  if not files.exists(path):
    if files.exists(paths.config):
      raise cli.UserError(f"{path} not found beside {run_directory.CONFIG}: "
                          f"{OLD_DIRECTORY_FIX.format(model_dir=model_dir)}")
    raise FileNotFoundError(f"{path} not found: --model_dir must be a directory written by "
                            "`python -m vmsst.train`.")
  spec = run_directory.read_model_spec(paths)
  if spec.get("objective") not in MODELS:
    raise ValueError(f"{path}: objective {spec.get('objective')!r} is not one of "
                     f"{sorted(MODELS)} (vmsst.objectives.MODELS).")
  tuples = {f.name for f in dataclasses.fields(NetworkConfig) if isinstance(f.default, tuple)}
  network = {k: tuple(v) if k in tuples else v for k, v in spec["network"].items()}
  if dtype is not None:
    network["dtype"] = str(jnp.dtype(dtype))
  cls = MODELS[spec["objective"]]
  defaults = inspect.signature(cls.__init__).parameters
  args = {k: tuple(v) if isinstance(defaults[k].default, tuple) else v
          for k, v in spec["objective_args"].items() if k in defaults}
  if args.get("nested") is not None:
    args["nested"] = nested_lib.NestedDims(**args["nested"])
  model = cls(NetworkConfig(**network), **args)
  length = spec["sequence_length"]
  for part in spec.get("step_ranges") or () if step is not None else ():
    if part["first_step"] <= step and (part["last_step"] is None or step <= part["last_step"]):
      length = part["sequence_length"] or length
  return model, int(length), files.join(model_dir, spec["vocabulary"])


def restore_document_tower(model_dir: str):
  """The frozen document tower a query-tower run saved, as a `RestoredModel`.

  It lives in the checkpoint's model state, not its parameters (which are
  the tuned query tower), so `restore` alone would embed documents
  with the wrong tower. Only those tensors are read (orbax partial restore).

  Raises:
    ValueError: model_dir was not trained with QueryTower.
  """
  restored = restore(model_dir)
  if not isinstance(restored.model, query_tower.QueryTower):
    raise ValueError(f"{model_dir} was trained with {type(restored.model).__name__}, not "
                     "QueryTower: it has no document tower; pass a query-tower run directory.")
  abstract = jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=x.sharding),
                          restored.params)
  item = {"model_state": {query_tower.DOCUMENTS: abstract}}
  manager = ocp.CheckpointManager(run_directory.of(model_dir).checkpoints)
  documents = manager.restore(restored.step, args=ocp.args.PyTreeRestore(
      item=item, restore_args=ocp.checkpoint_utils.construct_restore_args(item),
      partial_restore=True))["model_state"][query_tower.DOCUMENTS]
  return dataclasses.replace(restored, params=documents)


def student_params_file(model_dir: str, output: str, *, model: models.EmbeddingModel,
                        sequence_length: int = 8) -> list[str]:
  """Writes the parameters `model` shares with a trained model_dir, for `train.init_params`.

  Any of our objectives' checkpoints has the embedding table and the semantic
  encoder; those names (and only those the student has, with equal shapes)
  are written, so a VMSST checkpoint's decoder is left out and the head keeps
  its fresh initialisation.

  Returns:
    The "/"-joined parameter names written.
  """
  restored = restore(model_dir)
  wanted = jax.eval_shape(
      lambda rng: model.get_initial_variables(rng, models.batch_shapes(1, sequence_length)),
      jax.random.key(0))
  shapes = {k: v.shape for k, v in param_files.flatten(nn.unbox(wanted["params"])).items()}
  stored = param_files.flatten(jax.device_get(restored.params))
  shared: dict[str, Any] = {k: np.asarray(v) for k, v in stored.items()
                            if k in shapes and shapes[k] == np.shape(v)}
  if not shared:
    raise ValueError(f"{model_dir} shares no parameter with the student: is its NetworkConfig "
                     "the student's size?")
  param_files.save_params(output, shared)
  return sorted(shared)
