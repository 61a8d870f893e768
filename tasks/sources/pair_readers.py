"""File readers: NTREX-128, Multi30k and the Tatoeba filter (OPUS: tasks/sources/opus_readers.py).

Every reader yields `Pair`s with canonical language codes (vmsst.base.languages) and
fills a `PairCounts`: read = kept + sum(skipped), with one counter per skip
reason, so no line is ever dropped silently. When a pass over the files ends,
`read_pairs` logs a one-line report (and the first few skips of each reason
with file:line). These readers are plain Python (no TensorFlow):
tasks/registry/ turns them into seqio data sources and reports the totals of
a mixture (`data_counts.report_data_counts`, also MODEL_DIR/data_counts.json).

Bad input policy (`InputPolicy`; rows marked * become errors with strict=True):

  input                                      | what happens                 | counted as
  -------------------------------------------|------------------------------|----------------
  * TSV line without a tab                   | skipped                      | no_tab
  * TSV line with two or more tabs           | skipped                      | extra_tab
  * line that is not valid UTF-8             | skipped (the whole pair);    | invalid_utf8
                                             | each line decodes alone, so  |
                                             | the rest of the file is kept |
  empty side (after stripping whitespace)    | skipped                      | empty_side
  side longer than max_chars characters      | skipped (shorter lines are   | overlong
  (DEFAULT_MAX_CHARS = 2000)                 | trimmed to the sequence      |
                                             | length later, by tokens)     |
  side that is a Tatoeba test sentence       | skipped                      | tatoeba_overlap
  CRLF line end, leading/trailing whitespace | stripped (no text is lost)   | not counted
  U+FEFF byte-order mark, at the start of a  | removed (no text is lost)    | not counted
  file or stray inside a line                |                              |
  lone "\\r" inside a line                   | kept: lines split on "\\n"  | not counted
                                             | only, so sides stay aligned  |
  Moses sides with different line counts     | error naming both files and both counts, at
                                             | registration (check_moses_line_counts) and at the
                                             | end of a streamed pass; never zip-truncated
                                             | (NTREX / Multi30k files likewise)
  unknown language code in a file name       | error naming the file, the closest known codes
                                             | and how to add a language (vmsst/base/languages.py)

Strict errors name the file, the 1-based line (and for UTF-8 the byte offset
in the line and in the file) and the fix. Side files that are not pairs
(DOCUMENT_IDS.tsv, Tatoeba test sets, `text_files.read_lines`) are always strict about
UTF-8: a skipped line there would shift every later line.
"""

import collections
import dataclasses
import difflib
import hashlib
import os
import pathlib
from typing import AbstractSet, Iterable, Iterator, NamedTuple

from absl import logging

from vmsst.base import files
from vmsst.base.gin_utils import gin
from vmsst.base import languages
from vmsst.base import text_files

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
# The longest real line (NTREX, Multi30k) has 773 characters and training keeps
# 32 tokens (~150 characters): a longer side is a broken extraction (a whole
# document on one line), not a sentence.
DEFAULT_MAX_CHARS = 2000
_FIX_ENCODING = text_files.FIX_ENCODING
_NOT_STRICT = "or bind InputPolicy.strict = False to skip and count such lines"


@gin.configurable
@dataclasses.dataclass(frozen=True, kw_only=True)
class InputPolicy:
  """How readers treat bad lines: the table in the module docstring.

  Gin: `register_families.input_policy = @InputPolicy()` with
  `InputPolicy.strict = True` (frozen, so it can key a cache).

  Attributes:
    strict: raise (naming file, line and fix) on a TSV line without exactly
      one tab or a line that is not UTF-8, instead of skipping and counting it.
    max_chars: sides longer than this many characters (after strip) are
      skipped as "overlong".
    log_first: how many skips of each reason a pass logs with file:line.
  """
  strict: bool = False
  max_chars: int = DEFAULT_MAX_CHARS
  log_first: int = 5


DEFAULT_POLICY = InputPolicy()


class Pair(NamedTuple):
  """One translation pair; codes are canonical (e.g. "eng", "zho-CN")."""
  text_a: str
  text_b: str
  lang_a: str
  lang_b: str


class Skip(NamedTuple):
  """A line a raw reader could not turn into a pair: the reason and what was wrong."""
  reason: str
  detail: str = ""


# A raw reader's item: (pair or skip, file, 1-based line) so skips can be located.
Located = tuple[Pair | Skip, PathLike, int]


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

  def __add__(self, other: "PairCounts") -> "PairCounts":
    return PairCounts(self.read + other.read, self.kept + other.kept,
                      self.skipped + other.skipped)

  def as_dict(self) -> dict:
    """Plain JSON: {"read", "kept", "skipped", "skipped_by_reason": {reason: n}}."""
    return {"read": self.read, "kept": self.kept, "skipped": sum(self.skipped.values()),
            "skipped_by_reason": dict(sorted(self.skipped.items()))}


