"""The VMSST paper's OPUS training data, as data (its seqio mixture: registry/opus.py).

Where each value comes from (read before trusting a number here):

* Table 15 (Appendix B, "Full training data for each language"; the paper
  text is ../shared/papers/vmsst_wieting2023.txt) gives the training pairs of
  each language, "the sum of using English and Spanish as pivot languages".
  `TABLE_15` holds its 93 rows as printed. Its `en` row (4,913,379) is the
  English-Spanish pair seen from the Spanish pivot, the same pairs as its `es`
  row: counted once, the table sums to 215,769,456, the "nearly 216 million
  training examples" of §6.1 and Appendix B (`TABLE_15_TOTAL`).
  `PAIR_COUNTS` (every row but `en`) sets the paper mixture's rates: a
  language's share of the mixture is its share of Table 15, split over its
  English and Spanish pivot pairs in proportion to the pairs on disk (the
  table gives only their sum). Within a pair, corpora are sampled in
  proportion to their lines (seqio_sources.StreamingPairSource), so every
  window of the stream has the pair's corpus mix.
* Languages: `LANGUAGES` is Table 15's 92 codes other than English (Aymara
  among them with 0 pairs, as the paper says; Spanish as a language of the
  English pivot). Table 15 lists Pashto (ps, 32 pairs: OPUS has only Tatoeba
  en-ps) and no Persian (fa), although LASER's 93 languages, which the paper
  says it follows, have Persian and not Pashto, and Table 14's Tatoeba
  accuracy on Persian (pes, 95.5 for Contrastive) is that of a trained
  language. We follow the table as printed (its total is the paper's corpus
  size, so no Persian row is missing from the sum); to train Persian as LASER
  did, pass `languages=(*LANGUAGES, "fa")` and a count for it in
  `language_counts`.
* Corpora: the paper's six (Europarl, UN, OpenSubtitles2018, GlobalVoices,
  Tanzil, Tatoeba), spelled as OPUS spells them; "OpenSubtitles2018" is OPUS
  OpenSubtitles release v2018. The other releases are pins of ours, checked
  against the OPUS catalog bundled with opustools 1.9.0: Europarl v8 and
  GlobalVoices v2018q4 (latest), UN v20090831 and Tanzil v1 (the only ones),
  and Tatoeba v2021-07-22, the paper's own (§6.1, Appendix B; the catalog's
  latest is v2022-03-03). Aymara (ay) has no pair in any of the six corpora
  per the bundled catalog either.
* Several OPUS spellings of one language (`OPUS_CODE_ALIASES`, e.g. Chinese is
  zh in UN/Tanzil, zh_cn in OpenSubtitles, cmn in Tatoeba) come from that
  catalog; all map to one canonical code (vmsst.base.languages).

The layout `scan_opus_dir` reads is the one `tasks/opus_download.py` writes:
Moses files `<corpus>.<l1>-<l2>.<l1>` / `.<l2>` (either code order) and an
optional `manifest.json` with each file's bytes and lines.

This module is data only (constants, rates, the inventory of a directory; no
seqio, so `python -m vmsst_tasks.opus_download` does not load TensorFlow). The
mixture itself is registered by the registry's OPUS family,
`tasks/registry/opus.py::register_paper_mixture` (its docstring says how it reuses
the family's `vmsst_opus.*` tasks).
"""

import collections
import dataclasses
import json
import math
import pathlib
from typing import Any, Mapping, Sequence

from vmsst_tasks.sources import opus_readers
from vmsst.base import files
from vmsst.base import languages as vmsst_languages

