"""The TFDS family: prepared TFDS translation datasets, one pair task each.

Read from each dataset's local data_dir (tasks/sources/tfds_readers.py), never
downloaded; the examples are those of every other pair task, so they mix.
"""

from typing import AbstractSet, Sequence

from absl import logging
from vmsst.base.gin_utils import gin
import seqio

from vmsst_tasks.sources import pair_readers
from vmsst_tasks.sources import tfds_readers
from vmsst_tasks.registry import common
from vmsst_tasks.registry import data_counts


@gin.configurable
def tfds_tasks(inputs: common.RegistrationInputs, *,
               translations: Sequence[tfds_readers.TfdsTranslation] = ()) -> list[str]:
  """`vmsst_tfds.<builder>.<config>` for each dataset in `translations`.

  Args:
    inputs: the shared inputs (register_families builds them).
    translations: e.g. `[@de_en/TfdsTranslation()]` (tasks/sources/tfds_readers.py).
  """
  return [register_tfds_task(spec, inputs.vocabulary, exclude=inputs.exclude,
                             policy=inputs.policy) for spec in translations]


def register_tfds_task(spec: tfds_readers.TfdsTranslation, vocab: seqio.Vocabulary, *,
                       exclude: AbstractSet[str],
                       policy: pair_readers.InputPolicy = pair_readers.DEFAULT_POLICY) -> str:
  """A pair task `spec.task_name` over a prepared TFDS translation dataset (read locally).

  Its examples are those of every other pair task, so it mixes with them
  (list it in a mixture with `common.replace_mixture` or gin); `exclude` and
  `policy` as for the OPUS tasks.

  Raises:
    cli.UserError: the dataset is not prepared in spec.data_dir, lacks a
      key, or keeps no training pair.
  """
  source = tfds_readers.TfdsPairSource(spec, exclude=exclude, policy=policy)
  logging.info("%s", source.counts["train"].report(f"{spec.task_name}[train]"))
  common.register_pair_task(spec.task_name, source, vocab)
  data_counts.check_training_data(spec.task_name)
  return spec.task_name
