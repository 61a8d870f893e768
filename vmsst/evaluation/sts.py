"""Semantic textual similarity: SemEval STS12–17, STS Benchmark and STSb Multi MT.

Every task scores a pair by the cosine of its two sentence embeddings and
reports Pearson and Spearman correlation with the gold score, ×100.

Tasks (`evaluate(encoder, folder, task=...)` picks one from `TASKS`):
  * "english_sts": SemEval STS 2012–2016, folder `<data>/sts12-16/raw`.
  * "stsb": the STS Benchmark dev and test splits, folder `<data>/stsb`.
  * "stsb_multi_mt": STSb machine-translated into 10 languages, scored on
    every same-language and cross-language pairing, folder
    `<data>/stsb-multi-mt`.
  * "sts17": SemEval 2017 cross-lingual STS, a folder of
    `STS.input.track<N>.<l1>-<l2>.txt` / `STS.gs.track<N>.<l1>-<l2>.txt`, or
    the official release as unzipped (`sts17_files`).

Results are plain JSON (NaN appears only if an encoder gives every pair the
same cosine). Each has "kind" (the task), "encoder" and "folder"; one pair
set's entry is {"pearson", "spearman", "n"} (+ "unscored" for SemEval files,
+ "lang1", "lang2" for cross-lingual sets); see each evaluate_* docstring.
`table(results)` renders any of them as markdown (`english_sts_table`,
`stsb_table`, `crosslingual_table` for STSb-MT and STS17).

Raw scores stay out of the JSON: `stsb_scores` returns the (cosine, gold)
arrays of an STSb split and `scatter` plots them. Because `UniqueSentences`
caches embeddings, calling it after `evaluate_stsb` encodes nothing again.
"""

import pathlib
from typing import Callable, Mapping, Sequence

import numpy as np
from absl import logging
from scipy import stats

from vmsst.base import files
from vmsst.encoding import protocol
from vmsst.encoding import similarity
from vmsst.base import sts_files
from vmsst.base import text_files
from vmsst.base.sts_files import ScoredPairs

ENGLISH_STS_YEARS = ("STS12", "STS13", "STS14", "STS15", "STS16")
# Said next to the STS13 numbers, since they are not comparable to papers that had SMT.
YEAR_NOTES = {"STS13": "2013 SMT is absent: it is not distributed (licence)."}
_AVERAGE_NAMES = ("en", "XL(s.)", "XL(d.)", "XL")
# The official SemEval-2017 evaluation release (STS2017.eval.v1.1) ships track 6
# (tr-en) with 500 input lines against 250 gold lines (STS2017.gs); the task
# scored the first 250 inputs. Set name -> (input lines, gold lines) of such
# known quirks; any other mismatch is an error.
STS17_EXTRA_INPUTS = {"track6.tr-en": (500, 250)}
Path = sts_files.Path


# ---------------------------------------------------------------- scoring


Languages = tuple[str | None, str | None]


def embed_pairs(encoder: protocol.UniqueSentences, pairs: ScoredPairs, desc: str,
                languages: Languages = (None, None)) -> tuple[np.ndarray, np.ndarray]:
  """float32 [n, d] embeddings of sentences1 and of sentences2.

  `languages` (of sentences1, of sentences2) pick a two-tower encoder's
  towers; one encoder call when they agree.
  """
  if languages[0] != languages[1]:
    return tuple(encoder.encode(s, desc=f"{desc} {i}", language=language) for i, s, language
                 in ((1, pairs.sentences1, languages[0]), (2, pairs.sentences2, languages[1])))
  both = encoder.encode(pairs.sentences1 + pairs.sentences2, desc=desc, language=languages[0])
  n = len(pairs.sentences1)
  return both[:n], both[n:]


def cosines(encoder: protocol.UniqueSentences, pairs: ScoredPairs, desc: str,
            languages: Languages = (None, None)) -> np.ndarray:
  """float32 [n]: each pair's cosine similarity, the model's similarity score."""
  return similarity.paired_cosine(*embed_pairs(encoder, pairs, desc, languages))


