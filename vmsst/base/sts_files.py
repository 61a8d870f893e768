"""Readers of the STS data formats, shared by the STS benchmarks and the task builders.

SemEval STS (2012–2017) input/gold file pairs, the STS Benchmark's TAB-only
".csv", and STSb-multi-mt's gzipped real CSV (rows aligned across languages).
Each returns `ScoredPairs`; bad lines raise ValueError naming file and line.
"""

import csv
import dataclasses
import pathlib
import re

import numpy as np

from vmsst.base import files
from vmsst.base import text_files

# SemEval 2017 names a track file track<N>[a-z].<l1>-<l2>; column 1 is in l1.
_STS17_NAME = re.compile(r"^track\d+[a-z]?\.([a-z]{2,3})-([a-z]{2,3})$")
STSB_SPLITS = ("train", "dev", "test")
# STSb-multi-mt's languages: the English STS Benchmark and its machine translations.
STSB_MULTI_MT_LANGUAGES = ("de", "en", "es", "fr", "it", "ja", "nl", "pl", "pt", "ru", "zh")
Path = str | pathlib.Path


def _existing(path: pathlib.Path) -> pathlib.Path:
  if not path.is_file():
    raise FileNotFoundError(f"{path} not found; the STS files are in ../shared/data "
                            "(see the folder's SOURCE.md).")
  return path


@dataclasses.dataclass(frozen=True)
class ScoredPairs:
  """Sentence pairs with gold similarity: what every reader here returns.

  Attributes:
    sentences1: n first sentences.
    sentences2: n second sentences; sentences2[i] is paired with sentences1[i].
    gold: float64 [n] gold similarity (0–5 in every set here).
    unscored: pairs the source lists without a gold score; they are dropped.
  """

  sentences1: list[str]
  sentences2: list[str]
  gold: np.ndarray
  unscored: int = 0
  # STSb only: each row's sub-corpus (the `file` column, e.g. "MSRvid").
  source_files: list[str] | None = None


def read_semeval_files(input_path: Path, gold_path: Path, *,
                       input_lines: int | None = None) -> ScoredPairs:
  """One SemEval STS set: line i of the input pairs with line i of the gold.

  Input lines are sentence1<TAB>sentence2, further columns (STS16's source
  notes) ignored. A blank gold line marks an unscored pair, which is dropped
  and counted, as SentEval does. `input_lines` reads only the input's first
  lines, for a release known to ship more inputs than gold (sts.py decides).

  Raises:
    ValueError: naming the file, 1-based line and the fix, when the files are
      not line-aligned, a gold line is not a number, or a scored input line
      has fewer than two columns.
  """
  input_path, gold_path = files.as_path(input_path), files.as_path(gold_path)
  inputs, golds = text_files.read_lines(input_path), text_files.read_lines(gold_path)
  inputs = inputs[:input_lines]
  if len(inputs) != len(golds):
    raise ValueError(
        f"{gold_path} has {len(golds)} lines but {input_path} has {len(inputs)}: line "
        f"{min(len(inputs), len(golds)) + 1} has no partner. Give every input line one gold line "
        "(blank for an unscored pair).")
  first, second, gold = [], [], []
  for number, (line, score) in enumerate(zip(inputs, golds), start=1):
    if not score.strip():
      continue
    try:
      gold.append(float(score))
    except ValueError:
      raise ValueError(f"{gold_path} line {number}: gold {score!r} is not a number; write a "
                       "score or leave the line blank to drop the pair.") from None
    columns = line.split("\t")
    if len(columns) < 2:
      raise ValueError(f"{input_path} line {number}: expected sentence1<TAB>sentence2, found "
                       f"{len(columns)} column; fix the tab or blank line {number} of "
                       f"{gold_path.name} to drop the pair.")
    first.append(columns[0])
    second.append(columns[1])
  return ScoredPairs(first, second, np.asarray(gold, np.float64), len(inputs) - len(gold))


