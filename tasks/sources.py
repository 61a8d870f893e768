"""File readers: NTREX-128, Multi30k, OPUS Moses/TSV and the Tatoeba filter.

Every reader yields `Pair`s with canonical language codes (vmsst.languages) and
fills a `PairCounts`: read = kept + sum(skipped), with one counter per skip
reason, so no line is ever dropped silently. When a pass over the files ends,
`read_pairs` logs a one-line report. These readers are plain Python (no
TensorFlow): tasks/registry.py turns them into seqio data sources.
"""

import collections
import dataclasses
import gzip
import hashlib
import io
import itertools
import os
import pathlib
import re
from typing import AbstractSet, Iterable, Iterator, NamedTuple, Sequence

from absl import logging

from vmsst import languages

PathLike = str | os.PathLike

NTREX_DIR = "ntrex128"
MULTI30K_DIR = "multi30k"
TATOEBA_DIR = "tatoeba/v1"
# Spanish is a second pivot because NTREX is translated from English only: a
# spa-xx pair teaches alignment that does not route through English.
NTREX_PIVOTS = ("eng", "spa")
NTREX_VALIDATION_FRACTION = 0.1
# Fixed salt, independent of the training seed, so the validation documents
# never change between runs.
_NTREX_SPLIT_SALT = "vmsst-ntrex-validation-v1"
MULTI30K_LANGUAGES = {"en": "eng", "de": "deu", "fr": "fra", "cs": "ces"}
MULTI30K_SPLITS = {"train": "train", "validation": "val"}


class Pair(NamedTuple):
  """One translation pair; codes are canonical (e.g. "eng", "zho-CN")."""
  text_a: str
  text_b: str
  lang_a: str
  lang_b: str


class Skip(NamedTuple):
  """A line a raw reader could not turn into a pair, with the reason."""
  reason: str


@dataclasses.dataclass
class PairCounts:
  """What one pass over a source read, kept and skipped (by reason)."""
  read: int = 0
  kept: int = 0
  skipped: collections.Counter = dataclasses.field(default_factory=collections.Counter)

  def report(self, name: str) -> str:
    reasons = ", ".join(f"{r}={n}" for r, n in sorted(self.skipped.items())) or "none"
    skipped = sum(self.skipped.values())
    return f"{name}: read={self.read} kept={self.kept} skipped={skipped} ({reasons})"


def open_text(path: PathLike) -> io.TextIOBase:
  """Opens plain or .gz UTF-8 text; lines split on "\\n" only.

  newline="\\n" keeps a stray "\\r" inside a line from splitting it (universal
  newlines would, and misalign parallel files); callers strip the "\\r" of CRLF.
  """
  raw = gzip.open(path, "rb") if str(path).endswith(".gz") else open(path, "rb")
  return io.TextIOWrapper(raw, encoding="utf-8", newline="\n")


def read_lines(path: PathLike) -> list[str]:
  """All lines of a file, whitespace-stripped (removes CRLF and trailing spaces)."""
  with open_text(path) as f:
    return [line.strip() for line in f]


def read_pairs(raw: Iterable[Pair | Skip], *, name: str, counts: PairCounts | None = None,
               exclude: AbstractSet[str] = frozenset()) -> Iterator[Pair]:
  """Counts and filters raw pairs; logs the report once the pass ends.

  A pair is skipped with reason "empty_side" if a side is empty after strip,
  "tatoeba_overlap" if a stripped side is in `exclude`; a `Skip` is counted
  under its own reason.
  """
  counts = PairCounts() if counts is None else counts
  for item in raw:
    counts.read += 1
    if isinstance(item, Skip):
      counts.skipped[item.reason] += 1
      continue
    pair = item._replace(text_a=item.text_a.strip(), text_b=item.text_b.strip())
    if not pair.text_a or not pair.text_b:
      counts.skipped["empty_side"] += 1
    elif pair.text_a in exclude or pair.text_b in exclude:
      counts.skipped["tatoeba_overlap"] += 1
    else:
      counts.kept += 1
      yield pair
  logging.info("%s", counts.report(name))


# ---------------------------------------------------------------- Tatoeba filter


def tatoeba_test_sentences(data_dir: PathLike) -> frozenset[str]:
  """Every stripped line of every tatoeba/v1/tatoeba.* file (both sides)."""
  files = sorted(pathlib.Path(data_dir, TATOEBA_DIR).glob("tatoeba.*"))
  if not files:
    raise FileNotFoundError(
        f"No tatoeba.* files in {pathlib.Path(data_dir, TATOEBA_DIR)}: the Tatoeba filter "
        "needs them (pass the right --data_dir).")
  return frozenset(line for path in files for line in read_lines(path) if line)


# ----------------------------------------------------------------------- NTREX


def ntrex_documents(data_dir: PathLike) -> list[str]:
  """Document id of every NTREX line (1,997 entries, DOCUMENT_IDS.tsv)."""
  path = pathlib.Path(data_dir, NTREX_DIR, "DOCUMENT_IDS.tsv")
  return [line.split("\t")[0] for line in read_lines(path)]


