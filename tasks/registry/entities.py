"""The entity family: Wikipedia sentences with their linked entity (EASE's data).

Reads what `python -m vmsst_tasks.wiki_entities` wrote: the sentence on both
sides (dropout self-contrast) plus `entities`, the rows of the entity table.
"""

import functools

from vmsst.base.gin_utils import gin
import seqio
import tensorflow as tf

from vmsst_tasks.registry import preprocessors
from vmsst_tasks.registry import seqio_sources
from vmsst_tasks.registry import common

ENTITY_TASK = "vmsst_wiki_entities"


@gin.configurable
def entity_tasks(inputs: common.RegistrationInputs, *,
                 entity_dir: str = gin.REQUIRED) -> list[str]:
  """vmsst_wiki_entities over a `python -m vmsst_tasks.wiki_entities` output directory.

  Args:
    inputs: the shared inputs (register_families builds them).
    entity_dir: that command's --output.
  """
  features = {**common.output_features(inputs.vocabulary),
              "entities": seqio.ContinuousFeature(dtype=tf.int32, rank=1)}
  keep_entities = functools.partial(
      seqio.preprocessors.rekey, key_map={"tokens_a": "text_a", "tokens_b": "text_b",
                                          "lang_a": "lang_a", "lang_b": "lang_b",
                                          "entities": "entities"})
  source = seqio_sources.EntitySentenceSource(entity_dir, name=ENTITY_TASK)
  return [common.register_task(ENTITY_TASK, source, features,
                               [keep_entities, *preprocessors.PAIR_PREPROCESSORS[1:]])]
