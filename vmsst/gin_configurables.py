"""Makes library objects bindable from gin files, in one place.

Imported by entrypoints only (train, and later evaluate/export), so gin stays
at the edges: library code takes plain arguments.
"""

import gin
import jax.numpy as jnp

from tasks import heldout
from tasks import registry
from vmsst import vocabulary
from vmsst.objectives import MODELS  # pylint: disable=unused-import (gin.configurable)

gin.external_configurable(heldout.retrieval_sets, module="tasks.heldout")
gin.external_configurable(vocabulary.get_vocabulary, module="vmsst.vocabulary")
gin.constant("vmsst.float32", jnp.float32)
gin.constant("vmsst.bfloat16", jnp.bfloat16)

__all__ = ["registry"]