def correlations(cosine: np.ndarray, gold: np.ndarray, what: str = "pairs") -> dict:
  """{"pearson", "spearman"} ×100 of cosine [n] against gold [n], and "n"."""
  cosine, gold = np.asarray(cosine, np.float64), np.asarray(gold, np.float64)
  if len(gold) < 2:
    raise ValueError(f"{what}: {len(gold)} scored pairs; a correlation needs at least 2.")
  return {"pearson": 100 * float(stats.pearsonr(cosine, gold).statistic),
          "spearman": 100 * float(stats.spearmanr(cosine, gold).statistic),
          "n": int(len(gold))}


def _mean_of(entries: Sequence[Mapping]) -> dict:
  """{"pearson", "spearman"}: unweighted means over the entries."""
  return {m: float(np.mean([e[m] for e in entries])) for m in ("pearson", "spearman")}


def _groups(entry: Mapping) -> tuple[str, ...]:
  """The Table 1 averages a language-pair entry {"lang1", "lang2", ...} counts in."""
  if entry["lang1"] != entry["lang2"]:
    return ("XL(d.)", "XL")
  return ("en",) if entry["lang1"] == "en" else ("XL(s.)", "XL")


def language_averages(entries: Mapping[str, Mapping]) -> dict:
  """The VMSST paper's Table 1 averages over language-pair entries.

  Args:
    entries: name -> {"lang1", "lang2", "pearson", "spearman", ...}.

  Returns:
    Group -> {"pearson", "spearman", "count"}, omitting empty groups:
      "en": en-en pairs; "XL(s.)": same-language pairs other than en-en;
      "XL(d.)": pairs of two different languages; "XL": every pair but en-en.
  """
  averages = {}
  for group in _AVERAGE_NAMES:
    chosen = [e for e in entries.values() if group in _groups(e)]
    if chosen:
      averages[group] = {**_mean_of(chosen), "count": len(chosen)}
  return averages


# ---------------------------------------------------------------- tasks


def evaluate_english_sts(encoder: protocol.UniqueSentences, folder: Path, *,
                         years: Sequence[str] = ENGLISH_STS_YEARS) -> dict:
  """SemEval STS 2012–2016 (English), under both reporting conventions.

  Args:
    encoder: any encoder wrapped in UniqueSentences.
    folder: `<data>/sts12-16/raw`, holding one SemEval folder per year.
    years: sub-folders to evaluate.

  Returns:
    {"kind", "encoder", "folder", "years": {year: {
       "datasets": {name: {"pearson", "spearman", "n", "unscored"}},
       "mean": {"pearson", "spearman"}  # SentEval: mean over the year's datasets,
       "all": {"pearson", "spearman", "n"}  # one correlation over the year's pairs,
       "unscored": int, ["note": str]}},
     "averages": {"mean": {...}, "all": {...}}}  # unweighted over years.
    The VMSST paper's Table 9 reads averages.mean.pearson and averages.all.spearman.
  """
  folder = files.as_path(folder)
  results = {}
  for year in years:
    if not (folder / year).is_dir():
      raise ValueError(f"{folder / year} is missing; pass <data>/sts12-16/raw, which holds "
                       f"{', '.join(ENGLISH_STS_YEARS)}.")
    datasets, all_cosine, all_gold = {}, [], []
    for name, pairs in sts_files.read_semeval_folder(folder / year).items():
      cosine = cosines(encoder, pairs, f"{year} {name}")
      datasets[name] = {**correlations(cosine, pairs.gold, f"{year} {name}"),
                        "unscored": pairs.unscored}
      all_cosine.append(cosine)
      all_gold.append(pairs.gold)
    results[year] = {
        "datasets": datasets,
        "mean": _mean_of(list(datasets.values())),
        "all": correlations(np.concatenate(all_cosine), np.concatenate(all_gold), year),
        "unscored": sum(d["unscored"] for d in datasets.values())}
    if year in YEAR_NOTES:
      results[year]["note"] = YEAR_NOTES[year]
  averages = {c: _mean_of([r[c] for r in results.values()]) for c in ("mean", "all")}
  return {"kind": "english_sts", "encoder": encoder.name, "folder": str(folder),
          "years": results, "averages": averages}


