r"""English (anchor, positive, negative) triplets for query-tower tuning: built from STSb or
MSMARCO, written and read as TSV.

The STSb rule (`stsb_triplets`), for each pair scored >= HIGH (4.0 of 5,
"mostly equivalent"): anchor = sentence1, positive = sentence2. The negative
is, in this order of preference:
  1. same_anchor: the other sentence of a pair scored <= LOW (1.0, "not
     equivalent, maybe same topic") that contains the anchor text (the first
     such pair in file order): a sentence a rater judged unrelated to this very
     anchor;
  2. same_file: a sentence of a low-scoring pair from the same source file
     (MSRvid, headlines, ...), drawn with a seeded generator: same domain and
     style, so length or genre alone does not separate it from the positive;
  3. any_file: the same from every low-scoring pair (a file without any).
A candidate equal to the anchor or positive is never used. Pairs whose two
sentences are identical are skipped and counted (nothing to rank). Every
count is reported: pairs read = kept + skipped_identical + not_high.

TSV files are read with vmsst.base.text_files.read_tsv (as pair_ranking does): a line
without exactly three non-empty TAB-separated fields is an error naming file
and line; blank lines are skipped and counted.

The MSMARCO splits of query-tower tuning (Vasilyev et al. 2022, §2.2;
`msmarco_splits`): of the sentence-transformers file's 499,184 samples
{"query", "pos": [...], "neg": [...]}, the first 487,983 train and the next
4,200 validation, each as (query, first positive, first negative); the last
7,000 test, as every (query, positive, negative) of each sample (357,642
triplets in the paper). The one sample between validation and test is unused,
as in the paper's counts.

`python -m vmsst_tasks.triplets` writes them; the seqio task `vmsst_triplets`
(tasks/registry/triplets.py) reads them.
"""

import collections
import json
import pathlib
from typing import Sequence

from absl import logging
import numpy as np

from vmsst_tasks.sources import pair_readers
from vmsst.base import files
from vmsst.base import sts_files
from vmsst.base import tallies
from vmsst.base import text_files

HIGH, LOW = 4.0, 1.0
TASK = "vmsst_triplets"
STSB_SPLITS = {"train": "train", "validation": "dev", "test": "test"}
Triplet = tuple[str, str, str]


class BuildCounts(tallies.Tally):
  """What `stsb_triplets` did with each pair it read.

  pairs = kept + skipped_identical + not_high; each kept pair also counts
  under the kind of its negative (same_anchor, same_file or any_file).
  """
  NAMES = ("pairs", "not_high", "skipped_identical", "kept", "same_anchor", "same_file",
           "any_file")


def stsb_triplets(stsb_dir: str | pathlib.Path, split: str, *, high: float = HIGH,
                  low: float = LOW, seed: int = 0) -> tuple[list[Triplet], BuildCounts]:
  """Triplets of one STSb split ("train", "dev" or "test") by the module's rule."""
  pairs = sts_files.read_stsb(files.as_path(stsb_dir), split)
  first = [text_files.one_line(s) for s in pairs.sentences1]
  second = [text_files.one_line(s) for s in pairs.sentences2]
  source_files = list(pairs.source_files)
  low_rows = [i for i, g in enumerate(pairs.gold) if g <= low]
  partner = {}  # sentence -> the other side of its first low-scoring pair
  by_file = collections.defaultdict(list)
  for i in low_rows:
    partner.setdefault(first[i], second[i])
    partner.setdefault(second[i], first[i])
    by_file[source_files[i]] += [first[i], second[i]]
  everywhere = [s for i in low_rows for s in (first[i], second[i])]
  if not everywhere:
    raise ValueError(f"{stsb_dir} sts-{split}.csv has no pair scored <= {low}: no negatives.")
  rng = np.random.default_rng(seed)
  counts, triplets = BuildCounts(pairs=len(first)), []
  for i, gold in enumerate(pairs.gold):
    anchor, positive = first[i], second[i]
    if gold < high:
      counts.not_high += 1
      continue
    if anchor == positive:
      counts.skipped_identical += 1
      continue
    negative = partner.get(anchor)
    if negative is not None and negative not in (anchor, positive):
      counts.same_anchor += 1
    else:
      kind = "same_file" if by_file.get(source_files[i]) else "any_file"
      pool = by_file[source_files[i]] if kind == "same_file" else everywhere
      negative = _draw(pool, (anchor, positive), rng)
      counts.add(kind)
    triplets.append((anchor, positive, negative))
  counts.kept = len(triplets)
  return triplets, counts