def read_semeval_folder(folder: Path) -> dict[str, ScoredPairs]:
  """Every `STS.input.<name>.txt` + `STS.gs.<name>.txt` in a folder, keyed by name, sorted."""
  folder = files.as_path(folder)
  inputs = sorted(folder.glob("STS.input.*.txt"))
  if not inputs:
    raise ValueError(f"{folder} holds no STS.input.<name>.txt files; pass a SemEval STS folder "
                     "(e.g. <data>/sts12-16/raw/STS12).")
  sets = {}
  for input_path in inputs:
    name = input_path.name[len("STS.input."):-len(".txt")]
    gold_path = folder / f"STS.gs.{name}.txt"
    if not gold_path.is_file():
      raise ValueError(f"{input_path} has no gold file; expected {gold_path}.")
    sets[name] = read_semeval_files(input_path, gold_path)
  return sets


def sts17_languages(name: str) -> tuple[str, str]:
  """("ar", "en") for the SemEval 2017 set name "track2.ar-en": column 1's language first."""
  match = _STS17_NAME.match(name)
  if not match:
    raise ValueError(f"STS.input.{name}.txt: cannot read a language pair from the name; "
                     "rename it STS.input.track<N>.<l1>-<l2>.txt (e.g. track4a.es-en) with "
                     "column 1 in l1 and column 2 in l2.")
  return match.group(1), match.group(2)


def read_stsb(folder: Path, split: str) -> ScoredPairs:
  """STS Benchmark `sts-<split>.csv`: TAB-separated, score column 5, sentences 6 and 7.

  Split on TAB only: sentences hold unbalanced quotes, so CSV quoting would
  merge lines, and some lines carry two trailing source columns (ignored).
  """
  path = _existing(files.as_path(folder) / f"sts-{split}.csv")
  first, second, gold, sources = [], [], [], []
  for number, line in enumerate(text_files.read_lines(path), start=1):
    columns = line.split("\t")
    if len(columns) < 7:
      raise ValueError(f"{path} line {number}: {len(columns)} TAB-separated columns, need 7 "
                       "(genre, file, year, id, score, sentence1, sentence2).")
    try:
      gold.append(float(columns[4]))
    except ValueError:
      raise ValueError(f"{path} line {number}: score {columns[4]!r} in column 5 is not a "
                       "number.") from None
    first.append(columns[5])
    second.append(columns[6])
    sources.append(columns[1])
  return ScoredPairs(first, second, np.asarray(gold, np.float64), source_files=sources)


def read_stsb_multi_mt(folder: Path, language: str, split: str) -> ScoredPairs:
  """STSb Multi MT `stsb-<language>-<split>.csv.gz`: CSV rows sentence1, sentence2, score."""
  path = _existing(files.as_path(folder) / f"stsb-{language}-{split}.csv.gz")
  first, second, gold = [], [], []
  with files.open_text(path, "rt", newline="") as f:
    reader = csv.reader(f)
    for row in reader:
      try:
        sentence1, sentence2, score = row
        gold.append(float(score))
      except ValueError:
        raise ValueError(f"{path} line {reader.line_num}: expected 3 CSV fields sentence1, "
                         f"sentence2, numeric score; found {row!r}.") from None
      first.append(sentence1)
      second.append(sentence2)
  return ScoredPairs(first, second, np.asarray(gold, np.float64))


def check_aligned(reference: ScoredPairs, other: ScoredPairs, what: str) -> None:
  """Raises unless `other` has the same gold, row by row, as `reference` (rows aligned)."""
  if len(other.gold) != len(reference.gold):
    raise ValueError(f"{what}: {len(other.gold)} rows but English has {len(reference.gold)}; "
                     "the language files must be row-aligned.")
  differ = np.flatnonzero(other.gold != reference.gold)
  if differ.size:
    row = int(differ[0])
    raise ValueError(f"{what} row {row + 1}: score {other.gold[row]} but English has "
                     f"{reference.gold[row]}; rows are not aligned ({differ.size} differ).")
