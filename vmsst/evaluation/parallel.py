"""Retrieval between any two line-aligned files, and the xsim error rate it rests on.

For data that has no suite: `python -m vmsst.evaluate --suite=parallel
--src=a.txt --trg=b.txt` embeds both files (line i of one translates line i
of the other) and retrieves, for every source line, the nearest target line
(src2trg) and back (trg2src).

xsim is LASER's error rate of that retrieval (Heffernan et al. 2022, the
`xsim.py` of facebookresearch/LASER): the fraction of lines whose retrieved
partner is not the aligned line, scored strictly by line index (a duplicate
of the gold sentence elsewhere in the file counts as an error; ties go to the
lower index). Two scorings, as LASER offers:
  * cosine: the nearest neighbour by cosine. Retrieval accuracy is then
    100 - xsim, reported as well because it is what Tatoeba tables show.
  * margin: the k = 4 nearest by cosine are rescored by the ratio margin
    cos(x, y) / avg(x, y) of Artetxe & Schwenk (2019) and the best is kept,
    i.e. `bitext.candidates(..., "ratio", "forward")` (k is capped at the
    number of lines, as LASER's min(k, n)).
Both go through `vmsst.mining.bitext.neighbourhoods`, so neighbour search is
`neighbors.knn`'s bounded-memory one.
"""

import pathlib
from typing import Mapping

import numpy as np
from absl import logging

from vmsst.base import files
from vmsst.mining import bitext
from vmsst.encoding import protocol
from vmsst.base import text_files

MARGIN_K = 4  # LASER xsim's neighbourhood size for the margin.
_SCORINGS = {"": "cosine", "_margin": "ratio"}  # result-key suffix -> mining scoring


def xsim_errors(source: np.ndarray, target: np.ndarray, *, k: int = MARGIN_K) -> dict:
  """xsim error rates ×100 of line-aligned embeddings, both ways.

  Args:
    source: float [n, d]; row i is aligned with target row i.
    target: float [n, d].
    k: margin neighbourhood size (capped at n).

  Returns:
    {"forward": source->target cosine error, "backward": target->source,
     "forward_margin", "backward_margin": the ratio-margin errors, "k": k used}.
  """
  if len(source) != len(target) or not len(source):
    raise ValueError(f"xsim needs two equally long non-empty sides, got {len(source)} and "
                     f"{len(target)} rows.")
  k = min(k, len(source))
  hood = bitext.neighbourhoods(source, target, k)
  errors = {"k": k}
  for suffix, scoring in _SCORINGS.items():
    for retrieval in ("forward", "backward"):
      # One candidate per query row, as (source row, target row): right iff they are equal.
      pairs, _ = bitext.candidates(hood, scoring, retrieval)
      errors[retrieval + suffix] = 100 * float(np.mean(pairs[:, 0] != pairs[:, 1]))
  return errors


def read_aligned(src: str | pathlib.Path, trg: str | pathlib.Path) -> tuple[list[str], list[str]]:
  """The lines of two files that must be line-aligned and non-empty.

  Raises:
    FileNotFoundError: a file is missing.
    ValueError: naming both files and their line counts, when the counts differ
      or a file has no line.
  """
  paths = [files.as_path(src), files.as_path(trg)]
  for path, flag in zip(paths, ("--src", "--trg")):
    if not path.is_file():
      raise FileNotFoundError(f"{flag}={path}: no such file.")
  source, target = (text_files.read_lines(path) for path in paths)
  empty = [str(path) for path, lines in zip(paths, (source, target)) if not lines]
  if empty:
    raise ValueError(f"{' and '.join(empty)}: empty ({paths[0]} has {len(source)} lines, "
                     f"{paths[1]} has {len(target)}); give one sentence per line.")
  if len(source) != len(target):
    raise ValueError(f"{paths[0]} has {len(source)} lines but {paths[1]} has {len(target)}; "
                     "line i of one must translate line i of the other (one sentence per line, "
                     "no extra blank line).")
  return source, target


def evaluate(encoder: protocol.UniqueSentences, src: str | pathlib.Path,
             trg: str | pathlib.Path, *, k: int = MARGIN_K,
             languages: tuple[str | None, str | None] = (None, None)) -> dict:
  """Retrieval accuracy and xsim ×100 between two aligned files, both directions.

  `languages` (of src, of trg) pick a two-tower encoder's tower for each file
  (`protocol.tower_of`; None: tower a).

  Returns:
    {"src", "trg": the paths, "n": lines, "k": margin neighbourhood,
     "src2trg": {"accuracy", "xsim", "xsim_margin"}, "trg2src": {...}}.
  """
  source, target = read_aligned(src, trg)
  errors = xsim_errors(encoder.encode(source, desc="parallel src", language=languages[0]),
                       encoder.encode(target, desc="parallel trg", language=languages[1]), k=k)
  results = {"src": str(src), "trg": str(trg), "n": len(source), "k": errors["k"]}
  for name, retrieval in (("src2trg", "forward"), ("trg2src", "backward")):
    results[name] = {"accuracy": 100 - errors[retrieval], "xsim": errors[retrieval],
                     "xsim_margin": errors[retrieval + "_margin"]}
  logging.info("parallel %s <-> %s: %d lines, xsim %.1f / %.1f", src, trg, len(source),
               results["src2trg"]["xsim"], results["trg2src"]["xsim"])
  return results


def table(results: Mapping) -> str:
  """Markdown: one row per direction."""
  rows = [f"`{results['src']}` ↔ `{results['trg']}`, {results['n']} lines; xsim = error rate, "
          f"margin = ratio margin over k = {results['k']} neighbours.", "",
          "| direction | accuracy | xsim (cosine) | xsim (margin) |", "|---|---:|---:|---:|"]
  for name in ("src2trg", "trg2src"):
    r = results[name]
    rows.append(f"| {name} | {r['accuracy']:.1f} | {r['xsim']:.1f} | {r['xsim_margin']:.1f} |")
  return "\n".join(rows)