CORPORA: tuple[str, ...] = ("Europarl", "UN", "OpenSubtitles", "GlobalVoices", "Tanzil", "Tatoeba")
# Release of each corpus downloaded by default (see the module docstring).
CORPUS_RELEASES: Mapping[str, str] = {
    "Europarl": "v8", "UN": "v20090831", "OpenSubtitles": "v2018",
    "GlobalVoices": "v2018q4", "Tanzil": "v1", "Tatoeba": "v2021-07-22",
}
PIVOTS: tuple[str, ...] = ("en", "es")
# Table 15 of the paper (Appendix B), laid out as the paper prints it (check
# it against ../shared/papers/vmsst_wieting2023.txt line by line): each
# "Language" row of OPUS codes over its "Training Pairs" row, English and
# Spanish pivots summed. "en" is the English-Spanish pair from the Spanish
# side (= "es"); see the module docstring.
TABLE_15_AS_PRINTED = """
Language af am ar ay az be ber bg
Training Pairs 77,772 101,613 7,907,914 0 291,925 6,330 142,061 4,834,661
Language bn br bs ca cbk cs da de
Training Pairs 1,148,461 34,472 4,166,739 895,940 1,623 5,429,060 7,767,119 8,707,293
Language dtp dv el en eo es et eu
Training Pairs 1,064 98,320 6,601,989 4,913,379 447,622 4,913,379 5,093,003 1,432,979
Language fi fr ga gl ha he hi hr
Training Pairs 7,785,493 8,935,842 1,112 391,824 134,775 4,046,554 358,907 3,911,368
Language hu hy ia id ie io is it
Training Pairs 5,256,214 8,194 12,048 4,326,151 2,445 3,181 2,712,556 8,468,538
Language ja ka kab kk km ko ku kw
Training Pairs 3,981,886 360,136 26,460 6,172 3,266 2,566,495 98,733 3,463
Language kzj la lfn lt lv mg mhr mk
Training Pairs 614 27,515 6,096 3,629,769 2,119,995 537,953 69 4,037,896
Language ml mr ms my nb nds nl oc
Training Pairs 867,026 52,340 3,288,492 4,802 9,694 6,263 8,346,102 730
Language pl ps pt ro ru sd si sk
Training Pairs 5,407,190 32 8,276,190 4,814,046 9,416,934 98,412 1,016,660 5,094,752
Language sl so sq sr sv sw ta te
Training Pairs 5,099,577 98,976 3,619,914 3,977,191 7,680,683 201,379 150,023 42,877
Language tg th tl tr tt ug uk ur
Training Pairs 135,245 3,849,777 34,829 5,854,059 132,273 101,989 1,687,685 844,052
Language uz vi wuu yue zh
Training Pairs 148,860 3,905,401 929 4,525 7,636,488
"""


def _read_printed_table(text: str) -> dict[str, int]:
  """{code: pairs} of TABLE_15_AS_PRINTED: each "Language" row zipped with the row below it."""
  rows = text.strip().splitlines()
  codes = [row.removeprefix("Language ").split() for row in rows[0::2]]
  counts = [row.removeprefix("Training Pairs ").split() for row in rows[1::2]]
  if [len(c) for c in codes] != [len(c) for c in counts]:
    raise ValueError("Table 15: a Language row and its Training Pairs row differ in length.")
  return {code: int(count.replace(",", ""))
          for row_codes, row_counts in zip(codes, counts)
          for code, count in zip(row_codes, row_counts)}


# {code: training pairs}, in the table's order.
TABLE_15: Mapping[str, int] = _read_printed_table(TABLE_15_AS_PRINTED)
# The paper's languages besides English (OPUS codes, sorted): Table 15's rows.
LANGUAGES: tuple[str, ...] = tuple(code for code in TABLE_15 if code != "en")
# Paper language -> every OPUS spelling fetched for it (first = the paper code).
OPUS_CODE_ALIASES: Mapping[str, tuple[str, ...]] = {
    "fa": ("fa", "pes"),         # Tatoeba: pes (not in Table 15; see the module docstring).
    "ms": ("ms", "zsm"),         # Tatoeba: zsm.
    "nb": ("nb", "no"),          # OpenSubtitles, Tanzil: no.
    "sw": ("sw", "swh"),         # Tatoeba: swh.
    "zh": ("zh", "zh_cn", "cmn"),  # OpenSubtitles: zh_cn (zh_tw is another language); Tatoeba: cmn.
}
# The counts behind the paper mixture's rates, {OPUS code in LANGUAGES: pairs}.
PAIR_COUNTS: Mapping[str, int] = {code: TABLE_15[code] for code in LANGUAGES}
# Their sum: "nearly 216 million training examples" (§6.1, Appendix B).
TABLE_15_TOTAL = 215_769_456
MANIFEST_NAME = "manifest.json"
DOWNLOAD_COMMAND = "python -m vmsst_tasks.opus_download --output={opus_dir}"


