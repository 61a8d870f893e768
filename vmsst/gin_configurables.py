"""Makes library objects bindable from gin files, in one place.

Imported by entrypoints only (train, and later evaluate/export) and by the gin
files (`import vmsst.gin_configurables`, their only import), so gin stays at
the edges: library code takes plain arguments, and no configurable exists only
because some other module happened to import its module.
"""

import gin
import jax.numpy as jnp

from vmsst_tasks import heldout
from vmsst_tasks import input_pipeline
# The task families need seqio (TensorFlow); an accelerator image has neither
# and trains on a pre-tokenized stream (train.pretokenized), binding no family.
if input_pipeline.seqio_available():
  from vmsst_tasks import registry
  from vmsst_tasks.registry import distillation
  from vmsst_tasks.registry import entities
  from vmsst_tasks.registry import hard_negatives
  from vmsst_tasks.registry import opus
  from vmsst_tasks.registry import pairs
  from vmsst_tasks.registry import tfds
  from vmsst_tasks.registry import triplets
  from vmsst_tasks import tfds_sources
else:  # the same gin names, so run files parse; calling one says how to train without seqio
  from vmsst_tasks import registry_stand_ins
  registry_stand_ins.register()
from vmsst.training import checkpointing
from vmsst.training import early_stopping
from vmsst.training import optimizers
from vmsst.model import param_files
from vmsst.training import parameter_groups
from vmsst.model import partitioning
from vmsst.teachers import cache as teacher_cache
from vmsst.compiler import slices as tpu_slices
from vmsst import sentencepiece_vocabulary
from vmsst.model.config import NetworkConfig
from vmsst.evaluation import in_training
from vmsst.objectives import MODELS

gin.external_configurable(heldout.retrieval_sets, module="tasks.heldout")
gin.external_configurable(sentencepiece_vocabulary.get_vocabulary, module="vmsst.vocabulary")
gin.constant("vmsst.float32", jnp.float32)
gin.constant("vmsst.bfloat16", jnp.bfloat16)

# Modules whose @gin.configurable objects the gin files name: every one
# outside vmsst.train (tests/test_gin_configurables.py checks the list is
# complete), so a gin file imports this module and nothing else.
__all__ = ["input_pipeline", "registry", "pairs", "opus", "distillation", "entities", "triplets",
           "hard_negatives",
           "tfds", "tfds_sources", "checkpointing", "early_stopping",
           "optimizers",
           "param_files", "parameter_groups", "partitioning", "teacher_cache", "tpu_slices",
           "in_training",
           "NetworkConfig", "MODELS"]
