"""The distillation family: NTREX-128 / Multi30k pairs with a teacher's vectors of side a.

Multilingual knowledge distillation (Reimers & Gurevych 2020) trains a student
to map a sentence and its translation onto the teacher's embedding of the
source sentence. The tasks read those vectors from a teacher cache and never
encode: `train`'s teacher stage (vmsst.teachers.cache.fill_stage) fills the
cache first when `MissingTeacherVectors` says what it lacks.
"""

import functools
from typing import Any, Protocol, Sequence

from absl import logging
import numpy as np
import seqio
import tensorflow as tf

from vmsst_tasks.registry import preprocessors
from vmsst_tasks.registry import seqio_sources
from vmsst_tasks.sources import pair_readers
from vmsst_tasks.registry import common
from vmsst.base import files
from vmsst.base.gin_utils import gin
from vmsst.base import languages

DISTILL_NTREX_TASK = "vmsst_distill_ntrex128"
DISTILL_MULTI30K_TASK = "vmsst_distill_multi30k"
DISTILL_MIXTURE = "vmsst_distill_ntrex_multi30k"


def source_sided(pairs: Sequence[pair_readers.Pair], source_language: str,
                 max_sources: int | None = None) -> list[pair_readers.Pair]:
  """The pairs with `source_language` on a side, that side made side a.

  Pairs whose both sides are in the source language are dropped (nothing to
  transfer). With `max_sources`, only pairs whose source sentence is among the
  first `max_sources` distinct ones (in reading order) are kept.
  """
  kept, seen = [], set()
  for pair in pairs:
    if (pair.lang_a == source_language) == (pair.lang_b == source_language):
      continue
    if pair.lang_b == source_language:
      pair = pair_readers.Pair(pair.text_b, pair.text_a, pair.lang_b, pair.lang_a)
    if pair.text_a not in seen:
      if max_sources is not None and len(seen) >= max_sources:
        continue
      seen.add(pair.text_a)
    kept.append(pair)
  return kept


class TeacherVectors(Protocol):
  """What distillation registration reads of vmsst.teachers.cache.TeacherCache.

  Named here, not imported, so the data layer never imports the model layer
  (the entrypoint's gin config builds the cache and passes it in). Reading
  only: registration never encodes (see MissingTeacherVectors).
  """
  directory: Any
  teacher: Any  # Its `name` is logged.

  def __contains__(self, sentence: str) -> bool: ...

  def lookup(self, sentences: Sequence[str]) -> np.ndarray: ...


FILL_TEACHER_CACHE = "python -m vmsst.teacher_cache --gin_file=<the run's gin file>"


class MissingTeacherVectors(LookupError):
  """The teacher cache lacks source sentences of the distillation tasks.

  Raised before any distillation task is registered. `vmsst.teachers.cache.fill_stage`
  (run by `python -m vmsst.train` and `python -m vmsst.teacher_cache`)
  catches it, encodes `sentences` into `teacher_cache` and registers again.

  Attributes:
    teacher_cache: the cache that was read.
    sentences: the distinct sentences it lacks, sorted.
  """

  def __init__(self, teacher_cache: TeacherVectors, sentences: Sequence[str], total: int):
    self.teacher_cache, self.sentences = teacher_cache, list(sentences)
    super().__init__(
        f"{len(self.sentences)} of the {total} source sentences of the distillation tasks have "
        f"no vector in the teacher cache {teacher_cache.directory} (teacher "
        f"{teacher_cache.teacher.name}); registration only reads it. Fill it with "
        f"`{FILL_TEACHER_CACHE}` (python -m vmsst.train does so itself before registering).")


DISTILLATION_READERS = {DISTILL_NTREX_TASK: "ntrex128", DISTILL_MULTI30K_TASK: "multi30k"}


