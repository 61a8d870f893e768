"""The pair family: NTREX-128 and Multi30k, read into memory, and their mixture.

Every run registers it (the CPU runs train on its mixture; the held-out sets
and the distillation family read the same files).
"""

import seqio

from vmsst_tasks.registry import seqio_sources
from vmsst_tasks.registry import common
from vmsst_tasks.registry import data_counts
from vmsst.base import cli
from vmsst.base.gin_utils import gin

NTREX_TASK = "vmsst_ntrex128"
MULTI30K_TASK = "vmsst_multi30k"
DEMO_MIXTURE = "vmsst_ntrex_multi30k"


def _in_memory_task(name: str, reader: str, inputs: common.RegistrationInputs,
                    seed: int) -> str:
  read = {split: common.read_split(reader, inputs.data_dir, split, seed, inputs.policy)
          for split in common.SPLITS}
  if not read["train"][0]:
    raise cli.UserError(data_counts.empty_input_message(
        name, f"{inputs.data_dir}/{reader}", read["train"][1]))
  source = seqio_sources.InMemoryPairSource(
      {split: pairs for split, (pairs, _) in read.items()},
      {split: counts for split, (_, counts) in read.items()})
  return common.register_pair_task(name, source, inputs.vocabulary)


@gin.configurable
def pair_tasks(inputs: common.RegistrationInputs, *, ntrex_seed: int = 0) -> list[str]:
  """vmsst_ntrex128, vmsst_multi30k and vmsst_ntrex_multi30k (rates = training pairs).

  Args:
    inputs: the shared inputs (register_families builds them).
    ntrex_seed: seed of the NTREX eng/spa pivot choice (a different seed gives
      a different but equally sized set of NTREX pairs).
  """
  names = [_in_memory_task(NTREX_TASK, "ntrex128", inputs, ntrex_seed),
           _in_memory_task(MULTI30K_TASK, "multi30k", inputs, ntrex_seed)]
  rates = [(n, float(seqio.TaskRegistry.get(n).num_input_examples("train"))) for n in names]
  return [*names, common.replace_mixture(DEMO_MIXTURE, rates)]
