"""vmsst's seqio tasks and mixtures, registered one family at a time.

Nothing registers on import. A run file names the families it trains on:

  train.register_tasks = @register_families
  register_families.data_dir = %DATA_DIR
  register_families.vocabulary_path = %VOCAB_PATH
  register_families.families = [@pair_tasks, @opus_tasks]
  opus_tasks.opus_dir = %OPUS_DIR

and `train` calls it before its data. Each family is one function of one
module here, taking the shared inputs (common.RegistrationInputs) and only
its own arguments; registering again replaces the same names. Families and
the names they register:

  pair_tasks (pairs.py)      vmsst_ntrex128, vmsst_multi30k: NTREX-128 pivot pairs
                             (eng/spa <-> 123 languages) and Multi30k en/de/fr/cs
                             (all 6 pairs per line), train/validation;
                             vmsst_ntrex_multi30k, their mixture (rates = training
                             pairs; the CPU runs)
  opus_tasks (opus.py)       vmsst_opus.<a>.<b>, one per language pair of an OPUS
                             directory (train only; '-' of codes written '_', e.g.
                             vmsst_opus.eng.zho_CN); vmsst_opus, their mixture
                             (rates = line counts); vmsst_opus_paper, the paper's
                             mixture over the same files (tasks/opus_paper.py),
                             when the run trains on it
  distillation_tasks         vmsst_distill_ntrex128, vmsst_distill_multi30k: the pair
    (distillation.py)        tasks' pairs with the source language (eng) on a side,
                             turned so side a is the source, plus `teacher` = the
                             teacher's embedding of side a, read from the teacher
                             cache, never encoded here (vmsst/teacher_cache);
                             vmsst_distill_ntrex_multi30k samples them at equal rates
  entity_tasks (entities.py) vmsst_wiki_entities: sentences of a Wikipedia dump with
                             their linked entity (tasks/wiki_entities.py output), the
                             sentence on both sides, plus `entities`; train/validation
  triplet_tasks              vmsst_triplets: English (anchor, positive, negative)
    (triplets.py)            triplets (tasks/triplets.py; STSb-built or TSV) as
                             a = anchor, b = positive, plus `tokens_negative`
  hard_negative_tasks        vmsst_hard_negatives: training pairs with K negatives
    (hard_negatives.py)      mined for them (python -m vmsst.hard_negatives), plus
                             `tokens_negative` [K·L]
  tfds_tasks (tfds.py)       vmsst_tfds.<builder>.<config>: prepared TFDS translation
                             datasets (tasks/tfds_sources.py), train (/validation)

common.py holds what they share (features, the Tatoeba test sentences no task
trains on, the pair task and mixture registration); data_counts.py the
read/kept/skipped report and the empty-input check `train` runs on its
mixture. Examples of every task, after preprocessing (tasks/preprocessors.py):
  tokens_a, tokens_b  int32 [<=L]  SentencePiece ids ending in EOS
  lang_a, lang_b      int32 []     language id (index in vmsst.languages.LANGUAGES)
  teacher             float32 [T]  (vmsst_distill_* only) teacher embedding of side a
  tokens_negative     int32 [L]    (vmsst_triplets only) the triplet's negative, padded
  entities            int32 [1+H]  (vmsst_wiki_entities only) entity-table rows: the
                                   linked entity, then H hard negatives (-1: none)

`register_tasks` is the one-call form that config.gin files written before
the families name (`register_tasks.opus_dir = ...`); it registers the same
tasks through the same families.
"""

from typing import Callable, Mapping, Sequence


from vmsst_tasks import sources
from vmsst_tasks import tfds_sources
from vmsst_tasks.registry import common
from vmsst_tasks.registry import distillation
from vmsst_tasks.registry import entities
from vmsst_tasks.registry import opus
from vmsst_tasks.registry import pairs
from vmsst_tasks.registry import tfds
from vmsst_tasks.registry import triplets as triplet_family
from vmsst import cli
from vmsst.gin_utils import gin

# A family: registers its tasks over the shared inputs, returns their names.
Family = Callable[[common.RegistrationInputs], Sequence[str]]