def opus_codes(language: str) -> tuple[str, ...]:
  """Every OPUS spelling of a paper language ("zh" -> zh, zh_cn, cmn)."""
  return OPUS_CODE_ALIASES.get(language, (language,))


def paper_language(opus_code: str) -> str:
  """The paper language an OPUS code belongs to ("cmn" -> "zh")."""
  for language, codes in OPUS_CODE_ALIASES.items():
    if opus_code in codes:
      return language
  return opus_code


def paper_mixture_rates(counts: Mapping[str, float], temperature: float = 1.0) -> dict[str, float]:
  """Sampling rates proportional to counts**(1/temperature), summing to 1.

  temperature=1 samples every pair uniformly (a language's share equals its
  share of the data); larger temperatures flatten the distribution towards
  uniform over languages, upsampling low-resource ones (T -> inf: uniform).
  A zero count gets rate 0.

  Raises:
    ValueError: no counts, a negative count, all zero, or temperature <= 0.
  """
  if temperature <= 0:
    raise ValueError(f"temperature must be > 0, got {temperature}")
  if not counts:
    raise ValueError("No counts to compute mixture rates from.")
  negative = {k: v for k, v in counts.items() if v < 0}
  if negative:
    raise ValueError(f"Counts must be >= 0, got {negative}")
  # Scale by the largest count first so count**(1/T) cannot overflow.
  top = max(counts.values())
  if top == 0:
    raise ValueError("All counts are zero: there is no data to sample.")
  weights = {k: math.pow(v / top, 1.0 / temperature) if v else 0.0 for k, v in counts.items()}
  total = math.fsum(weights.values())
  return {k: w / total for k, w in weights.items()}


# ------------------------------------------------------------------ inventory


@dataclasses.dataclass(frozen=True)
class PaperPair:
  """All files of one (pivot, language) pair; codes are canonical."""
  pivot: str
  language: str
  paper_code: str  # The language's OPUS code in LANGUAGES ("zh" for zho-CN).
  files: tuple[opus_readers.OpusFile, ...]
  corpora: tuple[str, ...]
  lines: int
  file_lines: tuple[int, ...] = ()  # Lines of each of `files` (their sum is `lines`).

  @property
  def key(self) -> str:
    return f"{self.pivot}-{self.language}"


@dataclasses.dataclass
class OpusInventory:
  """What an OPUS directory holds of the paper's data, and what it lacks."""
  opus_dir: pathlib.Path
  pairs: list[PaperPair]
  num_languages: int            # Paper languages asked for.
  missing_languages: list[str]  # Of those, the ones (OPUS codes) with no file at all.
  missing_corpora: list[str]    # Paper corpora with no file at all.
  ignored: list[str]            # Files found that are not paper data.

  def report(self) -> str:
    """One line: pairs found, pairs per corpus, and everything missing."""
    by_corpus = collections.Counter(c for p in self.pairs for c in p.corpora)
    return (f"{self.opus_dir}: {len(self.pairs)} language pairs, "
            f"{sum(p.lines for p in self.pairs)} sentence pairs; language pairs per corpus "
            f"{dict(sorted(by_corpus.items()))}; {len(self.missing_languages)} of "
            f"{self.num_languages} languages missing {self.missing_languages}; "
            f"{len(self.missing_corpora)} corpora missing {self.missing_corpora}; "
            f"{len(self.ignored)} files ignored {self.ignored[:10]}")


def corpus_of(opus_file: opus_readers.OpusFile) -> str:
  """Corpus name of a file: "Europarl" for Europarl.en-de.en[.gz]."""
  name = opus_file.paths[0].name.removesuffix(".gz")
  return name.rsplit(".", 2)[0]


def _orient(opus_file: opus_readers.OpusFile, pivots: Sequence[str]) -> tuple[str, str] | None:
  """(pivot, other) canonical codes of a file, or None if it has no pivot side."""
  a, b = opus_file.lang_a, opus_file.lang_b
  ranked = [p for p in pivots if p in (a, b)]
  if a == b or not ranked:
    return None
  return ranked[0], b if ranked[0] == a else a


def _load_manifest_files(opus_dir: pathlib.Path) -> dict[str, Mapping[str, int]]:
  path = opus_dir / MANIFEST_NAME
  if not path.exists():
    return {}
  return json.loads(path.read_text(encoding="utf-8")).get("files", {})


