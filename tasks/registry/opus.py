"""The OPUS family: a streamed task per language pair of an OPUS directory, and two mixtures.

`vmsst_opus` mixes every pair at its line count, whatever the corpora are
called; `vmsst_opus_paper` is the VMSST paper's mixture over the same files
(languages and rates: tasks/sources/opus_paper.py), registered when a run trains on
it. The paper runs select this family.
"""

import collections.abc
import pathlib
from typing import AbstractSet, Mapping, Sequence

from absl import logging
import seqio

from vmsst_tasks.sources import opus_paper
from vmsst_tasks.sources import opus_readers
from vmsst_tasks.registry import seqio_sources
from vmsst_tasks.sources import pair_readers
from vmsst_tasks.registry import common
from vmsst.base import cli
from vmsst.base.gin_utils import gin

OPUS_MIXTURE = "vmsst_opus"
PAPER_MIXTURE = "vmsst_opus_paper"
# OPUS files are streamed in file order, so a bigger buffer than seqio's
# default 1000 is needed to mix consecutive lines of a corpus.
OPUS_SHUFFLE_BUFFER = 10_000


@gin.configurable
def opus_tasks(inputs: common.RegistrationInputs, *, opus_dir: str = gin.REQUIRED,
               paper_mixture: bool | str | None = None) -> list[str]:
  """vmsst_opus.<a>.<b> per language pair of `opus_dir`, vmsst_opus, and vmsst_opus_paper if asked.

  Any corpus names train under vmsst_opus; the paper mixture reads only the
  paper's corpora (Europarl, UN, ...), so registering it for a directory of
  one's own would fail on files the run never asked for.

  Args:
    inputs: the shared inputs (register_families builds them).
    opus_dir: a directory of OPUS Moses/TSV files (searched recursively), as
      `python -m vmsst_tasks.opus_download` writes it, or files of one's own in
      that layout.
    paper_mixture: register vmsst_opus_paper too: True (an error naming the
      directory if it holds none of the paper's files), False (never),
      IF_PRESENT (when the directory holds the paper's files), or None
      (default) when the run trains on it (`train.mixture_name`), IF_PRESENT
      outside a run (seqio's cache job).
  """
  tasks = register_opus_tasks(opus_dir, inputs.vocabulary, inputs.exclude, policy=inputs.policy)
  names = [*tasks.values(), OPUS_MIXTURE]
  if paper_mixture is None:
    run = _run_mixture()
    paper_mixture = IF_PRESENT if run is None else run == PAPER_MIXTURE
  if paper_mixture:
    try:
      names.append(register_paper_mixture(opus_dir, inputs.vocabulary, exclude=inputs.exclude,
                                           reuse=tasks))
    except FileNotFoundError as e:  # none of the paper's corpora in the directory
      if paper_mixture is True:
        raise cli.UserError(f"{e}; or train on every pair it holds: train.mixture_name = "
                            f"'{OPUS_MIXTURE}'.") from None
      logging.info("%s not registered: %s", PAPER_MIXTURE, e)
  return names


IF_PRESENT = "if_present"


def _run_mixture() -> str | None:
  """What the run trains on (`train.mixture_name`, a macro resolved); None outside a run."""
  try:
    value = gin.query_parameter("train.mixture_name")
  except ValueError:  # train not bound, or not imported: no run
    return None
  if isinstance(value, gin.config.ConfigurableReference):  # %MIXTURE
    value = value.scoped_configurable_fn()
  return value if isinstance(value, str) else None


def opus_task_name(lang_a: str, lang_b: str) -> str:
  """"vmsst_opus.eng.zho_CN": seqio task names may not contain '-'."""
  return f"{OPUS_MIXTURE}.{lang_a}.{lang_b}".replace("-", "_")


def register_opus_tasks(opus_dir: str, vocab: seqio.Vocabulary, exclude: AbstractSet[str], *,
                        policy: pair_readers.InputPolicy = pair_readers.DEFAULT_POLICY,
                        ) -> dict[tuple[str, str], str]:
  """One streaming task per language pair in `opus_dir`, plus the vmsst_opus mixture.

  Counts every file's lines first (opus_readers.checked_corpora): that checks
  the Moses sides are aligned before training starts (not hours into it) and
  gives the mixture rates.

  Returns:
    (lang_a, lang_b) -> task name.
  """
  checked = opus_readers.checked_corpora(opus_dir)
  by_pair = {pair: [corpus for corpus, _ in found] for pair, found in checked.items()}
  lines = {pair: [count for _, count in found] for pair, found in checked.items()}
  names, rates = {}, []
  for (lang_a, lang_b), corpora in sorted(by_pair.items()):
    num_lines = sum(lines[(lang_a, lang_b)])
    name = opus_task_name(lang_a, lang_b)
    source = seqio_sources.StreamingPairSource(corpora, lines[(lang_a, lang_b)], name=name,
                                               exclude=exclude, policy=policy)
    names[(lang_a, lang_b)] = common.register_pair_task(name, source, vocab,
                                                        shuffle_buffer_size=OPUS_SHUFFLE_BUFFER)
    rates.append((name, float(max(num_lines, 1))))
    logging.info("%s: %d lines in %s", name, num_lines, ", ".join(c.name for c in corpora))
  common.replace_mixture(OPUS_MIXTURE, rates)
  return names


def register_paper_mixture(opus_dir: str | pathlib.Path, vocabulary: seqio.Vocabulary, *,
                           exclude: AbstractSet[str], name: str = PAPER_MIXTURE,
                           temperature: float = 1.0,
                           languages: Sequence[str] = opus_paper.LANGUAGES,
                           pivots: Sequence[str] = opus_paper.PIVOTS,
                           language_counts: Mapping[str, int] | None = None,
                           reuse: Mapping[tuple[str, str], str] | None = None) -> str:
  """Registers the paper's OPUS mixture (tasks/sources/opus_paper.py): one task per (pivot,
  language).

  Every task in it is a pair task of this registry (`common.register_pair_task` over
  a `seqio_sources.StreamingPairSource`, the pivot side made side a), so it mixes with every
  other vmsst task. `opus_tasks` calls this after
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
    opus_dir: the OPUS directory (layout: tasks/sources/opus_paper.py).
    vocabulary: the seqio vocabulary of the tokens features.
    exclude: sentences never to train on (common.tatoeba_exclusion(data_dir), the
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
      with the same vocabulary and exclude (as opus_tasks passes).

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
      common.register_pair_task(task_name, source, vocabulary,
                                shuffle_buffer_size=OPUS_SHUFFLE_BUFFER)
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
