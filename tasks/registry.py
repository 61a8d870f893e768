"""The one place vmsst registers its seqio tasks and mixtures: `register_tasks`.

Nothing registers on import; call `register_tasks(...)` (or bind it in gin) before
`seqio.get_dataset`. Registered names:
  vmsst_ntrex128        NTREX-128 pivot pairs (eng/spa <-> 123 languages), train/validation
  vmsst_multi30k        Multi30k en/de/fr/cs, all 6 pairs per line, train/validation
  vmsst_ntrex_multi30k  mixture of the two, rates = training example counts (CPU demo)
  vmsst_opus.<a>.<b>    with opus_dir: one task per language pair found (train only;
                        '-' of codes written '_', e.g. vmsst_opus.eng.zho_CN)
  vmsst_opus            with opus_dir: mixture of those, rates = line counts
  vmsst_opus_paper      with opus_dir: the paper's mixture over the same files
                        (register_paper_mixture; data: tasks/opus_paper.py)
  vmsst_distill_ntrex128, vmsst_distill_multi30k, vmsst_distill_ntrex_multi30k
                        with teacher_cache: the pairs of the first two tasks that
                        have the source language (eng) on a side, turned so
                        side a is the source, plus `teacher` = the teacher's
                        embedding of side a (knowledge distillation), read from
                        the cache, never encoded here (vmsst/teacher_cache); the
                        mixture samples its data sets at equal rates, the
                        smaller one repeated (the paper's balanced batches)
  vmsst_wiki_entities   with entity_dir: sentences of a Wikipedia dump with their
                        linked entity (tasks/wiki_entities.py output), the
                        sentence on both sides, plus `entities`; train/validation
  vmsst_tfds.<builder>.<config>
                        with tfds_translations: a prepared TFDS translation
                        dataset (tasks/tfds_sources.py), train (/validation)
  vmsst_triplets        with triplets: English (anchor, positive, negative) triplets
                        (tasks/triplets.py; STSb-built or TSV) as a = anchor,
                        b = positive, plus `tokens_negative`; train/validation

Examples of every task, after preprocessing (tasks/preprocessors.py):
  tokens_a, tokens_b  int32 [<=L]  SentencePiece ids ending in EOS
  lang_a, lang_b      int32 []     language id (index in vmsst.languages.LANGUAGES)
  teacher             float32 [T]  (vmsst_distill_* only) teacher embedding of side a
  tokens_negative     int32 [L]    (vmsst_triplets only) the triplet's negative, padded
  entities            int32 [1+H]  (vmsst_wiki_entities only) entity-table rows: the
                                   linked entity, then H hard negatives (-1: none)
"""

import collections
import collections.abc
import functools
import json
import pathlib
from typing import AbstractSet, Any, Mapping, Protocol, Sequence

from absl import logging
import gin
import numpy as np
import seqio
import tensorflow as tf

from vmsst_tasks import opus_paper
from vmsst_tasks import opus_sources
from vmsst_tasks import preprocessors
from vmsst_tasks import seqio_sources
from vmsst_tasks import sources
from vmsst_tasks import tfds_sources
from vmsst_tasks import triplets as triplets_lib
from vmsst import cli
from vmsst import languages
from vmsst import vocabulary as vocabulary_lib

NTREX_TASK = "vmsst_ntrex128"
MULTI30K_TASK = "vmsst_multi30k"
DEMO_MIXTURE = "vmsst_ntrex_multi30k"
OPUS_MIXTURE = "vmsst_opus"
DISTILL_NTREX_TASK = "vmsst_distill_ntrex128"
DISTILL_MULTI30K_TASK = "vmsst_distill_multi30k"
DISTILL_MIXTURE = "vmsst_distill_ntrex_multi30k"
ENTITY_TASK = "vmsst_wiki_entities"
SPLITS = seqio_sources.SPLITS
# OPUS files are streamed in file order, so a bigger buffer than seqio's
# default 1000 is needed to mix consecutive lines of a corpus.
OPUS_SHUFFLE_BUFFER = 10_000


def output_features(vocab: seqio.Vocabulary) -> dict[str, seqio.Feature]:
  """Token features with the vocabulary; language ids as rank-0 int32 without one."""
  token = seqio.Feature(vocabulary=vocab, add_eos=True, dtype=tf.int32, rank=1)
  language = seqio.ContinuousFeature(dtype=tf.int32, rank=0)  # PassThroughVocabulary, no EOS.
  return {"tokens_a": token, "tokens_b": token, "lang_a": language, "lang_b": language}