def _stable_hash(*parts: object) -> int:
  """A 64-bit hash that, unlike hash(), is the same in every process."""
  digest = hashlib.blake2b("\x1f".join(map(str, parts)).encode(), digest_size=8).digest()
  return int.from_bytes(digest, "big")


def ntrex_validation_documents(data_dir: PathLike) -> frozenset[str]:
  """The ~10% of NTREX documents held out: those with the smallest salted hash."""
  docs = sorted(set(ntrex_documents(data_dir)))
  num = round(NTREX_VALIDATION_FRACTION * len(docs))
  return frozenset(sorted(docs, key=lambda d: _stable_hash(_NTREX_SPLIT_SALT, d))[:num])


def ntrex_pivot(line: int, language: str, seed: int) -> str:
  """The pivot ("eng" or "spa") paired with `language` on `line`, statelessly.

  spa-MX always pivots on English: spa/spa-MX is the same language.
  """
  if language == "spa-MX":
    return "eng"
  return NTREX_PIVOTS[_stable_hash(seed, line, language) % 2]


def ntrex_files(data_dir: PathLike) -> dict[str, pathlib.Path]:
  """Canonical language -> NTREX file, for the languages used in training.

  Excluded: the eng-GB/IN/US rewrites of the source and ref-2.spa (a second
  Spanish reference, 70% identical to ref.spa, that would only duplicate
  Spanish pairs). Regional variants (fra-CA, por-BR, spa-MX, zho-TW, srp-*)
  are languages of their own with their own symbols.
  """
  root = pathlib.Path(data_dir, NTREX_DIR)
  files = {"eng": root / "newstest2019-src.eng.txt.gz"}
  for path in sorted(root.glob("newstest2019-ref.*.txt.gz")):
    code = path.name[len("newstest2019-ref."):-len(".txt.gz")]
    if code in languages.NTREX_ENGLISH_REWRITES:
      continue
    canonical = languages.canonical_language(code)
    if canonical in files:
      raise ValueError(f"{path} and {files[canonical]} are both language {canonical}")
    files[canonical] = path
  if len(files) < 2:
    raise FileNotFoundError(f"No NTREX files under {root}: pass the right --data_dir.")
  return files


def _ntrex_raw(data_dir: PathLike, split: str, seed: int) -> Iterator[Pair]:
  """(pivot, xx) for every kept line and language xx, plus (eng, spa)."""
  if split not in ("train", "validation"):
    raise ValueError(f"NTREX split must be 'train' or 'validation', got {split!r}")
  documents = ntrex_documents(data_dir)
  held_out = ntrex_validation_documents(data_dir)
  texts = {lang: read_lines(path) for lang, path in ntrex_files(data_dir).items()}
  for lang, lines in texts.items():
    if len(lines) != len(documents):
      raise ValueError(f"NTREX {lang} has {len(lines)} lines, DOCUMENT_IDS.tsv {len(documents)}")
  for line, doc in enumerate(documents):
    if (doc in held_out) != (split == "validation"):
      continue
    yield Pair(texts["eng"][line], texts["spa"][line], "eng", "spa")
    for lang in texts:
      if lang not in NTREX_PIVOTS:
        pivot = ntrex_pivot(line, lang, seed)
        yield Pair(texts[pivot][line], texts[lang][line], pivot, lang)


def ntrex_pairs(data_dir: PathLike, split: str, *, seed: int = 0, counts: PairCounts | None = None,
                exclude: AbstractSet[str] = frozenset()) -> Iterator[Pair]:
  """NTREX-128 translation pairs of one split ("train" or "validation")."""
  return read_pairs(_ntrex_raw(data_dir, split, seed), name=f"ntrex128[{split}]",
                    counts=counts, exclude=exclude)


# -------------------------------------------------------------------- Multi30k


def _multi30k_raw(data_dir: PathLike, prefix: str) -> Iterator[Pair]:
  root = pathlib.Path(data_dir, MULTI30K_DIR)
  texts = {code: read_lines(root / f"{prefix}.{short}.gz")
           for short, code in MULTI30K_LANGUAGES.items()}
  lengths = {code: len(lines) for code, lines in texts.items()}
  if len(set(lengths.values())) != 1:
    raise ValueError(f"Multi30k {prefix}.* files are not line-aligned: {lengths}")
  codes = list(texts)
  for line in range(len(texts["eng"])):
    for i, code_a in enumerate(codes):
      for code_b in codes[i + 1:]:
        yield Pair(texts[code_a][line], texts[code_b][line], code_a, code_b)


def multi30k_pairs(data_dir: PathLike, split: str, *, counts: PairCounts | None = None,
                   exclude: AbstractSet[str] = frozenset()) -> Iterator[Pair]:
  """All 6 language pairs of every Multi30k line: train.* or (validation) val.*."""
  if split not in MULTI30K_SPLITS:
    raise ValueError(f"Multi30k split must be one of {sorted(MULTI30K_SPLITS)}, got {split!r}")
  return read_pairs(_multi30k_raw(data_dir, MULTI30K_SPLITS[split]), name=f"multi30k[{split}]",
                    counts=counts, exclude=exclude)