def _draw(pool: Sequence[str], avoid: tuple[str, str], rng: np.random.Generator) -> str:
  """A seeded draw from `pool` that is neither sentence of `avoid`."""
  for _ in range(100):
    candidate = pool[int(rng.integers(len(pool)))]
    if candidate not in avoid:
      return candidate
  raise ValueError(f"no negative candidate differs from {avoid[0]!r}; the pool is too small.")


def write_tsv(path: str | pathlib.Path, triplets: Sequence[Triplet]) -> None:
  """anchor<TAB>positive<TAB>negative lines (fields made one-line, TAB-free)."""
  path = files.as_path(path)
  path.parent.mkdir(parents=True, exist_ok=True)
  path.write_text("".join("\t".join(text_files.one_line(x) for x in t) + "\n"
                          for t in triplets), encoding="utf-8")


def read_tsv(path: str | pathlib.Path) -> tuple[list[Triplet], int]:
  """([(anchor, positive, negative)], blank lines skipped); see the module docstring."""
  rows, blank = text_files.read_tsv(files.as_path(path), 3, "anchor, positive, negative")
  return [tuple(r[1:]) for r in rows], blank


def pair_counts(counts: BuildCounts) -> pair_readers.PairCounts:
  """The build counts as read / kept / skipped by reason."""
  return pair_readers.PairCounts(read=counts.pairs, kept=counts.kept, skipped=collections.Counter(
      {"score_below_high": counts.not_high, "identical_sentences": counts.skipped_identical}))


def read_triplet_splits(triplets: str, data_dir: str
                        ) -> dict[str, tuple[list[Triplet], pair_readers.PairCounts]]:
  """split -> (triplets, counts); `triplets` = "stsb" (data_dir/stsb train, dev) or a TSV dir."""
  if triplets == "stsb":
    built = {split: stsb_triplets(files.as_path(data_dir, "stsb"), STSB_SPLITS[split])
             for split in ("train", "validation")}
    for split, (_, counts) in built.items():
      logging.info("%s %s from STSb: %s", TASK, split, counts)
    return {split: (rows, pair_counts(counts)) for split, (rows, counts) in built.items()}
  splits = {}
  for split in ("train", "validation"):
    path = files.as_path(triplets, f"{split}.tsv")
    if not path.is_file():
      raise FileNotFoundError(f"{path} not found: triplet_tasks.triplets is 'stsb' or a "
                              "directory with train.tsv and validation.tsv (anchor<TAB>"
                              "positive<TAB>negative; python -m vmsst_tasks.triplets writes them).")
    rows, blank = read_tsv(path)
    logging.info("%s %s: %d triplets, %d blank lines skipped", TASK, split, len(rows), blank)
    splits[split] = (rows, pair_readers.PairCounts(read=len(rows) + blank, kept=len(rows),
                                              skipped=collections.Counter(blank_line=blank)))
  return splits


MSMARCO_SPLITS = {"train": 487_983, "validation": 4_200, "test": 7_000}


def msmarco_splits(path: str | pathlib.Path, sizes: dict[str, int] = MSMARCO_SPLITS
                   ) -> dict[str, list[Triplet]]:
  """The paper's train / validation / test triplets of an msmarco-triplets.jsonl(.gz) file.

  Train and validation take each sample's first positive and first negative
  ("we simply select the very first positive and the very first negative");
  test takes every positive x negative of the last `sizes["test"]` samples.

  Raises:
    ValueError: a line that is not a {"query", "pos", "neg"} object (file and
      line named), or fewer samples than the splits need.
  """
  samples = []
  with files.open_text(path) as f:
    for number, line in enumerate(f, 1):
      try:
        sample = json.loads(line)
        samples.append((sample["query"], list(sample["pos"]), list(sample["neg"])))
      except (ValueError, KeyError, TypeError):
        raise ValueError(f"{path}:{number}: expected a JSON object with \"query\", \"pos\" "
                         "and \"neg\" (the sentence-transformers msmarco-triplets format)."
                         ) from None
  train, validation, test = sizes["train"], sizes["validation"], sizes["test"]
  if len(samples) < train + validation + test:
    raise ValueError(f"{path}: {len(samples)} samples, fewer than the {train} + {validation} + "
                     f"{test} the splits take.")
  first = lambda rows: [(q, pos[0], neg[0]) for q, pos, neg in rows if pos and neg]
  return {"train": first(samples[:train]),
          "validation": first(samples[train:train + validation]),
          "test": [(q, p, n) for q, pos, neg in samples[len(samples) - test:]
                   for p in pos for n in neg]}
