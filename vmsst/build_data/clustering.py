"""Writes a MewsC-16-format clustering set (vmsst/evaluation/clustering.py's format).

MewsC-16 is not in the shared data, so `build_clustering_task` here writes the same
format from the STS Benchmark: the category of a sentence is the STSb `file`
column (MSRvid, images, headlines, MSRpar, answers-forums, ...), and the text
in 11 languages comes from stsb-multi-mt, whose rows are the STSb rows in the
same order (checked: 5749/1500/1379 rows, every English sentence equal to
STSb's after whitespace normalization, every score equal). Captions
(MSRvid, images) and news (headlines, MSRpar) are close in topic, so even a
strong encoder stays well below 100: a comparative, not an absolute, score.

  python -m vmsst.build_clustering --data_dir=/work/shared/data --output=DIR
"""

import collections
import gzip
import pathlib
from typing import Sequence

import numpy as np

from vmsst.base import cli
from vmsst.base import files
from vmsst.base import sts_files
from vmsst.base import text_files
from vmsst.evaluation.clustering import CATEGORIES_SUFFIX, DEFAULT_FOLDER, SENTENCES_SUFFIX


# ---------------------------------------------------------------- builder


def _read_stsb(data_dir: pathlib.Path, split: str) -> list[tuple[str, str, str]]:
  """(file column, e.g. "MSRvid"; sentence1; sentence2) of every STSb row of one split."""
  pairs = sts_files.read_stsb(data_dir / "stsb", split)
  return [(f, text_files.one_line(a), text_files.one_line(b))
          for f, a, b in zip(pairs.source_files, pairs.sentences1, pairs.sentences2)]


def _read_multi_mt(data_dir: pathlib.Path, lang: str, split: str) -> list[tuple[str, str]]:
  """(sentence1, sentence2) rows of stsb-multi-mt, whitespace-normalized."""
  pairs = sts_files.read_stsb_multi_mt(data_dir / "stsb-multi-mt", lang, split)
  return [(text_files.one_line(a), text_files.one_line(b)) for a, b in zip(pairs.sentences1, pairs.sentences2)]


def _labelled_units(data_dir: pathlib.Path) -> tuple[list[tuple[str, int, int, str]], dict]:
  """Every STSb sentence with one unambiguous category, once: [(split, row, side, category)].

  A unit is one side (0 or 1) of one STSb row. An English sentence is kept at
  its first occurrence only, and dropped when it occurs under two categories,
  so every label is well defined; the same units are then read in every
  language. Also returns counts: all English sentences, the distinct ones
  kept, and the distinct ones dropped for having two categories.
  """
  units, categories_of = [], collections.defaultdict(set)
  for split in sts_files.STSB_SPLITS:
    stsb = _read_stsb(data_dir, split)
    english = _read_multi_mt(data_dir, "en", split)
    if len(stsb) != len(english):
      raise ValueError(f"{data_dir}: stsb/sts-{split}.csv has {len(stsb)} rows but "
                       f"stsb-multi-mt/stsb-en-{split}.csv.gz {len(english)}; the builder "
                       f"needs the two row-aligned.")
    for row, ((category, *sides), mt_sides) in enumerate(zip(stsb, english)):
      if tuple(sides) != mt_sides:
        raise ValueError(f"stsb-multi-mt/stsb-en-{split}.csv.gz:{row + 1}: differs from "
                         f"stsb/sts-{split}.csv; the builder needs the two row-aligned.")
      for side, text in enumerate(sides):
        units.append((split, row, side, category, text))
        categories_of[text].add(category)
  kept, seen = [], set()
  for split, row, side, category, text in units:
    if len(categories_of[text]) == 1 and text not in seen:
      kept.append((split, row, side, category))
    seen.add(text)
  ambiguous = sum(len(c) > 1 for c in categories_of.values())
  return kept, {"english_sentences": len(units), "kept_distinct": len(kept),
                "dropped_ambiguous_distinct": ambiguous}


def _sample(units: list, max_per_category: int, seed: int) -> list:
  """At most `max_per_category` units per category, chosen by a seeded shuffle, in corpus order."""
  rng = np.random.default_rng(seed)
  by_category = collections.defaultdict(list)
  for index, unit in enumerate(units):
    by_category[unit[-1]].append(index)
  chosen = []
  for category in sorted(by_category):
    indices = by_category[category]
    chosen += [indices[i] for i in rng.permutation(len(indices))[:max_per_category]]
  return [units[i] for i in sorted(chosen)]


def build_clustering_task(data_dir: str | pathlib.Path, output: str | pathlib.Path, *,
                          languages: Sequence[str] = sts_files.STSB_MULTI_MT_LANGUAGES,
                          max_per_category: int = 250,
                          seed: int = 0, name: str = DEFAULT_FOLDER) -> dict:
  """Writes a MewsC-16-format clustering set built from STSb (see module doc).

  Every language gets the same sentences (the same STSb rows and sides), so
  accuracies are comparable across languages. Deterministic for a given seed.
  The folder is named like MewsC-16's by default so the `mewsc16` suite finds
  it; its SOURCE.md says what it really holds.

  Args:
    data_dir: the shared data root (holding stsb/ and stsb-multi-mt/).
    output: where to create `<name>/`.
    languages: stsb-multi-mt language codes.
    max_per_category: cap per category, keeping encoding cheap (9 categories
      × 250 = 2,250 sentences per language by default).
    seed: of the per-category sample.
    name: folder created under `output`.

  Returns:
    {"folder", "languages", "n", "categories": {category: count}, "source": {counts}}.
  """
  data_dir, folder = files.as_path(data_dir), files.as_path(output) / name
  unknown = sorted(set(languages) - set(sts_files.STSB_MULTI_MT_LANGUAGES))
  if unknown:
    raise ValueError(f"no stsb-multi-mt data for {unknown}; choose from "
                     f"{sts_files.STSB_MULTI_MT_LANGUAGES}.")
  units, source = _labelled_units(data_dir)
  units = _sample(units, max_per_category, seed)
  folder.mkdir(parents=True, exist_ok=True)
  for lang in languages:
    rows = {split: _read_multi_mt(data_dir, lang, split) for split in sts_files.STSB_SPLITS}
    sentences = [rows[split][row][side] for split, row, side, _ in units]
    text = "".join(s + "\n" for s in sentences).encode("utf-8")
    # mtime=0: the same input writes the same bytes.
    (folder / f"{lang}{SENTENCES_SUFFIX}").write_bytes(gzip.compress(text, mtime=0))
    (folder / f"{lang}{CATEGORIES_SUFFIX}").write_text(
        "".join(u[-1] + "\n" for u in units), encoding="utf-8")
  (folder / "SOURCE.md").write_text(
      "# Not MewsC-16: an STSb-derived stand-in in its format\n\n"
      "Written by vmsst.build_data.clustering.build_clustering_task from stsb/ (category = "
      f"the `file` column) and stsb-multi-mt/ (text), {max_per_category} sentences per "
      f"category, sample seed {seed}. See that module's docstring.\n", encoding="utf-8")
  return {"folder": str(folder), "languages": list(languages), "n": len(units),
          "categories": dict(sorted(collections.Counter(u[-1] for u in units).items())),
          "source": source}


if __name__ == "__main__":
  cli.old_name("vmsst.build_data.clustering")