@functools.lru_cache(maxsize=8)
def _read_split(reader: str, data_dir: str, split: str, seed: int,
                policy: sources.InputPolicy = sources.DEFAULT_POLICY,
                ) -> tuple[tuple[sources.Pair, ...], sources.PairCounts]:
  """Reads one split once per process (registration is repeated, reading is slow-ish)."""
  counts = sources.PairCounts()
  exclude = tatoeba_exclusion(data_dir)
  if reader == "ntrex128":
    pairs = sources.ntrex_pairs(data_dir, split, seed=seed, counts=counts, exclude=exclude,
                                policy=policy)
  else:
    pairs = sources.multi30k_pairs(data_dir, split, counts=counts, exclude=exclude,
                                   policy=policy)
  return tuple(pairs), counts


@functools.lru_cache(maxsize=2)
def tatoeba_exclusion(data_dir: str) -> frozenset[str]:
  """The Tatoeba test sentences training text is filtered against (read once)."""
  return sources.tatoeba_test_sentences(data_dir)


def register_pair_task(name: str, source: seqio.DataSource, vocabulary: seqio.Vocabulary, *,
                       shuffle_buffer_size: int | None = seqio.SHUFFLE_BUFFER_SIZE) -> str:
  """Registers (replacing any same-named) task over a text-pair source.

  The source must yield {"text_a", "text_b", "lang_a", "lang_b"} strings with
  canonical codes; the task gets the vmsst output features and preprocessors,
  so it mixes with every other vmsst task and feeds PairFeatureConverter.
  """
  seqio.TaskRegistry.remove(name)
  seqio.TaskRegistry.add(name, source=source, output_features=output_features(vocabulary),
                         preprocessors=list(preprocessors.PAIR_PREPROCESSORS),
                         shuffle_buffer_size=shuffle_buffer_size)
  return name


def _replace_mixture(name: str, tasks: Sequence[tuple[str, float]]) -> str:
  seqio.MixtureRegistry.remove(name)
  seqio.MixtureRegistry.add(name, list(tasks))
  return name


DATA_COUNTS_FILE = "data_counts.json"


def report_data_counts(name: str, *, model_dir: str | None = None) -> dict:
  """Logs read = kept + skipped of every task of a mixture (or task), and the total.

  One log line per task and split, then one total per split. In-memory
  sources (NTREX, Multi30k) were counted when registered; streamed ones (OPUS)
  count while training reads them and log their own line at the end of each
  pass, so here they are `null` until a pass has ended. Sources without counts
  (e.g. vmsst_wiki_entities) are `null` too.

  Args:
    name: a registered mixture or task.
    model_dir: if given, the report is also written to MODEL_DIR/data_counts.json.
  Returns:
    {"mixture": name, "tasks": {task: {split: counts | None}},
     "total": {split: counts}}, counts = PairCounts.as_dict().
  """
  found = seqio.get_mixture_or_task(name)
  tasks = found.tasks if isinstance(found, seqio.Mixture) else [found]
  per_task, totals = {}, collections.defaultdict(sources.PairCounts)
  for task in tasks:
    counts = getattr(task.source, "counts", None)
    if isinstance(counts, sources.PairCounts):  # Streamed: the last pass, if any.
      counts = {"train": counts if counts.read else None}
    per_task[task.name] = {}
    for split in task.source.splits:
      split_counts = counts.get(split) if isinstance(counts, Mapping) else None
      if not isinstance(split_counts, sources.PairCounts):  # Not a sources.py reader.
        split_counts = None
      per_task[task.name][split] = split_counts and split_counts.as_dict()
      if split_counts is None:
        logging.info("%s[%s]: %s examples, no read/kept/skipped counts (yet: a streamed "
                     "source logs them at the end of each pass)", task.name, split,
                     task.source.num_input_examples(split))
        continue
      logging.info("%s", split_counts.report(f"{task.name}[{split}]"))
      totals[split] += split_counts
  for split, total in sorted(totals.items()):
    logging.info("%s", total.report(f"{name} total[{split}]"))
  report = {"mixture": name, "tasks": per_task,
            "total": {split: total.as_dict() for split, total in sorted(totals.items())}}
  if model_dir is not None:
    tf.io.gfile.makedirs(model_dir)
    with tf.io.gfile.GFile(f"{model_dir}/{DATA_COUNTS_FILE}", "w") as f:
      f.write(json.dumps(report, indent=1) + "\n")
  return report