def decode_lines(path: PathLike, *, strict: bool) -> Iterator[str | Skip]:
  """Each line of a plain or .gz file, decoded on its own.

  Lines split on b"\\n" only: a stray "\\r" inside a line must not split it
  (universal newlines would, misaligning parallel files). The "\\r" of CRLF
  and every U+FEFF (byte-order mark) are removed. A line that is not UTF-8 is
  `Skip("invalid_utf8", where)`, so one bad byte never fails the whole file.

  Raises:
    ValueError: (strict) on the first line that is not UTF-8, naming the file,
      the 1-based line, the byte offsets and the fix.
  """
  offset = 0
  with files.open_compressed(path) as f:
    for number, raw in enumerate(f, 1):
      start, offset = offset, offset + len(raw)
      try:
        text = raw.decode("utf-8").rstrip("\r\n")  # Trailing whitespace is stripped anyway.
      except UnicodeDecodeError as e:
        where = (f"{path}, line {number}: invalid UTF-8 {raw[e.start:e.end]!r} at byte "
                 f"{e.start} of the line (byte {start + e.start} of the file, counting from 0)")
        if strict:
          raise ValueError(f"{where}; {_FIX_ENCODING}.") from None
        yield Skip("invalid_utf8", where)
        continue
      yield text.replace("\ufeff", "") if "\ufeff" in text else text


def _skip_reason(pair: Pair, exclude: AbstractSet[str], max_chars: int) -> str | None:
  if not pair.text_a or not pair.text_b:
    return "empty_side"
  if len(pair.text_a) > max_chars or len(pair.text_b) > max_chars:
    return "overlong"
  if pair.text_a in exclude or pair.text_b in exclude:
    return "tatoeba_overlap"
  return None


def read_pairs(raw: Iterable[Located], *, name: str, counts: PairCounts | None = None,
               exclude: AbstractSet[str] = frozenset(),
               policy: InputPolicy = DEFAULT_POLICY) -> Iterator[Pair]:
  """Counts and filters located raw pairs; logs the report once the pass ends.

  Sides are stripped; a pair is then skipped as "empty_side", "overlong" (a
  side over policy.max_chars characters) or "tatoeba_overlap" (a side in
  `exclude`); a `Skip` is counted under its own reason. The first
  policy.log_first skips of each reason are logged with file:line.
  """
  counts = PairCounts() if counts is None else counts
  for item, path, line in raw:
    counts.read += 1
    if isinstance(item, Skip):
      reason, detail = item
    else:
      pair = item._replace(text_a=item.text_a.strip(), text_b=item.text_b.strip())
      reason, detail = _skip_reason(pair, exclude, policy.max_chars), ""
      if reason is None:
        counts.kept += 1
        yield pair
        continue
    counts.skipped[reason] += 1
    if counts.skipped[reason] <= policy.log_first:
      logging.info("%s: skipped %s:%d (%s)%s", name, path, line, reason,
                   f": {detail}" if detail else "")
  logging.info("%s", counts.report(name))


def _pair_or_skip(text_a: str | Skip, text_b: str | Skip, lang_a: str, lang_b: str) -> Pair | Skip:
  """The pair of two decoded lines, or the Skip of the first undecodable one."""
  for text in (text_a, text_b):
    if isinstance(text, Skip):
      return text
  return Pair(text_a, text_b, lang_a, lang_b)


# ---------------------------------------------------------------- Tatoeba filter


def tatoeba_test_sentences(data_dir: PathLike) -> frozenset[str]:
  """Every stripped line of every tatoeba/v1/tatoeba.* file (both sides)."""
  found = sorted(files.as_path(data_dir, TATOEBA_DIR).glob("tatoeba.*"))
  if not found:
    raise FileNotFoundError(
        f"No tatoeba.* files in {files.join(data_dir, TATOEBA_DIR)}: the Tatoeba filter "
        "needs them (pass the right --data_dir).")
  return frozenset(line for path in found for line in text_files.read_lines(path) if line)


# ----------------------------------------------------------------------- NTREX


def ntrex_documents(data_dir: PathLike) -> list[str]:
  """Document id of every NTREX line (1,997 entries, DOCUMENT_IDS.tsv)."""
  path = files.as_path(data_dir, NTREX_DIR, "DOCUMENT_IDS.tsv")
  return [line.split("\t")[0] for line in text_files.read_lines(path)]


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
  root = files.as_path(data_dir, NTREX_DIR)
  found = {"eng": root / "newstest2019-src.eng.txt.gz"}
  for path in sorted(root.glob("newstest2019-ref.*.txt.gz")):
    code = path.name[len("newstest2019-ref."):-len(".txt.gz")]
    if code in languages.NTREX_ENGLISH_REWRITES:
      continue
    canonical = canonical_in_file(code, path)
    if canonical in found:
      raise ValueError(f"{path} and {found[canonical]} are both language {canonical}")
    found[canonical] = path
  if len(found) < 2:
    raise FileNotFoundError(f"No NTREX files under {root}: pass the right --data_dir.")
  return found