@gin.configurable
def register_families(families: Sequence[Family] = gin.REQUIRED, *,
                      data_dir: str = gin.REQUIRED, vocabulary_path: str = gin.REQUIRED,
                      input_policy: sources.InputPolicy | None = None) -> list[str]:
  """Registers (or re-registers) each family's tasks, in order; returns their names.

  Args:
    families: e.g. [@pair_tasks, @opus_tasks]; each family's own arguments
      are bound on it (opus_tasks.opus_dir = ...).
    data_dir: root of the shared corpora (ntrex128/, multi30k/, tatoeba/, stsb/).
    vocabulary_path: the SentencePiece .model (python -m vmsst.vocabulary).
    input_policy: how NTREX, Multi30k, OPUS and TFDS lines that are malformed
      (no tab, not UTF-8) or overlong are treated; default
      sources.DEFAULT_POLICY: skipped and counted (tasks/sources.py docstring).
  Raises:
    cli.UserError: register_tasks.<arg> is bound too (an override written
      for the one-call form would otherwise be ignored).
  """
  check_no_legacy_bindings()
  inputs = common.RegistrationInputs.read(data_dir, vocabulary_path, input_policy)
  return [name for family in families for name in family(inputs)]


# register_tasks' arguments -> where the families take them ("family.argument").
LEGACY_ARGUMENTS = {
    "data_dir": ["register_families.data_dir"],
    "vocabulary_path": ["register_families.vocabulary_path"],
    "input_policy": ["register_families.input_policy"],
    "ntrex_seed": ["pair_tasks.ntrex_seed", "distillation_tasks.ntrex_seed"],
    "opus_dir": ["opus_tasks.opus_dir"],
    "teacher_cache": ["distillation_tasks.teacher_cache"],
    "distillation_source": ["distillation_tasks.source_language"],
    "distillation_max_sources": ["distillation_tasks.max_sources"],
    "entity_dir": ["entity_tasks.entity_dir"],
    "triplets": ["triplet_tasks.triplets"],
    "tfds_translations": ["tfds_tasks.translations"],
}
# The families in the order register_tasks registers them (and run files list them).
FAMILY_ORDER = ("pair_tasks", "opus_tasks", "distillation_tasks", "entity_tasks",
                "triplet_tasks", "tfds_tasks")


@gin.configurable
def register_tasks(data_dir: str, vocabulary_path: str, opus_dir: str | None = None,
                   ntrex_seed: int = 0,
                   teacher_cache: distillation.TeacherVectors | None = None,
                   distillation_source: str = "eng",
                   distillation_max_sources: int | None = None,
                   entity_dir: str | None = None,
                   input_policy: sources.InputPolicy | None = None,
                   triplets: str | None = None,
                   tfds_translations: Sequence[tfds_sources.TfdsTranslation] = ()) -> list[str]:
  """The families in one call, as config.gin files written before them bind it.

  The pair family always; each other family when its argument is given
  (LEGACY_ARGUMENTS says where each argument went). Also what
  VMSST_REGISTER_TASKS holds for seqio's cache job (tasks/cache_registration.py).
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


def check_no_legacy_bindings() -> None:
  """A register_tasks.<arg> binding beside register_families is an error, not ignored.

  Run by register_families, and by `train`'s preflight before any state (an
  override written for the one-call form, e.g. --gin.register_tasks.opus_dir).
  """
  for argument, targets in LEGACY_ARGUMENTS.items():
    try:
      gin.query_parameter(f"register_tasks.{argument}")
    except ValueError:  # Not bound: the usual case.
      continue
    family = targets[0].split(".")[0]
    selected = ("" if family == "register_families"
                else f" and list @{family} in register_families.families")
    raise cli.UserError(
        f"register_tasks.{argument} is bound, but this run registers its tasks with "
        f"register_families (train.register_tasks = @register_families), which would ignore "
        f"it: bind {targets[0]}{selected} instead.")


def legacy_bindings(bindings: Mapping[str, str]) -> dict[str, str]:
  """The bindings of a config.gin written with register_tasks, in the families' form.

  `vmsst.gin_utils.config_bindings` output in, the same with each
  `register_tasks.<arg>` moved to where the families take it and
  `register_families.families` added, so a resume compares like with like
  (vmsst/training/preflight.py). Other bindings pass through unchanged.
  """
  old = {key.split(".", 1)[1]: value for key, value in bindings.items()
         if key.startswith("register_tasks.")}
  if not old:
    return dict(bindings)
  chosen = {"pair_tasks", *(LEGACY_ARGUMENTS[arg][0].split(".")[0] for arg in old
                            if arg in ("opus_dir", "teacher_cache", "entity_dir", "triplets",
                                       "tfds_translations"))}
  moved = {key: value for key, value in bindings.items()
           if not key.startswith("register_tasks.")}
  for argument, value in old.items():
    for target in LEGACY_ARGUMENTS.get(argument, [f"register_tasks.{argument}"]):
      if target.split(".")[0] in chosen | {"register_families"}:
        moved[target] = value
  if moved.get("train.register_tasks") == "@register_tasks":
    moved["train.register_tasks"] = "@register_families"
  moved["register_families.families"] = (
      "[" + ", ".join(f"@{f}" for f in FAMILY_ORDER if f in chosen) + "]")
  return moved