def check_training_data(name: str) -> None:
  """Raises cli.UserError when a task of the mixture (or the task) has no training example.

  One line naming the task, its input, its read/kept/skipped counts and what
  to change; run at registration and again by `train` before the first batch,
  so an empty input never reaches JAX (an empty axis deep in the first step).
  """
  found = seqio.get_mixture_or_task(name)
  for task in found.tasks if isinstance(found, seqio.Mixture) else [found]:
    counts = getattr(task.source, "counts", None)
    if isinstance(counts, Mapping):
      counts = counts.get("train")
    empty = (task.source.num_input_examples("train") == 0
             or (isinstance(counts, sources.PairCounts) and counts.read and not counts.kept))
    if empty:
      raise cli.UserError(empty_input_message(
          task.name, getattr(task.source, "input_name", "its input"), counts))


def empty_input_message(task: str, input_name: str, counts: "sources.PairCounts | None") -> str:
  """"<task>: no training example in <input> (read=.. kept=0 ...); <fix>"."""
  counted = isinstance(counts, sources.PairCounts) and counts.read
  seen = counts.report("read") if counted else "0 lines"
  return (f"{task}: no training example in {input_name} ({seen}); check the input, or relax "
          "the filter that drops them (register_tasks.input_policy = @InputPolicy(), "
          "InputPolicy.max_chars; the Tatoeba filter: DATA_DIR).")


def _in_memory_task(name: str, reader: str, data_dir: str, vocab: seqio.Vocabulary,
                    seed: int, policy: sources.InputPolicy = sources.DEFAULT_POLICY) -> str:
  read = {split: _read_split(reader, data_dir, split, seed, policy) for split in SPLITS}
  if not read["train"][0]:
    raise cli.UserError(empty_input_message(name, f"{data_dir}/{reader}", read["train"][1]))
  source = seqio_sources.InMemoryPairSource(
      {split: pairs for split, (pairs, _) in read.items()},
      {split: counts for split, (_, counts) in read.items()})
  return register_pair_task(name, source, vocab)


def opus_task_name(lang_a: str, lang_b: str) -> str:
  """"vmsst_opus.eng.zho_CN": seqio task names may not contain '-'."""
  return f"{OPUS_MIXTURE}.{lang_a}.{lang_b}".replace("-", "_")


def register_opus_tasks(opus_dir: str, vocab: seqio.Vocabulary, exclude: AbstractSet[str], *,
                        policy: sources.InputPolicy = sources.DEFAULT_POLICY,
                        ) -> dict[tuple[str, str], str]:
  """One streaming task per language pair in `opus_dir`, plus the vmsst_opus mixture.

  Counts every file's lines first: that checks the Moses sides are aligned
  before training starts (not hours into it) and gives the mixture rates.

  Returns:
    (lang_a, lang_b) -> task name.
  """
  by_pair = collections.defaultdict(list)
  for corpus in opus_sources.discover_opus(opus_dir):
    by_pair[(corpus.lang_a, corpus.lang_b)].append(corpus)
  if not by_pair:
    raise cli.UserError(f"No OPUS files (<corpus>.<l1>-<l2>.<l1>/.<l2> or .tsv) under "
                        f"{opus_dir}: pass the directory tasks/opus_download.py wrote "
                        "(register_tasks.opus_dir).")
  lines = {pair: [opus_sources.check_moses_line_counts(c) for c in corpora]
           for pair, corpora in by_pair.items()}
  if not any(map(sum, lines.values())):
    raise cli.UserError(f"{opus_dir}: no usable OPUS pair ({sum(map(len, by_pair.values()))} "
                        "files, 0 lines): every file is empty; download the corpora again "
                        "(python -m vmsst_tasks.opus_download) or fix register_tasks.opus_dir.")
  names, rates = {}, []
  for (lang_a, lang_b), corpora in sorted(by_pair.items()):
    num_lines = sum(lines[(lang_a, lang_b)])
    name = opus_task_name(lang_a, lang_b)
    source = seqio_sources.StreamingPairSource(corpora, lines[(lang_a, lang_b)], name=name,
                                               exclude=exclude, policy=policy)
    names[(lang_a, lang_b)] = register_pair_task(name, source, vocab,
                                                 shuffle_buffer_size=OPUS_SHUFFLE_BUFFER)
    rates.append((name, float(max(num_lines, 1))))
    logging.info("%s: %d lines in %s", name, num_lines, ", ".join(c.name for c in corpora))
  _replace_mixture(OPUS_MIXTURE, rates)
  return names


