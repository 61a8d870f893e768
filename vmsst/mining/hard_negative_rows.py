"""Hard-negative rows of a corpus: its pairs read, their negatives mined per language pair.

`python -m vmsst.hard_negatives` reads a corpus (`read_pairs`: an OPUS-layout
directory or two Moses files) and gives each pair its negatives
(`mine_rows`), searching each language pair apart with the selection of
hard_negatives.py beside this module; vmsst_tasks.sources.negatives_files writes them.
"""

import collections
from typing import Callable, Sequence

import numpy as np

from vmsst.base import cli
from vmsst.base import files
from vmsst.mining import negative_selection as selection

Encode = Callable[[Sequence[str], str], np.ndarray]  # (sentences, language) -> float [n, d]


def mine_rows(pairs: Sequence, encode: Encode, *, negatives: int, candidates: int,
              margin: str, margin_value: float) -> tuple[list, selection.Counts]:
  """(vmsst_tasks.sources.negatives_files.Row per pair, in input order; summed Counts).

  pairs: pair_readers.Pair-like (text_a, text_b, lang_a, lang_b). Each language
  pair is searched apart: a's candidates are the distinct b sentences of
  pairs of the same (lang_a, lang_b).
  """
  from vmsst_tasks.sources import negatives_files as task  # pylint: disable=import-outside-toplevel
  groups = collections.defaultdict(list)
  for index, pair in enumerate(pairs):
    groups[(pair.lang_a, pair.lang_b)].append(index)
  rows, total = [None] * len(pairs), selection.Counts()
  for (lang_a, lang_b), members in groups.items():
    group = [pairs[i] for i in members]
    found, counts = _mine_group(group, encode, lang_a, lang_b, negatives=negatives,
                                candidates=candidates, margin=margin, margin_value=margin_value)
    total += counts
    for i, pair, chosen in zip(members, group, found):
      rows[i] = task.Row(pair.text_a, pair.text_b, lang_a, lang_b, tuple(chosen))
  return rows, total


def _mine_group(pairs: Sequence, encode: Encode, lang_a: str, lang_b: str, **options
                ) -> tuple[list[list[str]], selection.Counts]:
  """Each pair's negatives (texts) within one language pair."""
  key = selection.normalized
  target_row, targets = {}, []
  for pair in pairs:
    if key(pair.text_b) not in target_row:
      target_row[key(pair.text_b)] = len(targets)
      targets.append(pair.text_b)
  translations = collections.defaultdict(set)  # anchor key -> target rows
  for pair in pairs:
    translations[key(pair.text_a)].add(target_row[key(pair.text_b)])
  excluded = [frozenset(translations[key(p.text_a)] | (
      {target_row[key(p.text_a)]} if key(p.text_a) in target_row else set())) for p in pairs]
  anchors = sorted({p.text_a for p in pairs})
  anchor_row = {text: i for i, text in enumerate(anchors)}
  anchor_vectors = encode(anchors, lang_a)[[anchor_row[p.text_a] for p in pairs]]
  positives = np.array([target_row[key(p.text_b)] for p in pairs])
  wanted = min(options["negatives"], len(targets) - 1)  # a small group has fewer to offer
  if wanted < 1:  # one distinct b sentence: nothing to mine
    return [[] for _ in pairs], selection.Counts(pairs=len(pairs), short=len(pairs))
  indices, _, counts = selection.select(
      anchor_vectors, encode(targets, lang_b), positives, excluded,
      **options | {"negatives": wanted,
                   "candidates": min(max(options["candidates"], wanted), len(targets))})
  if wanted < options["negatives"]:
    counts.short = len(pairs)
  return [[targets[j] for j in row if j >= 0] for row in indices], counts


def read_pairs(*, opus_dir: str | None, src: str | None, trg: str | None,
               src_language: str | None, trg_language: str | None):
  """(pairs, pair_readers.PairCounts) of the corpus the flags name, under the default input policy.

  Raises:
    cli.UserError: a misaligned Moses pair, an unknown language code, no
      corpus found, naming the file and the fix.
  """
  from vmsst_tasks.sources import opus_readers  # pylint: disable=import-outside-toplevel
  from vmsst_tasks.sources import pair_readers  # pylint: disable=import-outside-toplevel
  counts = pair_readers.PairCounts()
  try:
    if opus_dir:
      corpora = opus_readers.discover_opus(opus_dir)
      if not corpora:
        raise cli.UserError(f"--opus_dir={opus_dir} holds no <corpus>.<l1>-<l2>.<l1>/.<l2> "
                            "(Moses) or <corpus>.<l1>-<l2>.tsv file; give the directory "
                            "python -m vmsst_tasks.opus_download wrote, or --src/--trg.")
    else:
      corpora = [opus_readers.OpusFile(
          (files.as_path(src), files.as_path(trg)),
          pair_readers.canonical_in_file(src_language, files.as_path(src)),
          pair_readers.canonical_in_file(trg_language, files.as_path(trg)))]
    pairs = list(opus_readers.opus_pairs(corpora, counts=counts, name="hard_negatives"))
  except (ValueError, FileNotFoundError) as e:
    raise cli.UserError(str(e)) from None
  return pairs, counts
