r"""Pairs with mined hard negatives, (a, b, negatives…): the file format and its reader (the
seqio task over it: registry/hard_negatives.py).

`python -m vmsst.hard_negatives` writes a directory:

  train.tsv    lang_a<TAB>lang_b<TAB>a<TAB>b<TAB>n_1<TAB>…<TAB>n_K, one training
               pair a line; n_1..n_K are sentences in b's language mined
               for a (nearest first), a field left empty where fewer than K
               passed the filters
  mining.json  {"negatives": K, the model, the filters, the counts}

The task `vmsst_hard_negatives` (tasks/registry/hard_negatives.py,
hard_negative_tasks, which holds its seqio source and preprocessors; this
module imports no TensorFlow, so the command that writes the format does not
either) reads it as the pair tasks read pairs, plus
`tokens_negative` int32 [K·L]: negative k tokenized, cut to L − 1 pieces, EOS,
0-padded to L, at [k·L, (k+1)·L); an empty one is all zeros, which the
objectives mask out. K = 1 is the triplet tasks' feature (tasks/registry/triplets.py),
so the contrastive objectives read both. The negatives are columns of
the pair's own example, so shuffling, batching, sharding and a restored data
position move them with their pair, never apart (tests/tasks/test_hard_negative_task.py).

Bad input under the project's policy (tasks/sources/pair_readers.py, `InputPolicy`): a
blank line is skipped; a line without K + 4 fields or with an empty a, b or
language is skipped as "malformed" (an error naming file, line and fix under
InputPolicy.strict); a pair with a Tatoeba test sentence on a side or
among its negatives as "tatoeba_overlap"; all counted and reported like
every task's.
"""

import json
from typing import AbstractSet, NamedTuple, Sequence

from absl import logging

from vmsst_tasks.sources import pair_readers
from vmsst.base import files
from vmsst.base import text_files

TASK = "vmsst_hard_negatives"
ROWS, MANIFEST = "train.tsv", "mining.json"
_FIX = "re-run python -m vmsst.hard_negatives to write it again"


class Row(NamedTuple):
  """One training pair and the negatives mined for its side a (in side b's language)."""
  text_a: str
  text_b: str
  lang_a: str
  lang_b: str
  negatives: tuple[str, ...]


def write(directory: str, rows: Sequence[Row], negatives: int, manifest: dict) -> None:
  """Writes train.tsv (every row padded to `negatives` fields) and mining.json."""
  lines = []
  for row in rows:
    padded = tuple(row.negatives) + ("",) * (negatives - len(row.negatives))
    fields = (row.lang_a, row.lang_b, row.text_a, row.text_b, *padded)
    lines.append("\t".join(text_files.one_line(x) for x in fields) + "\n")
  files.makedirs(directory)
  files.write_text(files.join(directory, ROWS), "".join(lines))
  files.write_text(files.join(directory, MANIFEST),
                   json.dumps({"negatives": negatives, **manifest}, indent=1) + "\n")


def read_manifest(directory: str) -> dict:
  """mining.json of a directory `python -m vmsst.hard_negatives` wrote.

  Raises:
    FileNotFoundError / ValueError: naming the file and the fix.
  """
  path = files.join(directory, MANIFEST)
  if not files.isfile(path):
    raise FileNotFoundError(f"{path} not found: hard_negative_tasks.negatives_dir is a "
                            "directory written by python -m vmsst.hard_negatives.")
  try:
    manifest = json.loads(files.read_text(path))
    if int(manifest["negatives"]) < 1:
      raise ValueError
  except (ValueError, KeyError, TypeError):
    raise ValueError(f"{path}: expected a JSON object whose \"negatives\" is K >= 1; "
                     f"{_FIX}.") from None
  return manifest


def read(directory: str, *, exclude: AbstractSet[str] = frozenset(),
         policy: pair_readers.InputPolicy = pair_readers.DEFAULT_POLICY
         ) -> tuple[list[Row], int, pair_readers.PairCounts]:
  """(rows, K, counts) of a hard-negatives directory; see the module docstring."""
  negatives = int(read_manifest(directory)["negatives"])
  path = files.join(directory, ROWS)
  if not files.isfile(path):
    raise FileNotFoundError(f"{path} not found beside its {MANIFEST}; {_FIX}.")
  counts, rows = pair_readers.PairCounts(), []
  for number, line in enumerate(text_files.read_lines(path), 1):
    counts.read += 1
    reason = "blank_line" if not line.strip() else None
    fields = [x.strip() for x in line.split("\t")]
    if reason is None and (len(fields) != negatives + 4 or not all(fields[:4])):
      reason = "malformed"
      if policy.strict:
        raise ValueError(f"{path}:{number}: expected {negatives + 4} TAB-separated fields "
                         "(lang_a, lang_b, a, b and the negatives, empty ones allowed) with "
                         f"a, b and both languages non-empty; fix or delete the line, or {_FIX}.")
    if reason is None:
      row = Row(fields[2], fields[3], *(pair_readers.canonical_in_file(c, path) for c in fields[:2]),
                tuple(fields[4:]))
      if exclude and {row.text_a, row.text_b, *row.negatives} & exclude:
        reason = "tatoeba_overlap"
    if reason is not None:
      counts.skipped[reason] += 1
      if counts.skipped[reason] <= policy.log_first:
        logging.info("%s: skipped %s:%d (%s)", TASK, path, number, reason)
      continue
    counts.kept += 1
    rows.append(row)
  logging.info("%s", counts.report(TASK))
  return rows, negatives, counts
