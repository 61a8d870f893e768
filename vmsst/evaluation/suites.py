"""The explicit table of benchmarks: suite name -> data folder, evaluator, table.

Adding a benchmark: write its module (`evaluate(encoder, folder, **options)`
and `table(results)`), then add one `Suite` entry here. Options a suite takes
come from `SuiteOptions`, filled from the command line. A suite is found as a
folder under a data dir, except `parallel`, which reads the two files named
by --src and --trg.
"""

import dataclasses
import pathlib
from typing import Callable, Sequence

from vmsst.base import files
from vmsst.evaluation import clustering
from vmsst.evaluation import flores
from vmsst.evaluation import bucc
from vmsst.evaluation import pair_ranking
from vmsst.evaluation import parallel
from vmsst.evaluation import question_retrieval
from vmsst.evaluation import sts
from vmsst.evaluation import tatoeba


@dataclasses.dataclass(frozen=True)
class SuiteOptions:
  """Knobs of individual suites (None: the suite's default, usually 'all')."""
  tatoeba_languages: Sequence[str] | None = None
  training_languages: Sequence[str] | None = None
  stsb_multi_mt_languages: Sequence[str] | None = None
  mining_pairs: Sequence[str] | None = None
  mining_index: str = "exact"  # or "ivf": approximate neighbours, as at corpus scale
  flores_split: str | None = None  # devtest or dev
  src: str | None = None  # the two line-aligned files of `parallel`
  trg: str | None = None
  src_language: str | None = None  # their languages: a two-tower model's tower for each
  trg_language: str | None = None


@dataclasses.dataclass(frozen=True)
class Suite:
  """A benchmark: where its data lives under a data dir and how to run it."""
  # Folder name(s) under a data dir, the first found wins; None: files named by --src/--trg.
  folder: str | tuple[str, ...] | None
  run: Callable[..., dict]  # (encoder, folder: Path, options: SuiteOptions) -> results
  table: Callable[[dict], str]
  title: str
  how_to_get: str = ""
  # (encoder, folder, results, output dir) -> the PNG's file name in that dir.
  plot: Callable[..., str] | None = None


def _stsb_scatter(encoder, folder: pathlib.Path, results: dict, output: pathlib.Path) -> str:
  del results  # the raw cosines are not in the JSON; the encoder's cache has them
  sts.scatter(*sts.stsb_scores(encoder, folder, "test"), output / "stsb_test.png")
  return "stsb_test.png"


def _tatoeba_bars(encoder, folder: pathlib.Path, results: dict, output: pathlib.Path) -> str:
  del encoder, folder
  tatoeba.bar_plot(results, output / "tatoeba.png")
  return "tatoeba.png"