PAPER_MIXTURE = "vmsst_opus_paper"


def register_paper_mixture(opus_dir: str | pathlib.Path, vocabulary: seqio.Vocabulary, *,
                           exclude: AbstractSet[str], name: str = PAPER_MIXTURE,
                           temperature: float = 1.0,
                           languages: Sequence[str] = opus_paper.LANGUAGES,
                           pivots: Sequence[str] = opus_paper.PIVOTS,
                           language_counts: Mapping[str, int] | None = None,
                           reuse: Mapping[tuple[str, str], str] | None = None) -> str:
  """Registers the paper's OPUS mixture (tasks/opus_paper.py): one task per (pivot, language).

  Every task in it is a pair task of this registry (`register_pair_task` over
  a `seqio_sources.StreamingPairSource`, the pivot side made side a), so it mixes with every
  other vmsst task. `register_tasks(..., opus_dir=...)` calls this after
  registering `vmsst_opus.<a>.<b>` over the same files, passing those tasks as
  `reuse`: a paper pair whose files are exactly those of the task
  `vmsst_opus.<pivot>.<language>` is that task in the mixture (only its rate
  is ours), so its files are registered once; that is every pair of a
  directory tasks/opus_download.py wrote (pivot first, paper corpora only).
  Any other pair gets its own task `<name>.<pivot>_<language>`: `vmsst_opus`
  splits a pair by code order (OPUS's `Tatoeba.de-en` lands in
  `vmsst_opus.deu.eng`, German as lang_a) and mixes in files the paper does
  not use (a `WikiMatrix.en-de` lands in `vmsst_opus.eng.deu`). Such files
  are then registered under both mixtures, which costs nothing until read;
  do not train on a mixture of `vmsst_opus` and `vmsst_opus_paper`, their
  shared files would be sampled twice.

  Args:
    opus_dir: the OPUS directory (layout: tasks/opus_paper.py).
    vocabulary: the seqio vocabulary of the tokens features.
    exclude: sentences never to train on (tatoeba_exclusion(data_dir), the
      Tatoeba test sentences). Required: pass frozenset() to filter nothing,
      so training on Tatoeba test sentences is a visible choice.
    name: the mixture's name; tasks of its own are `<name>.<pivot>_<language>`
      (canonical codes, '-' as '_').
    temperature: see `opus_paper.paper_mixture_rates`.
    languages, pivots: the paper's by default; a subset selects pairs.
    language_counts: {OPUS code: pairs} behind the rates; None (default) is
      opus_paper.PAIR_COUNTS, the paper's Table 15; an empty mapping takes the
      pairs on disk instead (for a directory that is not the paper's data).
    reuse: {(lang_a, lang_b): task name} of pair tasks over this directory
      with the same vocabulary and exclude (as register_tasks passes).

  Registering the same name again replaces the earlier tasks and mixture.
  Paper languages and corpora without files are logged as a warning.

  Returns:
    The mixture name.

  Raises:
    TypeError: exclude is not a set.
  """
  if not isinstance(exclude, collections.abc.Set):
    raise TypeError(f"exclude must be a set of sentences (frozenset() for none), got {exclude!r}")
  inventory = opus_paper.scan_opus_dir(opus_dir, languages=languages, pivots=pivots)
  missing = inventory.missing_languages or inventory.missing_corpora
  (logging.warning if missing else logging.info)("OPUS paper data: %s", inventory.report())
  counts = opus_paper.PAIR_COUNTS if language_counts is None else language_counts
  rates = opus_paper.paper_mixture_rates(opus_paper.pair_counts(inventory, counts), temperature)
  seqio.MixtureRegistry.remove(name)
  for old in [t for t in seqio.TaskRegistry.names() if t.startswith(f"{name}.")]:
    seqio.TaskRegistry.remove(old)  # Our own tasks of an earlier registration.
  tasks = []
  for pair in inventory.pairs:
    task_name = _reusable_task(pair, reuse or {})
    if task_name is None:
      task_name = f"{name}.{pair.key}".replace("-", "_")
      source = seqio_sources.StreamingPairSource(pair.files, pair.file_lines,
                                                 name=task_name, exclude=exclude,
                                                 pivot=pair.pivot)
      register_pair_task(task_name, source, vocabulary, shuffle_buffer_size=OPUS_SHUFFLE_BUFFER)
    tasks.append((task_name, rates[pair.key]))
  seqio.MixtureRegistry.add(name, tasks)
  return name


