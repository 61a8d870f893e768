"""The triplet family: English (anchor, positive, negative) triplets for query-tower tuning.

tasks/triplets.py builds them (from STSb, or reads TSV files); this module
only registers them as `vmsst_triplets`: a = anchor, b = positive, plus
`tokens_negative`.
"""

from vmsst.base.gin_utils import gin
import seqio
import tensorflow as tf

from vmsst_tasks import triplets as triplets_lib
from vmsst_tasks.registry import common


@gin.configurable
def triplet_tasks(inputs: common.RegistrationInputs, *, triplets: str = "stsb") -> list[str]:
  """Registers `vmsst_triplets` (replacing it) over `triplets_lib.read_triplet_splits`.

  Args:
    inputs: the shared inputs (register_families builds them; its data_dir
      holds stsb/).
    triplets: "stsb" (built from data_dir/stsb train/dev) or a directory
      holding train.tsv and validation.tsv.
  """
  features = {**common.output_features(inputs.vocabulary),
              "tokens_negative": seqio.ContinuousFeature(dtype=tf.int32, rank=1)}
  splits = triplets_lib.read_triplet_splits(triplets, inputs.data_dir)
  source = triplets_lib.TripletSource({split: rows for split, (rows, _) in splits.items()},
                                      counts={split: counts for split, (_, counts)
                                              in splits.items()})
  return [common.register_task(triplets_lib.TASK, source, features, triplets_lib.PREPROCESSORS)]
