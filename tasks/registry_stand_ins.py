"""The task families' gin names where seqio is absent: a run file parses, and a call says what to do.

An accelerator image has no seqio or TensorFlow, so `vmsst_tasks.registry`
cannot be imported there, yet every run file binds its families
(`train.register_tasks = @register_families`, `register_families.families =
[@pair_tasks]`, ...). vmsst.training.configurables.register registers these stand-ins
under the same names instead, so `python -m vmsst.train --gin_file=RUN.gin
--gin.train.pretokenized="'DIR'"` parses the run file unchanged; `train`
never registers tasks when it reads a pre-tokenized stream, and a stand-in
that is called anyway raises an error naming the fix.
tests/tasks/test_registry_stand_ins.py checks the names against the registry's.
"""

from vmsst.base import cli
from vmsst.base.gin_utils import gin

# gin name -> the module the real configurable is registered under.
NAMES = {
    "register_families": "vmsst_tasks.registry.families",
    "pair_tasks": "vmsst_tasks.registry.pairs",
    "opus_tasks": "vmsst_tasks.registry.opus",
    "distillation_tasks": "vmsst_tasks.registry.distillation",
    "entity_tasks": "vmsst_tasks.registry.entities",
    "triplet_tasks": "vmsst_tasks.registry.triplets",
    "hard_negative_tasks": "vmsst_tasks.registry.hard_negatives",
    "tfds_tasks": "vmsst_tasks.registry.tfds",
    "TfdsTranslation": "vmsst_tasks.sources.tfds_readers",
}


def _stand_in(name: str):
  def needs_seqio(*args, **kwargs):
    del args, kwargs
    raise cli.UserError(
        f"{name} registers seqio tasks, but seqio (TensorFlow) is not installed here: write the "
        "run's stream where it is, `python -m vmsst.pretokenize --gin_file=RUN.gin "
        "--output=DIR`, and train here with --gin.train.pretokenized=\"'DIR'\".")
  needs_seqio.__name__ = needs_seqio.__qualname__ = name
  return needs_seqio


def register() -> None:
  """Registers every stand-in under its real name and module (once)."""
  for name, module in NAMES.items():
    gin.external_configurable(_stand_in(name), name=name, module=module)
