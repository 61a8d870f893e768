"""OPUS corpora: discovery of Moses / TSV files in a directory and their pairs.

A corpus is `<corpus>.<l1>-<l2>.<l1>` + `.<l2>` (Moses, line-aligned) or
`<corpus>.<l1>-<l2>.tsv`, optionally gzipped, anywhere below the directory
(tasks/opus_download.py writes that layout). Pairs follow the bad-input
policy of tasks/sources/pair_readers.py (counted skips, `InputPolicy`); Moses sides of
different lengths are an error naming both files, never zip-truncated.
"""

import collections
import dataclasses
import functools
import itertools
import pathlib
import re
from typing import AbstractSet, Iterator, Sequence

from vmsst_tasks.sources import pair_readers

from vmsst.base import cli
from vmsst.base import files

LAYOUT = ("<corpus>.<l1>-<l2>.<l1> and .<l2> (Moses), or <corpus>.<l1>-<l2>.tsv, optionally .gz; "
          "any corpus name, language codes as in vmsst.base.languages (de or deu, zh_cn)")


@dataclasses.dataclass(frozen=True)
class OpusFile:
  """One parallel corpus found in an OPUS directory.

  Attributes:
    paths: (side-1 file, side-2 file) in Moses format, or (tsv file,).
    lang_a, lang_b: canonical codes of the two sides, in file-name order.
  """
  paths: tuple[pathlib.Path, ...]
  lang_a: str
  lang_b: str

  @property
  def name(self) -> str:
    return "+".join(p.name for p in self.paths)


_OPUS_NAME = re.compile(r"^(?P<corpus>.+)\.(?P<pair>[^.]+-[^.]+)\.(?P<ext>[^.]+)(?P<gz>\.gz)?$")


def _split_pair(pair: str, ext: str, path: pathlib.Path) -> tuple[str, str] | None:
  """Splits "l1-l2" (codes may hold '-' too); None if `ext` names no side."""
  if ext != "tsv":
    if pair.startswith(ext + "-"):
      return ext, pair[len(ext) + 1:]
    if pair.endswith("-" + ext):
      return pair[:-len(ext) - 1], ext
    return None
  known = [(pair[:i], pair[i + 1:]) for i, c in enumerate(pair) if c == "-"
           and pair_readers.is_known_language(pair[:i]) and pair_readers.is_known_language(pair[i + 1:])]
  if len(known) == 1:
    return known[0]
  if pair.count("-") == 1:  # Unknown codes: let _canonical_in_file name them.
    return tuple(pair.split("-"))
  raise ValueError(f"{path}: cannot tell the two language codes apart in {pair!r}; rename "
                   "the file to <corpus>.<l1>-<l2>.tsv with codes free of '-' (e.g. zh_cn).")


def discover_opus(opus_dir: pair_readers.PathLike) -> list[OpusFile]:
  """Finds Moses (`<c>.<l1>-<l2>.<l1>` + `.<l2>`) and TSV (`<c>.<l1>-<l2>.tsv`) files.

  Searches `opus_dir` recursively; `.gz` is optional. Other files (README,
  .ids, .xml) are ignored.

  Raises:
    ValueError: unknown language code in a file name, or a Moses side whose
      partner file is missing.
  """
  root = files.as_path(opus_dir)
  if not root.is_dir():
    raise FileNotFoundError(f"OPUS directory {root} does not exist: give the directory that "
                            f"holds the files ({LAYOUT}).")
  found, moses = [], collections.defaultdict(dict)
  for path in map(files.as_path, files.find(root)):
    match = _OPUS_NAME.match(path.name)
    sides = match and _split_pair(match["pair"], match["ext"], path)
    if not sides:
      continue
    lang_a, lang_b = (pair_readers.canonical_in_file(code, path) for code in sides)
    if match["ext"] == "tsv":
      found.append(OpusFile((path,), lang_a, lang_b))
    else:
      moses[(path.parent, match["corpus"], match["pair"], sides)][match["ext"]] = path
  for (parent, corpus, pair, sides), by_side in moses.items():
    missing = [s for s in sides if s not in by_side]
    if missing:
      present = next(iter(by_side.values()))
      partner = parent / f"{corpus}.{pair}.{missing[0]}"
      raise ValueError(f"OPUS Moses file {present} has no partner {partner}[.gz]: add it, or "
                       "remove the lone side.")
    found.append(OpusFile((by_side[sides[0]], by_side[sides[1]]),
                          *(pair_readers.canonical_in_file(s, by_side[s]) for s in sides)))
  return sorted(found, key=lambda f: f.paths)


def count_lines(path: pair_readers.PathLike) -> int:
  """Number of lines (a last line without "\\n" counts), read in binary blocks.

  Counted once per process for a file of the same size and time (`train`
  counts in its preflight, then again where it registers the tasks).
  """
  path = files.as_path(path)
  stat = path.stat()
  return _count_lines(str(path), stat.length, stat.mtime)