@functools.lru_cache(maxsize=4)
def _distillation_pairs(data_dir: str, seed: int, source_language: str,
                        max_sources: int | None) -> dict[tuple[str, str], list[pair_readers.Pair]]:
  """(task, split) -> its source-sided pairs (read once per process; do not modify)."""
  # DEFAULT_POLICY positionally: the same read_split cache entry as the pair tasks'.
  pairs = {(name, split): source_sided(
               common.read_split(reader, data_dir, split, seed, pair_readers.DEFAULT_POLICY)[0],
               source_language, max_sources)
           for name, reader in DISTILLATION_READERS.items() for split in common.SPLITS}
  if not any(pairs[(name, "train")] for name in DISTILLATION_READERS):
    raise ValueError(f"no training pair of {data_dir} has a {source_language} side: set "
                     "distillation_tasks.source_language to a language of the corpora.")
  return pairs


def distillation_sources(data_dir: str, *, seed: int = 0, source_language: str = "eng",
                         max_sources: int | None = None) -> list[str]:
  """The distinct source sentences (sorted) whose teacher vectors the vmsst_distill_* tasks read.

  Args as distillation_tasks' (seed: its ntrex_seed).
  """
  source_language = languages.canonical_language(source_language)  # "en" -> "eng"
  pairs = _distillation_pairs(str(files.as_path(data_dir)), seed, source_language, max_sources)
  return sorted({p.text_a for task_pairs in pairs.values() for p in task_pairs})


def check_teacher_vectors(teacher_cache: TeacherVectors, sentences: Sequence[str]) -> None:
  """Raises MissingTeacherVectors unless the cache holds every sentence (it never encodes)."""
  missing = sorted({s for s in sentences if s not in teacher_cache})
  if missing:
    raise MissingTeacherVectors(teacher_cache, missing, len(set(sentences)))


@gin.configurable
def distillation_tasks(inputs: common.RegistrationInputs, *,
                       teacher_cache: TeacherVectors = gin.REQUIRED, source_language: str = "eng",
                       max_sources: int | None = None, ntrex_seed: int = 0) -> list[str]:
  """vmsst_distill_ntrex128, vmsst_distill_multi30k and their mixture vmsst_distill_ntrex_multi30k.

  The tasks look the vectors up (tasks.registry.preprocessors.teacher_embeddings) from
  one array read here; nothing is encoded.

  Args:
    inputs: the shared inputs (register_families builds them).
    teacher_cache: the teacher's vectors (vmsst.teachers.cache.TeacherCache),
      read only.
    source_language: language of the tasks' side a (the teacher's language).
    max_sources: keep only the first this many source sentences of each task
      and split (tests, quick runs).
    ntrex_seed: the NTREX pivot choice, as the pair family's.
  Raises:
    ValueError: no training pair has a `source_language` side.
    MissingTeacherVectors: the cache lacks some source sentence (no
      distillation task is registered then).
  """
  source_language = languages.canonical_language(source_language)  # "en" -> "eng"
  pairs = _distillation_pairs(inputs.data_dir, ntrex_seed, source_language, max_sources)
  sentences = distillation_sources(inputs.data_dir, seed=ntrex_seed,
                                   source_language=source_language, max_sources=max_sources)
  check_teacher_vectors(teacher_cache, sentences)
  vectors = teacher_cache.lookup(sentences)
  logging.info("distillation tasks: %d source sentences, vectors of teacher %s read from %s",
               len(sentences), teacher_cache.teacher.name, teacher_cache.directory)
  features = {**common.output_features(inputs.vocabulary),
              "teacher": seqio.ContinuousFeature(dtype=tf.float32, rank=1)}
  for name, reader in DISTILLATION_READERS.items():
    source = seqio_sources.InMemoryPairSource(
        {split: pairs[(name, split)] for split in common.SPLITS},
        {split: common.read_split(reader, inputs.data_dir, split, ntrex_seed,
                                  pair_readers.DEFAULT_POLICY)[1]
         for split in common.SPLITS})
    common.register_task(name, source, features,
                         preprocessors.distillation_preprocessors(sentences, vectors))
  # Reimers & Gurevych 2020 §3: "we balance the data set sizes by drawing for a
  # mini batch roughly the same number of samples from each data set. Data from
  # smaller data sets is repeated": equal rates (seqio repeats each task).
  rates = [(n, 1.0) for n in DISTILLATION_READERS if pairs[(n, "train")]]
  return [*DISTILLATION_READERS, common.replace_mixture(DISTILL_MIXTURE, rates)]