# ------------------------------------------------------------------------ OPUS


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
  known = [(pair[:i], pair[i + 1:]) for i, c in enumerate(pair)
           if c == "-" and _is_known(pair[:i]) and _is_known(pair[i + 1:])]
  if len(known) == 1:
    return known[0]
  if pair.count("-") == 1:  # Unknown codes: let _canonical_in_file name them.
    return tuple(pair.split("-"))
  raise ValueError(f"{path}: cannot tell the two language codes apart in {pair!r}; rename "
                   "the file to <corpus>.<l1>-<l2>.tsv with codes free of '-' (e.g. zh_cn).")


def _is_known(code: str) -> bool:
  try:
    languages.canonical_language(code)
    return True
  except ValueError:
    return False


def _canonical_in_file(code: str, path: pathlib.Path) -> str:
  try:
    return languages.canonical_language(code)
  except ValueError as e:
    raise ValueError(f"OPUS file {path}: language code {code!r} is unknown. {e}") from None


def discover_opus(opus_dir: PathLike) -> list[OpusFile]:
  """Finds Moses (`<c>.<l1>-<l2>.<l1>` + `.<l2>`) and TSV (`<c>.<l1>-<l2>.tsv`) files.

  Searches `opus_dir` recursively; `.gz` is optional. Other files (README,
  .ids, .xml) are ignored.

  Raises:
    ValueError: unknown language code in a file name, or a Moses side whose
      partner file is missing.
  """
  root = pathlib.Path(opus_dir)
  if not root.is_dir():
    raise FileNotFoundError(f"OPUS directory {root} does not exist")
  found, moses = [], collections.defaultdict(dict)
  for path in sorted(p for p in root.rglob("*") if p.is_file()):
    match = _OPUS_NAME.match(path.name)
    sides = match and _split_pair(match["pair"], match["ext"], path)
    if not sides:
      continue
    lang_a, lang_b = (_canonical_in_file(code, path) for code in sides)
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
                          *(_canonical_in_file(s, by_side[s]) for s in sides)))
  return sorted(found, key=lambda f: f.paths)


def count_lines(path: PathLike) -> int:
  """Number of lines (a last line without "\\n" counts), read in binary blocks."""
  opener = gzip.open if str(path).endswith(".gz") else open
  count, last = 0, b"\n"
  with opener(path, "rb") as f:
    while block := f.read(1 << 20):
      count += block.count(b"\n")
      last = block[-1:]
  return count + (last != b"\n")


def check_moses_line_counts(corpus: OpusFile) -> int:
  """Line count of a Moses pair (of a TSV file); raises if the sides differ."""
  counts = [count_lines(p) for p in corpus.paths]
  if len(set(counts)) != 1:
    raise ValueError(f"Moses files are not line-aligned: {corpus.paths[0]} has {counts[0]} lines "
                     f"but {corpus.paths[1]} has {counts[1]}; re-extract the corpus.")
  return counts[0]


def _moses_raw(corpus: OpusFile) -> Iterator[Pair]:
  path_a, path_b = corpus.paths
  num_a = num_b = 0
  with open_text(path_a) as fa, open_text(path_b) as fb:
    for line_a, line_b in itertools.zip_longest(fa, fb):
      num_a, num_b = num_a + (line_a is not None), num_b + (line_b is not None)
      if line_a is not None and line_b is not None:
        yield Pair(line_a, line_b, corpus.lang_a, corpus.lang_b)
  if num_a != num_b:
    raise ValueError(f"Moses files are not line-aligned: {path_a} has {num_a} lines "
                     f"but {path_b} has {num_b}; re-extract the corpus.")


def _tsv_raw(corpus: OpusFile) -> Iterator[Pair | Skip]:
  with open_text(corpus.paths[0]) as f:
    for line in f:
      fields = line.rstrip("\r\n").split("\t")
      if len(fields) == 2:
        yield Pair(fields[0], fields[1], corpus.lang_a, corpus.lang_b)
      else:
        yield Skip("no_tab" if len(fields) == 1 else "extra_tab")


def opus_pairs(corpora: Sequence[OpusFile], *, counts: PairCounts | None = None,
               exclude: AbstractSet[str] = frozenset(), name: str = "opus") -> Iterator[Pair]:
  """Pairs of the given OPUS corpora, one file after the other.

  Raises:
    ValueError: (at the end of a Moses pair) if its sides differ in length.
  """
  def raw() -> Iterator[Pair | Skip]:
    for corpus in corpora:
      yield from _tsv_raw(corpus) if len(corpus.paths) == 1 else _moses_raw(corpus)
  return read_pairs(raw(), name=name, counts=counts, exclude=exclude)