def evaluate_stsb(encoder: protocol.UniqueSentences, folder: Path, *,
                  splits: Sequence[str] = ("dev", "test")) -> dict:
  """STS Benchmark: {"kind", "encoder", "folder", <split>: {"pearson", "spearman", "n"}}."""
  results = {"kind": "stsb", "encoder": encoder.name, "folder": str(folder)}
  for split in splits:
    cosine, gold = stsb_scores(encoder, folder, split)
    results[split] = correlations(cosine, gold, f"STSb {split}")
  return results


def stsb_scores(encoder: protocol.UniqueSentences, folder: Path,
                split: str = "test") -> tuple[np.ndarray, np.ndarray]:
  """(cosine float32 [n], gold float64 [n]) of an STSb split, e.g. for `scatter`."""
  pairs = sts_files.read_stsb(folder, split)
  return cosines(encoder, pairs, f"STSb {split}"), pairs.gold


def evaluate_stsb_multi_mt(encoder: protocol.UniqueSentences, folder: Path, *,
                           languages: Sequence[str] | None = None, split: str = "test") -> dict:
  """STSb Multi MT on every ordered language pairing, with the VMSST Table 1 averages.

  Pairing (l1, l2) scores sentence1 of row i in l1 against sentence2 of row i
  in l2, with row i's English gold; (l1, l2) and (l2, l1) are distinct.
  Averages (unweighted over pairings): "en" = en-en; "XL(s.)" = same-language
  pairings other than en-en; "XL(d.)" = pairings of two different languages;
  "XL" = every pairing except en-en.

  Args:
    encoder: any encoder wrapped in UniqueSentences; each language is encoded once.
    folder: `<data>/stsb-multi-mt`.
    languages: subset of sts_files.STSB_MULTI_MT_LANGUAGES (all by default).
    split: "train", "dev" or "test".

  Returns:
    {"kind", "encoder", "folder", "split", "languages",
     "pairs": {"l1-l2": {"lang1", "lang2", "pearson", "spearman", "n"}},
     "averages": {group: {"pearson", "spearman", "count"}}}.

  Raises:
    ValueError: if a language's scores differ from English's on any row.
  """
  languages = list(languages or sts_files.STSB_MULTI_MT_LANGUAGES)
  english = sts_files.read_stsb_multi_mt(folder, "en", split)
  embedded = {}
  for language in languages:
    pairs = sts_files.read_stsb_multi_mt(folder, language, split)
    sts_files.check_aligned(english, pairs, f"stsb-{language}-{split}")
    embedded[language] = embed_pairs(encoder, pairs, f"STSb-MT {language} {split}",
                                     (language, language))
  results = {}
  for lang1 in languages:
    for lang2 in languages:
      cosine = similarity.paired_cosine(embedded[lang1][0], embedded[lang2][1])
      results[f"{lang1}-{lang2}"] = {"lang1": lang1, "lang2": lang2,
                                     **correlations(cosine, english.gold, f"{lang1}-{lang2}")}
  return {"kind": "stsb_multi_mt", "encoder": encoder.name, "folder": str(folder),
          "split": split, "languages": languages, "pairs": results,
          "averages": language_averages(results)}


def evaluate_sts17(encoder: protocol.UniqueSentences, folder: Path) -> dict:
  """SemEval 2017 STS tracks, languages read from each file name, with Table 1 averages.

  Args:
    encoder: any encoder wrapped in UniqueSentences.
    folder: the SemEval 2017 test folder (STS.input.track1.ar-ar.txt, ...), or
      the official release as unzipped (see `sts17_files`).

  Returns:
    {"kind", "encoder", "folder",
     "tracks": {name: {"lang1", "lang2", "pearson", "spearman", "n", "unscored",
                       ["ignored_input_lines": the release's extra inputs, see
                        STS17_EXTRA_INPUTS]}},
     "averages": {group: {"pearson", "spearman", "count"}}}, groups as in
    `language_averages` (e.g. track4a and track4b, both es-en, each count once).
  """
  files = sts17_files(folder)
  languages = {name: sts_files.sts17_languages(name) for name in files}  # Fails before encoding.
  sets = {name: read_sts17_set(name, *paths) for name, paths in files.items()}
  tracks = {}
  for name, (pairs, ignored) in sets.items():
    lang1, lang2 = languages[name]
    tracks[name] = {"lang1": lang1, "lang2": lang2, "unscored": pairs.unscored,
                    **correlations(cosines(encoder, pairs, f"STS17 {name}", (lang1, lang2)),
                                   pairs.gold, name)}
    if ignored:
      tracks[name]["ignored_input_lines"] = ignored
  return {"kind": "sts17", "encoder": encoder.name, "folder": str(folder), "tracks": tracks,
          "averages": language_averages(tracks)}


