"""Task registration by family: `register_families` (run files) and `register_tasks` (one call).

The families themselves are one module each beside this one (pairs.py,
opus.py, ...); the package's docstring lists them and the tasks they register.
"""

from typing import Callable, Sequence

from vmsst_tasks.sources import pair_readers
from vmsst_tasks.sources import tfds_readers
from vmsst_tasks.registry import common
from vmsst_tasks.registry import distillation
from vmsst_tasks.registry import entities
from vmsst_tasks.registry import opus
from vmsst_tasks.registry import pairs
from vmsst_tasks.registry import tfds
from vmsst_tasks.registry import triplets as triplet_family
from vmsst.base.gin_utils import gin

# A family: registers its tasks over the shared inputs, returns their names.
Family = Callable[[common.RegistrationInputs], Sequence[str]]


@gin.configurable
def register_families(families: Sequence[Family] = gin.REQUIRED, *,
                      data_dir: str = gin.REQUIRED, vocabulary_path: str = gin.REQUIRED,
                      input_policy: pair_readers.InputPolicy | None = None) -> list[str]:
  """Registers (or re-registers) each family's tasks, in order; returns their names.

  Args:
    families: e.g. [@pair_tasks, @opus_tasks]; each family's own arguments
      are bound on it (opus_tasks.opus_dir = ...).
    data_dir: root of the shared corpora (ntrex128/, multi30k/, tatoeba/, stsb/).
    vocabulary_path: the SentencePiece .model (python -m vmsst.vocabulary).
    input_policy: how NTREX, Multi30k, OPUS and TFDS lines that are malformed
      (no tab, not UTF-8) or overlong are treated; default
      pair_readers.DEFAULT_POLICY: skipped and counted (tasks/sources/pair_readers.py docstring).
  """
  inputs = common.RegistrationInputs.read(data_dir, vocabulary_path, input_policy)
  return [name for family in families for name in family(inputs)]


def register_tasks(data_dir: str, vocabulary_path: str, opus_dir: str | None = None,
                   ntrex_seed: int = 0,
                   teacher_cache: distillation.TeacherVectors | None = None,
                   distillation_source: str = "eng",
                   distillation_max_sources: int | None = None,
                   entity_dir: str | None = None,
                   input_policy: pair_readers.InputPolicy | None = None,
                   triplets: str | None = None,
                   tfds_translations: Sequence[tfds_readers.TfdsTranslation] = ()) -> list[str]:
  """The families in one Python call: what VMSST_REGISTER_TASKS holds for seqio's cache job.

  The pair family always; each other family when its argument is given
  (opus_dir: opus_tasks, teacher_cache: distillation_tasks, entity_dir:
  entity_tasks, triplets: triplet_tasks, tfds_translations: tfds_tasks).
  Not gin-bound: run files select families with `register_families`.
  A teacher cache lacking vectors fails before anything registers.
  """
  inputs = common.RegistrationInputs.read(data_dir, vocabulary_path, input_policy)
  if teacher_cache is not None:
    distillation.check_teacher_vectors(teacher_cache, distillation.distillation_sources(
        inputs.data_dir, seed=ntrex_seed, source_language=distillation_source,
        max_sources=distillation_max_sources))
  names = pairs.pair_tasks(inputs, ntrex_seed=ntrex_seed)
  if opus_dir is not None:
    names += opus.opus_tasks(inputs, opus_dir=opus_dir, paper_mixture=opus.IF_PRESENT)
  if teacher_cache is not None:
    names += distillation.distillation_tasks(
        inputs, teacher_cache=teacher_cache, source_language=distillation_source,
        max_sources=distillation_max_sources, ntrex_seed=ntrex_seed)
  if entity_dir is not None:
    names += entities.entity_tasks(inputs, entity_dir=entity_dir)
  if triplets is not None:
    names += triplet_family.triplet_tasks(inputs, triplets=triplets)
  return names + tfds.tfds_tasks(inputs, translations=tfds_translations)