def _file_lines(opus_file: opus_readers.OpusFile, manifest: Mapping[str, Mapping[str, Any]],
                opus_dir: pathlib.Path) -> int:
  """Lines of a file pair: from the manifest if sizes match, else counted."""
  entries = [manifest.get(p.name) if p.parent == opus_dir else None for p in opus_file.paths]
  if all(e and e.get("bytes") == files.size(p) for e, p in zip(entries, opus_file.paths)):
    if len({e["lines"] for e in entries}) == 1:
      return entries[0]["lines"]
  if len(opus_file.paths) == 1:
    return opus_readers.count_lines(opus_file.paths[0])
  return opus_readers.check_moses_line_counts(opus_file)


def scan_opus_dir(opus_dir: str | pathlib.Path, *, languages: Sequence[str] = LANGUAGES,
                  pivots: Sequence[str] = PIVOTS,
                  corpora: Sequence[str] = CORPORA) -> OpusInventory:
  """Groups the paper's files in `opus_dir` by (pivot, language).

  Raises:
    FileNotFoundError: opus_dir does not exist or holds none of the paper's
      files; the message names the directory and the download command.
    ValueError: misaligned Moses files, unknown codes (opus_readers.py).
  """
  opus_dir = files.as_path(opus_dir)
  canon = vmsst_languages.canonical_language
  wanted = {canon(code): language for language in languages for code in opus_codes(language)}
  pivot_codes = [canon(p) for p in pivots]
  found = opus_readers.discover_opus(opus_dir) if opus_dir.is_dir() else []
  manifest = _load_manifest_files(opus_dir)
  grouped: dict[tuple[str, str], list[opus_readers.OpusFile]] = collections.defaultdict(list)
  ignored = []
  for opus_file in found:
    pair = _orient(opus_file, pivot_codes)
    if pair is None or pair[1] not in wanted or corpus_of(opus_file) not in corpora:
      ignored.append(opus_file.name)
    else:
      grouped[pair].append(opus_file)
  if not grouped:
    raise FileNotFoundError(
        f"No OPUS training files of the paper in {opus_dir} (expected Moses files "
        f"<corpus>.<l1>-<l2>.<l1>/.<l2> for corpora {list(corpora)}). Download them with: "
        + DOWNLOAD_COMMAND.format(opus_dir=opus_dir))
  pairs = []
  for (p, lang), pair_files in sorted(grouped.items()):
    file_lines = tuple(_file_lines(f, manifest, opus_dir) for f in pair_files)
    pairs.append(PaperPair(p, lang, wanted[lang], tuple(pair_files),
                           tuple(sorted({corpus_of(f) for f in pair_files})), sum(file_lines),
                           file_lines))
  have = {wanted[p.language] for p in pairs} | {wanted.get(p.pivot) for p in pairs}
  return OpusInventory(
      opus_dir=opus_dir, pairs=pairs, num_languages=len(languages),
      missing_languages=[lang for lang in languages if lang not in have],
      missing_corpora=[c for c in corpora if not any(c in p.corpora for p in pairs)],
      ignored=ignored)


def pair_counts(inventory: OpusInventory,
                language_counts: Mapping[str, int] | None = None) -> dict[str, float]:
  """The count behind each pair's mixture rate, keyed by PaperPair.key.

  With `language_counts` ({OPUS code: pairs}, the form of PAIR_COUNTS, Table
  15): each language's count, split over its pivot pairs (English, Spanish)
  in proportion to their pairs on disk, since the table gives only the sum.
  Without them (None or empty: a directory that is not the paper's data):
  the sentence pairs on disk.

  Raises:
    ValueError: a language on disk has no entry in `language_counts`.
  """
  if not language_counts:
    return {p.key: p.lines for p in inventory.pairs}
  by_language = collections.defaultdict(list)
  for pair in inventory.pairs:
    by_language[pair.paper_code].append(pair)
  missing = sorted(set(by_language) - set(language_counts))
  if missing:
    raise ValueError(f"No count for languages {missing} found in {inventory.opus_dir}; "
                     "give each a count in language_counts.")
  counts = {}
  for language, pairs in by_language.items():
    total = sum(p.lines for p in pairs)
    for pair in pairs:
      share = pair.lines / total if total else 1 / len(pairs)
      counts[pair.key] = language_counts[language] * share
  return counts