def sts17_files(folder: Path) -> dict[str, tuple[pathlib.Path, pathlib.Path]]:
  """Set name -> (STS.input.<name>.txt, STS.gs.<name>.txt), sorted by name.

  Reads a folder holding both kinds of file, or the official release as
  unzipped: STS2017.eval.v1.1/ (inputs) and STS2017.gs/ (gold), given their
  parent or the eval folder itself (gold then in its STS2017.gs* sibling).

  Raises:
    ValueError: no input file, an input without gold, or a name found twice.
  """
  folder = files.as_path(folder)
  dirs = [folder, *sorted(p for p in folder.iterdir() if p.is_dir())]
  if folder.name.startswith("STS2017.eval"):
    dirs += sorted(p for p in folder.parent.glob("STS2017.gs*") if p.is_dir())
  found = {"input": {}, "gs": {}}
  for directory in dirs:
    for kind, names in found.items():
      for path in sorted(directory.glob(f"STS.{kind}.*.txt")):
        name = path.name[len(f"STS.{kind}."):-len(".txt")]
        if name in names:
          raise ValueError(f"{path} and {names[name]} are both STS.{kind}.{name}.txt; keep one.")
        names[name] = path
  if not found["input"]:
    raise ValueError(f"no STS.input.<name>.txt under {folder} or its sub-folders; unzip the "
                     "SemEval-2017 STS2017.eval.v1.1.zip and STS2017.gs.zip there.")
  missing = sorted(set(found["input"]) - set(found["gs"]))
  if missing:
    raise ValueError(f"{found['input'][missing[0]]} has no gold STS.gs.{missing[0]}.txt in "
                     f"{', '.join(str(d) for d in dirs)}; unzip STS2017.gs.zip next to the inputs.")
  return {name: (path, found["gs"][name]) for name, path in sorted(found["input"].items())}


def read_sts17_set(name: str, input_path: pathlib.Path,
                   gold_path: pathlib.Path) -> tuple[ScoredPairs, int]:
  """(pairs, input lines ignored): the release's known extra inputs are cut and logged."""
  counts = (len(text_files.read_lines(input_path)), len(text_files.read_lines(gold_path)))
  if STS17_EXTRA_INPUTS.get(name) != counts:
    return sts_files.read_semeval_files(input_path, gold_path), 0
  logging.warning("%s has %d lines and %s %d: the official SemEval-2017 release's known "
                  "quirk; scoring the first %d input lines, as the task did.",
                  input_path, counts[0], gold_path, counts[1], counts[1])
  return sts_files.read_semeval_files(input_path, gold_path, input_lines=counts[1]), (
      counts[0] - counts[1])


TASKS: dict[str, Callable[..., dict]] = {
    "english_sts": evaluate_english_sts,
    "stsb": evaluate_stsb,
    "stsb_multi_mt": evaluate_stsb_multi_mt,
    "sts17": evaluate_sts17,
}


def evaluate(encoder: protocol.UniqueSentences, folder: Path, *, task: str, **options) -> dict:
  """The benchmark contract: runs TASKS[task](encoder, folder, **options)."""
  if task not in TASKS:
    raise ValueError(f"unknown STS task {task!r}; choose one of {sorted(TASKS)}.")
  return TASKS[task](encoder, folder, **options)


# ---------------------------------------------------------------- tables


def _cell(value) -> str:
  """A float to one decimal, as in the paper; a missing average as a dash."""
  if value is None:
    return "–"
  return f"{value:.1f}" if isinstance(value, float) else str(value)


def _rows(header: Sequence[str], rows: Sequence[Sequence]) -> list[str]:
  """Markdown table lines."""
  return (["| " + " | ".join(header) + " |", "|" + "---|" * len(header)] +
          ["| " + " | ".join(_cell(v) for v in row) + " |" for row in rows])