SUITES: dict[str, Suite] = {
    "sts12-16": Suite(
        "sts12-16/raw", lambda enc, folder, o: sts.evaluate_english_sts(enc, folder),
        sts.english_sts_table, "English STS 2012–2016"),
    "stsb": Suite(
        "stsb", lambda enc, folder, o: sts.evaluate_stsb(enc, folder),
        sts.stsb_table, "STS Benchmark", plot=_stsb_scatter),
    "stsb-multi-mt": Suite(
        "stsb-multi-mt",
        lambda enc, folder, o: sts.evaluate_stsb_multi_mt(
            enc, folder, languages=o.stsb_multi_mt_languages),
        sts.crosslingual_table, "Multilingual and cross-lingual STS (STSb-multi-mt, test)"),
    "sts17": Suite(
        ("sts17", "STS2017.eval.v1.1"), lambda enc, folder, o: sts.evaluate_sts17(enc, folder),
        sts.crosslingual_table, "SemEval-2017 cross-lingual STS",
        "the SemEval-2017 STS test files (STS.input.track*.txt / STS.gs.track*.txt); unzip "
        "the official STS2017.eval.v1.1.zip and STS2017.gs.zip into <data>/sts17"),
    "tatoeba": Suite(
        tatoeba.FOLDER,
        lambda enc, folder, o: tatoeba.evaluate(
            enc, folder, languages=o.tatoeba_languages,
            training_languages=o.training_languages),
        tatoeba.table, "Tatoeba bitext retrieval (accuracy)", plot=_tatoeba_bars),
    "flores": Suite(
        flores.FOLDERS,
        lambda enc, folder, o: flores.evaluate(
            enc, folder, split=o.flores_split, training_languages=o.training_languages),
        flores.table, "FLORES retrieval to and from English (xsim error rate)",
        "unpack the FLORES-200 release (flores200_dataset.tar.gz: dev/ and devtest/ of "
        "<code>.dev / <code>.devtest files) into a --data_dir root"),
    "bucc": Suite(
        "bucc2018",
        lambda enc, folder, o: bucc.evaluate(enc, folder, pairs=o.mining_pairs,
                                             index=o.mining_index),
        bucc.table, "BUCC-style bitext mining (F1)",
        "the BUCC 2018 files, or build a BUCC-format task from real sentences with "
        "`python -m vmsst.build_bucc --data_dir=../shared/data --output=DIR` "
        "and add DIR to --data_dir"),
    "question_retrieval": Suite(
        "question_retrieval", lambda enc, folder, o: question_retrieval.evaluate(enc, folder),
        question_retrieval.table, "Question retrieval (R@1)",
        "build a retrieval set with `python -m vmsst.build_question_retrieval "
        "--data_dir=../shared/data --output=DIR` and add DIR to --data_dir"),
    "xnli": Suite(
        "xnli_de", lambda enc, folder, o: pair_ranking.evaluate(enc, folder),
        pair_ranking.table, "Triplet and XNLI-style error rates"),
    "mewsc16": Suite(
        "mewsc16", lambda enc, folder, o: clustering.evaluate(enc, folder),
        clustering.table, "Short-text clustering (MewsC-16 protocol, accuracy)",
        "the MewsC-16 files (<lang>_sentences.txt.gz, <lang>_categories.txt), or build a "
        "set in that format with `python -m vmsst.build_clustering --data_dir=... "
        "--output=DIR` and add DIR to --data_dir"),
    "parallel": Suite(
        None, lambda enc, folder, o: parallel.evaluate(
            enc, o.src, o.trg, languages=(o.src_language, o.trg_language)),
        parallel.table, "Retrieval between two aligned files (accuracy, xsim)",
        "name two line-aligned files with --src=a.txt --trg=b.txt"),
}


# Groups run what is present and list what they skip; a named suite must exist.
GROUPS = {
    "all": list(SUITES),
    # What the paper's Score averages (see paper_score.py): the quick main-job choice.
    "score": ["sts12-16", "stsb", "stsb-multi-mt", "sts17", "tatoeba", "bucc",
              "question_retrieval"],
}


def parse_suites(spec: str) -> tuple[list[str], bool]:
  """(suite names, whether a group was asked); unknown names are an error."""
  names = [s.strip() for s in spec.split(",") if s.strip()]
  if len(names) == 1 and names[0] in GROUPS:
    return list(GROUPS[names[0]]), True
  unknown = [n for n in names if n not in SUITES]
  if unknown:
    raise ValueError(f"unknown suite(s) {unknown}; choose from {', '.join(SUITES)} or a "
                     f"group: {', '.join(GROUPS)}.")
  return names, False


def _folders(name: str) -> tuple[str, ...]:
  folder = SUITES[name].folder
  return (folder,) if isinstance(folder, str) else tuple(folder or ())


def locate(name: str, data_dirs: Sequence[pathlib.Path],
           options: SuiteOptions | None = None) -> pathlib.Path | None:
  """The suite's folder under the first data dir that has it (parallel: --src, if both given)."""
  if SUITES[name].folder is None:
    options = options or SuiteOptions()
    return files.as_path(options.src) if options.src and options.trg else None
  for data_dir in data_dirs:
    for folder in _folders(name):
      if (data_dir / folder).is_dir():
        return data_dir / folder
  return None


def missing_message(name: str, data_dirs: Sequence[pathlib.Path]) -> str:
  """Names the paths searched and how to get the data."""
  if SUITES[name].folder is None:
    return f"suite {name}: no files given. To run it: {SUITES[name].how_to_get}."
  searched = ", ".join(str(d / f) for d in data_dirs for f in _folders(name))
  fix = SUITES[name].how_to_get or (
      "it ships with the shared corpora (shared/data/README.md); pass their root with --data_dir")
  return f"suite {name}: no data at {searched}. To get it: {fix}."
