"""Makes library objects bindable from gin files, in one place.

Imported by entrypoints only (train, and later evaluate/export), so gin stays
at the edges: library code takes plain arguments.
"""

import gin
import jax.numpy as jnp

from vmsst_tasks import heldout
from vmsst_tasks import registry
from vmsst import checkpointing
from vmsst import optimizers
from vmsst import parameter_groups
from vmsst import partitioning
from vmsst import vocabulary
from vmsst.config import NetworkConfig
from vmsst.evaluation import in_training
from vmsst.objectives import MODELS

gin.external_configurable(heldout.retrieval_sets, module="tasks.heldout")
gin.external_configurable(vocabulary.get_vocabulary, module="vmsst.vocabulary")
gin.constant("vmsst.float32", jnp.float32)
gin.constant("vmsst.bfloat16", jnp.bfloat16)

# Modules whose @gin.configurable objects the gin files name.
__all__ = ["registry", "checkpointing", "optimizers", "partitioning", "in_training",
           "NetworkConfig", "MODELS", "parameter_groups"]