def _reusable_task(pair: opus_paper.PaperPair,
                   reuse: Mapping[tuple[str, str], str]) -> str | None:
  """The task in `reuse` over exactly this pair's files, or None.

  It is keyed (pivot, language), so every one of its files has the pivot as
  lang_a: the same examples a task of our own would give.
  """
  task_name = reuse.get((pair.pivot, pair.language))
  if task_name is None:
    return None
  corpora = getattr(seqio.get_mixture_or_task(task_name).source, "corpora", None)
  return task_name if corpora is not None and set(corpora) == set(pair.files) else None


def register_tfds_task(spec: tfds_sources.TfdsTranslation, vocab: seqio.Vocabulary, *,
                       exclude: AbstractSet[str],
                       policy: sources.InputPolicy = sources.DEFAULT_POLICY) -> str:
  """A pair task `spec.task_name` over a prepared TFDS translation dataset (read locally).

  Its examples are those of every other pair task, so it mixes with them
  (list it in a mixture with `_replace_mixture` or gin); `exclude` and
  `policy` as for the OPUS tasks.

  Raises:
    cli.UserError: the dataset is not prepared in spec.data_dir, lacks a
      key, or keeps no training pair.
  """
  source = tfds_sources.TfdsPairSource(spec, exclude=exclude, policy=policy)
  logging.info("%s", source.counts["train"].report(f"{spec.task_name}[train]"))
  register_pair_task(spec.task_name, source, vocab)
  check_training_data(spec.task_name)
  return spec.task_name


def register_triplet_task(triplets: str, data_dir: str, vocab: seqio.Vocabulary) -> str:
  """Registers `vmsst_triplets` (replacing it) over `triplets_lib.read_triplet_splits`.

  Args:
    triplets: "stsb" or a directory holding train.tsv and validation.tsv.
    data_dir: the shared data root (for "stsb").
    vocab: the pair tasks' vocabulary.
  """
  features = {**output_features(vocab),
              "tokens_negative": seqio.ContinuousFeature(dtype=tf.int32, rank=1)}
  splits = triplets_lib.read_triplet_splits(triplets, data_dir)
  source = triplets_lib.TripletSource({split: rows for split, (rows, _) in splits.items()},
                                      counts={split: counts for split, (_, counts)
                                              in splits.items()})
  seqio.TaskRegistry.remove(triplets_lib.TASK)
  seqio.TaskRegistry.add(triplets_lib.TASK, source=source, output_features=features,
                         preprocessors=list(triplets_lib.PREPROCESSORS))
  return triplets_lib.TASK


def source_sided(pairs: Sequence[sources.Pair], source_language: str,
                 max_sources: int | None = None) -> list[sources.Pair]:
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
      pair = sources.Pair(pair.text_b, pair.text_a, pair.lang_b, pair.lang_a)
    if pair.text_a not in seen:
      if max_sources is not None and len(seen) >= max_sources:
        continue
      seen.add(pair.text_a)
    kept.append(pair)
  return kept