def _ntrex_raw(data_dir: PathLike, split: str, seed: int, strict: bool) -> Iterator[Located]:
  """(pivot, xx) for every kept line and language xx, plus (eng, spa)."""
  if split not in ("train", "validation"):
    raise ValueError(f"NTREX split must be 'train' or 'validation', got {split!r}")
  documents = ntrex_documents(data_dir)
  held_out = ntrex_validation_documents(data_dir)
  paths = ntrex_files(data_dir)
  texts = {lang: list(decode_lines(path, strict=strict)) for lang, path in paths.items()}
  for lang, lines in texts.items():
    if len(lines) != len(documents):
      raise ValueError(f"NTREX {paths[lang]} has {len(lines)} lines, DOCUMENT_IDS.tsv "
                       f"{len(documents)}; download the corpus again.")
  for line, doc in enumerate(documents):
    if (doc in held_out) != (split == "validation"):
      continue
    yield (_pair_or_skip(texts["eng"][line], texts["spa"][line], "eng", "spa"), paths["spa"],
           line + 1)
    for lang in texts:
      if lang not in NTREX_PIVOTS:
        pivot = ntrex_pivot(line, lang, seed)
        yield (_pair_or_skip(texts[pivot][line], texts[lang][line], pivot, lang), paths[lang],
               line + 1)


def ntrex_pairs(data_dir: PathLike, split: str, *, seed: int = 0, counts: PairCounts | None = None,
                exclude: AbstractSet[str] = frozenset(),
                policy: InputPolicy = DEFAULT_POLICY) -> Iterator[Pair]:
  """NTREX-128 translation pairs of one split ("train" or "validation")."""
  return read_pairs(_ntrex_raw(data_dir, split, seed, policy.strict), name=f"ntrex128[{split}]",
                    counts=counts, exclude=exclude, policy=policy)


# -------------------------------------------------------------------- Multi30k


def _multi30k_raw(data_dir: PathLike, prefix: str, strict: bool) -> Iterator[Located]:
  root = files.as_path(data_dir, MULTI30K_DIR)
  paths = {code: root / f"{prefix}.{short}.gz" for short, code in MULTI30K_LANGUAGES.items()}
  texts = {code: list(decode_lines(path, strict=strict)) for code, path in paths.items()}
  lengths = {code: len(lines) for code, lines in texts.items()}
  if len(set(lengths.values())) != 1:
    raise ValueError(f"Multi30k {root}/{prefix}.* files are not line-aligned: {lengths}")
  codes = list(texts)
  for line in range(len(texts["eng"])):
    for i, code_a in enumerate(codes):
      for code_b in codes[i + 1:]:
        yield (_pair_or_skip(texts[code_a][line], texts[code_b][line], code_a, code_b),
               paths[code_b], line + 1)


def multi30k_pairs(data_dir: PathLike, split: str, *, counts: PairCounts | None = None,
                   exclude: AbstractSet[str] = frozenset(),
                   policy: InputPolicy = DEFAULT_POLICY) -> Iterator[Pair]:
  """All 6 language pairs of every Multi30k line: train.* or (validation) val.*."""
  if split not in MULTI30K_SPLITS:
    raise ValueError(f"Multi30k split must be one of {sorted(MULTI30K_SPLITS)}, got {split!r}")
  return read_pairs(_multi30k_raw(data_dir, MULTI30K_SPLITS[split], policy.strict),
                    name=f"multi30k[{split}]", counts=counts, exclude=exclude, policy=policy)


def is_known_language(code: str) -> bool:
  try:
    languages.canonical_language(code)
    return True
  except ValueError:
    return False


def canonical_in_file(code: str, path: pathlib.Path) -> str:
  """canonical_language(code); an unknown code is an error naming `path` and close codes."""
  try:
    return languages.canonical_language(code)
  except ValueError as e:
    by_lower = {c.lower(): c for c in languages.LANGUAGES}
    close = [by_lower[c] for c in difflib.get_close_matches(
        code.replace("_", "-").lower(), list(by_lower), n=5, cutoff=0.5)]
    raise ValueError(
        f"{path}: language code {code!r} is unknown (closest known: {', '.join(close) or '-'}; "
        f"all {len(languages.LANGUAGES)} are vmsst.base.languages.LANGUAGES). Rename the file "
        f"with a known code, or: {e}") from None