@functools.lru_cache(maxsize=4096)
def _count_lines(path: str, length: int, mtime: float) -> int:
  del length, mtime  # the cache key: a changed file is counted again
  count, last = 0, b"\n"
  with files.open_compressed(path) as f:
    while block := f.read(1 << 20):
      count += block.count(b"\n")
      last = block[-1:]
  return count + (last != b"\n")


def check_moses_line_counts(corpus: OpusFile) -> int:
  """Line count of a Moses pair (of a TSV file); raises if the sides differ."""
  counts = [count_lines(p) for p in corpus.paths]
  if len(set(counts)) != 1:
    raise ValueError(f"Moses files are not line-aligned: {corpus.paths[0]} has {counts[0]} lines "
                     f"but {corpus.paths[1]} has {counts[1]}; {_FIX_ALIGNMENT}.")
  return counts[0]


_FIX_ALIGNMENT = "re-extract the corpus"  # line i of each side must translate line i of the other


def checked_corpora(opus_dir: pair_readers.PathLike,
                    ) -> dict[tuple[str, str], list[tuple[OpusFile, int]]]:
  """An OPUS directory's corpora by language pair, each with its line count, checked.

  The one check of an OPUS directory before any sentence is read, shared by
  `train` (its preflight, before the model state, and its registration) and
  `vocabulary`, so both refuse the same input with the same line.

  Raises:
    cli.UserError: naming the directory or file and the fix: the directory is
      missing or holds no OPUS file, a language code is unknown, a Moses side
      has no partner or another line count, every file is empty.
  """
  try:
    found = discover_opus(opus_dir)
    by_pair = collections.defaultdict(list)
    for corpus in found:
      by_pair[(corpus.lang_a, corpus.lang_b)].append((corpus, check_moses_line_counts(corpus)))
  except (FileNotFoundError, ValueError) as e:  # each message names the file and the fix
    raise cli.UserError(str(e)) from None
  if not found:
    raise cli.UserError(f"No OPUS files under {opus_dir}: name them {LAYOUT}; or pass the "
                        "directory `python -m vmsst_tasks.opus_download` wrote.")
  if not any(lines for corpora in by_pair.values() for _, lines in corpora):
    raise cli.UserError(f"{opus_dir}: no usable OPUS pair ({len(found)} files, 0 lines): every "
                        "file is empty; download the corpora again (python -m "
                        "vmsst_tasks.opus_download) or fix the directory.")
  return dict(sorted(by_pair.items()))


def _moses_raw(corpus: OpusFile, strict: bool) -> Iterator[pair_readers.Located]:
  """Pairs of line i of both sides; a side that is not UTF-8 skips the pair (not the file)."""
  path_a, path_b = corpus.paths
  num_a = num_b = 0
  lines = itertools.zip_longest(pair_readers.decode_lines(path_a, strict=strict),
                                pair_readers.decode_lines(path_b, strict=strict))
  for line_a, line_b in lines:
    num_a, num_b = num_a + (line_a is not None), num_b + (line_b is not None)
    if type(line_a) is str and type(line_b) is str:  # pylint: disable=unidiomatic-typecheck
      yield pair_readers.Pair(line_a, line_b, corpus.lang_a, corpus.lang_b), path_a, num_a
    elif line_a is not None and line_b is not None:
      yield pair_readers._pair_or_skip(line_a, line_b, corpus.lang_a, corpus.lang_b), path_a, num_a
  if num_a != num_b:
    raise ValueError(f"Moses files are not line-aligned: {path_a} has {num_a} lines "
                     f"but {path_b} has {num_b}; {_FIX_ALIGNMENT}.")


def _tsv_raw(corpus: OpusFile, strict: bool) -> Iterator[pair_readers.Located]:
  path = corpus.paths[0]
  for number, line in enumerate(pair_readers.decode_lines(path, strict=strict), 1):
    if isinstance(line, pair_readers.Skip):
      yield line, path, number
      continue
    fields = line.split("\t")
    if len(fields) == 2:
      yield pair_readers.Pair(fields[0], fields[1], corpus.lang_a, corpus.lang_b), path, number
      continue
    reason = "no_tab" if len(fields) == 1 else "extra_tab"
    where = f"{path}, line {number}: {len(fields) - 1} tabs, expected one (text_a<TAB>text_b)"
    if strict:
      raise ValueError(f"{where}; fix or delete the line, {pair_readers._NOT_STRICT}.")
    yield pair_readers.Skip(reason, where), path, number


def opus_pairs(corpora: Sequence[OpusFile], *, counts: pair_readers.PairCounts | None = None,
               exclude: AbstractSet[str] = frozenset(), name: str = "opus",
               policy: pair_readers.InputPolicy = pair_readers.DEFAULT_POLICY) -> Iterator[pair_readers.Pair]:
  """Pairs of the given OPUS corpora, one file after the other.

  Raises:
    ValueError: (at the end of a Moses pair) if its sides differ in length;
      (policy.strict) on a malformed line.
  """
  def raw() -> Iterator[pair_readers.Located]:
    for corpus in corpora:
      read = _tsv_raw if len(corpus.paths) == 1 else _moses_raw
      yield from read(corpus, policy.strict)
  return pair_readers.read_pairs(raw(), name=name, counts=counts, exclude=exclude, policy=policy)