class TeacherVectors(Protocol):
  """What distillation registration reads of vmsst.teacher_cache.TeacherCache.

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

  Raised before any task is registered. `vmsst.teacher_cache.fill_stage`
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
                        max_sources: int | None) -> dict[tuple[str, str], list[sources.Pair]]:
  """(task, split) -> its source-sided pairs (read once per process; do not modify)."""
  # DEFAULT_POLICY positionally: the same _read_split cache entry as the pair tasks'.
  pairs = {(name, split): source_sided(
               _read_split(reader, data_dir, split, seed, sources.DEFAULT_POLICY)[0],
               source_language, max_sources)
           for name, reader in DISTILLATION_READERS.items() for split in SPLITS}
  if not any(pairs[(name, "train")] for name in DISTILLATION_READERS):
    raise ValueError(f"no training pair of {data_dir} has a {source_language} side: set "
                     "register_tasks.distillation_source to a language of the corpora.")
  return pairs


def distillation_sources(data_dir: str, *, seed: int = 0, source_language: str = "eng",
                         max_sources: int | None = None) -> list[str]:
  """The distinct source sentences (sorted) whose teacher vectors the vmsst_distill_* tasks read.

  Args as register_tasks' data_dir, ntrex_seed, distillation_source and
  distillation_max_sources.
  """
  source_language = languages.canonical_language(source_language)  # "en" -> "eng"
  pairs = _distillation_pairs(str(pathlib.Path(data_dir)), seed, source_language, max_sources)
  return sorted({p.text_a for task_pairs in pairs.values() for p in task_pairs})


def check_teacher_vectors(teacher_cache: TeacherVectors, sentences: Sequence[str]) -> None:
  """Raises MissingTeacherVectors unless the cache holds every sentence (it never encodes)."""
  missing = sorted({s for s in sentences if s not in teacher_cache})
  if missing:
    raise MissingTeacherVectors(teacher_cache, missing, len(set(sentences)))


def register_distillation_tasks(data_dir: str, vocab: seqio.Vocabulary,
                                teacher_cache: TeacherVectors, *, seed: int,
                                source_language: str = "eng",
                                max_sources: int | None = None) -> list[str]:
  """vmsst_distill_* tasks and their mixture, over teacher vectors read from `teacher_cache`.

  The tasks look the vectors up (tasks.preprocessors.teacher_embeddings) from
  one array read here; nothing is encoded.

  Raises:
    ValueError: no training pair has a `source_language` side.
    MissingTeacherVectors: the cache lacks some source sentence (nothing is
      registered then).
  """
  data_dir = str(pathlib.Path(data_dir))
  source_language = languages.canonical_language(source_language)  # "en" -> "eng"
  pairs = _distillation_pairs(data_dir, seed, source_language, max_sources)
  sentences = distillation_sources(data_dir, seed=seed, source_language=source_language,
                                   max_sources=max_sources)
  check_teacher_vectors(teacher_cache, sentences)
  vectors = teacher_cache.lookup(sentences)
  logging.info("distillation tasks: %d source sentences, vectors of teacher %s read from %s",
               len(sentences), teacher_cache.teacher.name, teacher_cache.directory)
  features = {**output_features(vocab),
              "teacher": seqio.ContinuousFeature(dtype=tf.float32, rank=1)}
  for name, reader in DISTILLATION_READERS.items():
    source = seqio_sources.InMemoryPairSource(
        {split: pairs[(name, split)] for split in SPLITS},
        {split: _read_split(reader, data_dir, split, seed, sources.DEFAULT_POLICY)[1]
         for split in SPLITS})
    seqio.TaskRegistry.remove(name)
    seqio.TaskRegistry.add(
        name, source=source, output_features=features,
        preprocessors=list(preprocessors.distillation_preprocessors(sentences, vectors)))
  # Reimers & Gurevych 2020 §3: "we balance the data set sizes by drawing for a
  # mini batch roughly the same number of samples from each data set. Data from
  # smaller data sets is repeated": equal rates (seqio repeats each task).
  rates = [(n, 1.0) for n in DISTILLATION_READERS if pairs[(n, "train")]]
  return [*DISTILLATION_READERS, _replace_mixture(DISTILL_MIXTURE, rates)]


def register_entity_task(entity_dir: str, vocab: seqio.Vocabulary) -> str:
  """vmsst_wiki_entities over a `python -m vmsst_tasks.wiki_entities` output directory."""
  features = {**output_features(vocab),
              "entities": seqio.ContinuousFeature(dtype=tf.int32, rank=1)}
  keep_entities = functools.partial(
      seqio.preprocessors.rekey, key_map={"tokens_a": "text_a", "tokens_b": "text_b",
                                          "lang_a": "lang_a", "lang_b": "lang_b",
                                          "entities": "entities"})
  seqio.TaskRegistry.remove(ENTITY_TASK)
  seqio.TaskRegistry.add(ENTITY_TASK,
                         source=seqio_sources.EntitySentenceSource(entity_dir, name=ENTITY_TASK),
                         output_features=features,
                         preprocessors=[keep_entities, *preprocessors.PAIR_PREPROCESSORS[1:]])
  return ENTITY_TASK


@gin.configurable
def register_tasks(data_dir: str, vocabulary_path: str, opus_dir: str | None = None,
                   ntrex_seed: int = 0,
                   teacher_cache: TeacherVectors | None = None,
                   distillation_source: str = "eng",
                   distillation_max_sources: int | None = None,
                   entity_dir: str | None = None,
                   input_policy: sources.InputPolicy | None = None,
                   triplets: str | None = None,
                   tfds_translations: Sequence[tfds_sources.TfdsTranslation] = ()) -> list[str]:
  """Registers (or re-registers) every vmsst task and mixture; returns their names.

  Safe to call again with the same or other arguments: each name is removed
  from the seqio registries before it is added.

  Args:
    data_dir: root of the shared corpora (ntrex128/, multi30k/, tatoeba/).
    vocabulary_path: the SentencePiece .model (python -m vmsst.vocabulary).
    opus_dir: optional directory of OPUS Moses/TSV files (searched recursively).
    ntrex_seed: seed of the NTREX eng/spa pivot choice (a different seed gives
      a different but equally sized set of NTREX pairs).
    teacher_cache: if given, also registers the vmsst_distill_* tasks over
      the teacher vectors it holds (read only: when some source sentence has
      none, MissingTeacherVectors is raised before anything is registered;
      vmsst.teacher_cache.fill_stage fills them).
    distillation_source: language of the distillation tasks' side a.
    distillation_max_sources: keep only the first this many source sentences
      of each distillation task and split (tests, quick runs).
    entity_dir: if given, also registers vmsst_wiki_entities from this
      `python -m vmsst_tasks.wiki_entities` output directory.
    input_policy: how NTREX, Multi30k and OPUS lines that are malformed
      (no tab, not UTF-8) or overlong are treated; default
      sources.DEFAULT_POLICY: skipped and counted (tasks/sources.py docstring).
    triplets: if given, also registers vmsst_triplets (query-tower tuning):
      "stsb" builds them from data_dir/stsb train/dev, or a directory holding
      train.tsv and validation.tsv (tasks/triplets.py).
    tfds_translations: TFDS translation datasets prepared in a local data_dir,
      one pair task each (`register_tfds_task`; names `vmsst_tfds.<builder>.<config>`).
  """
  policy = input_policy or sources.DEFAULT_POLICY
  data_dir = str(pathlib.Path(data_dir))
  if teacher_cache is not None:  # First: a cache lacking vectors fails before anything registers.
    check_teacher_vectors(teacher_cache, distillation_sources(
        data_dir, seed=ntrex_seed, source_language=distillation_source,
        max_sources=distillation_max_sources))
  vocab = vocabulary_lib.get_vocabulary(vocabulary_path)
  names = [_in_memory_task(NTREX_TASK, "ntrex128", data_dir, vocab, ntrex_seed, policy),
           _in_memory_task(MULTI30K_TASK, "multi30k", data_dir, vocab, ntrex_seed, policy)]
  rates = [(n, float(seqio.TaskRegistry.get(n).num_input_examples("train"))) for n in names]
  names.append(_replace_mixture(DEMO_MIXTURE, rates))
  if opus_dir is not None:
    opus_tasks = register_opus_tasks(opus_dir, vocab, tatoeba_exclusion(data_dir),
                                     policy=policy)
    names += [*opus_tasks.values(), OPUS_MIXTURE]
    names.append(register_paper_mixture(opus_dir, vocab, exclude=tatoeba_exclusion(data_dir),
                                        reuse=opus_tasks))
  if teacher_cache is not None:
    names += register_distillation_tasks(data_dir, vocab, teacher_cache, seed=ntrex_seed,
                                         source_language=distillation_source,
                                         max_sources=distillation_max_sources)
  if entity_dir is not None:
    names.append(register_entity_task(entity_dir, vocab))
  if triplets is not None:
    names.append(register_triplet_task(triplets, data_dir, vocab))
  for spec in tfds_translations:
    names.append(register_tfds_task(spec, vocab, exclude=tatoeba_exclusion(data_dir),
                                    policy=policy))
  return names
