"""What run files can name: every module holding `@gin.configurable` objects, imported here.

A run file names a configurable by its short name (`@Contrastive()`,
`train.batch_size`, `register_families.families = [@pair_tasks]`,
`@get_vocabulary()`), a constant by its full one (`%vmsst.bfloat16`), and
imports nothing: a command that parses a run calls `parse_gin` here, which
registers first. The imports are written out in `register` (deferred, so a
command's --help stays light) so the import graph and its test see every
module run files reach: the model core (config's NetworkConfig, partitioning,
param_files), the objectives (MODELS), training (loop's `train`,
checkpointing, optimizers, parameter_groups, early_stopping, goodput, the
target TPU slice), evaluation during training (in_training), the teacher
cache and the data side (vmsst_tasks: pipeline.input_pipeline,
sources.pair_readers, sources.tfds_readers, sources.heldout, and the task
families of vmsst_tasks.registry; without seqio,
registry_stand_ins under the same names). tests/test_gin_utils.py checks no
configurable is left out. This lives in training/, the layer above everything
it registers; gin_utils (the base layer) parses once registration is done.
"""

import functools
from typing import Sequence

from vmsst.base import gin_utils
from vmsst.base.gin_utils import gin


# The task families' stand-ins instead of the families themselves (`register_without_data`).
_WITHOUT_DATA = False


def register_without_data() -> None:
  """`register` for a process that parses run files but never reads data.

  `python -m vmsst.compile` lowers a step from the model and batch shapes alone: the task
  families register as their stand-ins (vmsst_tasks.registry_stand_ins, which raise if
  called), so neither seqio nor TensorFlow is imported, about half of a `--print_slice`
  process's time. For a command's own process only, before anything registers: in a process
  that later trains, the real families must be the ones registered.
  """
  global _WITHOUT_DATA
  if register.cache_info().currsize:
    raise RuntimeError("register_without_data: the configurables are already registered")
  _WITHOUT_DATA = True
  register()


@functools.cache
def register() -> None:
  """Makes every object a run file may name bindable; once per process.

  No configurable exists only because some other module happened to be
  imported, and library code takes plain arguments.
  """
  # pylint: disable=import-outside-toplevel,unused-import
  from vmsst import objectives  # every objective, through MODELS
  from vmsst.base import sentencepiece_vocabulary
  from vmsst.evaluation import in_training
  from vmsst.model import config
  from vmsst.model import param_files
  from vmsst.model import partitioning
  from vmsst.teachers import cache
  from vmsst.training import checkpointing
  from vmsst.training import early_stopping
  from vmsst.training import goodput
  from vmsst.training import loop
  from vmsst.training import optimizers
  from vmsst.training import parameter_groups
  from vmsst.training import slices
  from vmsst_tasks.sources import heldout
  from vmsst_tasks.pipeline import input_pipeline
  from vmsst_tasks.sources import pair_readers
  if not _WITHOUT_DATA and input_pipeline.seqio_available():
    _register_task_families()
  else:
    # The task families need seqio (TensorFlow); an accelerator image has neither and
    # trains on a pre-tokenized stream (train.pretokenized), binding no family: the
    # stand-ins register the same names, so run files parse.
    from vmsst_tasks import registry_stand_ins
    registry_stand_ins.register()
  # Functions defined without gin that run files call, under the gin module run files and
  # config.gin name them by.
  gin.external_configurable(heldout.retrieval_sets, module="tasks.heldout")
  gin.external_configurable(sentencepiece_vocabulary.get_vocabulary, module="vmsst.vocabulary")
  import jax.numpy as jnp
  gin.constant("vmsst.float32", jnp.float32)
  gin.constant("vmsst.bfloat16", jnp.bfloat16)
  gin_utils.mark_registered()


def _register_task_families() -> None:
  """The seqio task families a run file lists in `register_families.families`."""
  # pylint: disable=import-outside-toplevel,unused-import
  from vmsst_tasks import registry
  from vmsst_tasks.sources import tfds_readers
  from vmsst_tasks.registry import distillation
  from vmsst_tasks.registry import entities
  from vmsst_tasks.registry import hard_negatives
  from vmsst_tasks.registry import opus
  from vmsst_tasks.registry import pairs
  from vmsst_tasks.registry import tfds
  from vmsst_tasks.registry import triplets


def parse_gin(gin_files: Sequence[str], bindings: Sequence[str],
              search_paths: Sequence[str] = (".",), *, needs: Sequence[str] = ("train",)) -> None:
  """Registers, then parses run files and bindings (gin_utils.parse_registered: every mistake
  one cli.UserError; a macro `needs` reads left unset fails here)."""
  register()
  gin_utils.parse_registered(gin_files, bindings, search_paths, needs=needs)


def parse_flags(*, needs: Sequence[str] = ("train",)) -> None:
  """`parse_gin` of the run the command line gives (gin_utils.define_flags's flags)."""
  given = gin_utils.define_flags()
  parse_gin(given.gin_file.value, given.gin_bindings.value, given.gin_search_path.value,
            needs=needs)