def english_sts_table(results: Mapping) -> str:
  """Per-year rows under both conventions (cf. VMSST Table 9), then per-dataset rows."""
  years, rows, detail = results["years"], [], []
  for year, r in years.items():
    rows.append([year, len(r["datasets"]), r["all"]["n"], r["mean"]["pearson"],
                 r["mean"]["spearman"], r["all"]["pearson"], r["all"]["spearman"]])
    detail += [[year, name, d["n"], d["unscored"], d["pearson"], d["spearman"]]
               for name, d in r["datasets"].items()]
  averages = results["averages"]
  rows.append(["Avg.", "", "", averages["mean"]["pearson"], averages["mean"]["spearman"],
               averages["all"]["pearson"], averages["all"]["spearman"]])
  lines = _rows(["Year", "Sets", "n", "mean Pearson", "mean Spearman", "all Pearson",
                 "all Spearman"], rows)
  lines += ["", "mean: per-dataset correlation averaged over a year's datasets (SentEval); "
            "all: one correlation over a year's concatenated pairs. Avg.: unweighted over years."]
  lines += [f"{year}: {r['note']}" for year, r in years.items() if "note" in r]
  lines += [""] + _rows(["Year", "Dataset", "n", "unscored", "Pearson", "Spearman"], detail)
  return "\n".join(lines)


def stsb_table(results: Mapping) -> str:
  """One row per STSb split."""
  splits = [k for k, v in results.items() if isinstance(v, Mapping)]
  return "\n".join(_rows(["Split", "n", "Pearson", "Spearman"],
                         [[s, results[s]["n"], results[s]["pearson"], results[s]["spearman"]]
                          for s in splits]))


def crosslingual_table(results: Mapping) -> str:
  """The Table 1 averages, then per pairing: track rows (STS17) or a Spearman matrix (STSb-MT)."""
  averages = results["averages"]
  lines = _rows(["Metric", *_AVERAGE_NAMES],
                [[m.capitalize(), *[averages.get(g, {}).get(m) for g in _AVERAGE_NAMES]]
                 for m in ("spearman", "pearson")])
  if results["kind"] == "sts17":
    detail = _rows(["Track", "Languages", "n", "Pearson", "Spearman"],
                   [[name, f"{t['lang1']}-{t['lang2']}", t["n"], t["pearson"], t["spearman"]]
                    for name, t in results["tracks"].items()])
    notes = [f"{name}: the official release has {t['ignored_input_lines']} more input lines "
             "than gold lines; the first ones, which the gold scores, are evaluated."
             for name, t in results["tracks"].items() if t.get("ignored_input_lines")]
    detail += [""] + notes if notes else []
  else:
    languages, pairs = results["languages"], results["pairs"]
    matrix = [[l1, *[pairs[f"{l1}-{l2}"]["spearman"] for l2 in languages]] for l1 in languages]
    detail = [f"Spearman ×100 on {results['split']}; row: sentence1 language, column: "
              "sentence2 language.", ""] + _rows(["s1 \\ s2", *languages], matrix)
  return "\n".join(lines + [""] + detail)


_TABLES = {"english_sts": english_sts_table, "stsb": stsb_table,
           "stsb_multi_mt": crosslingual_table, "sts17": crosslingual_table}


def table(results: Mapping) -> str:
  """Markdown for any result of `evaluate`, chosen by its "kind"."""
  return _TABLES[results["kind"]](results)


def scatter(cosine: np.ndarray, gold: np.ndarray, path: Path, *, title: str = "STSb test") -> None:
  """Saves a PNG of cosine [n] against gold [n], with Spearman in the title.

  Uses the object-oriented Agg canvas, so no global pyplot backend is changed.
  """
  from vmsst.evaluation import plots  # pylint: disable=import-outside-toplevel  # slow import
  fig = plots.figure((5, 4))
  axes = fig.add_subplot()
  axes.scatter(gold, cosine, s=4, alpha=0.4)
  axes.set_xlabel("gold similarity")
  axes.set_ylabel("cosine of embeddings")
  axes.set_title(f"{title}: Spearman {correlations(cosine, gold)['spearman']:.1f}")
  plots.save(fig, path)
