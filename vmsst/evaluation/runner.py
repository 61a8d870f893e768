"""Running the benchmark suites over an encoder: the flags that choose them, the run, its files.

`run_suites` writes results.json (every number x100), report.md and the
plots; `locate_suites` finds each suite's data before a model loads.
`python -m vmsst.evaluate` and `python -m vmsst.compare` both run suites
through this module (compare shares the suite flags).
"""

import dataclasses
import json
import math
import pathlib
import time
from typing import Sequence

import numpy as np
from absl import flags
from absl import logging

from vmsst.base import files
from vmsst.base import languages
from vmsst.encoding import encoder_flags
from vmsst.encoding import protocol
from vmsst.evaluation import paper_score as score_lib
from vmsst.evaluation import report
from vmsst.evaluation import suites as suites_lib


def define_suite_flags() -> None:
  """The flags choosing data, suites and output (compare shares them)."""
  flags.DEFINE_list("data_dir", ["../shared/data"], "Data roots, searched in order.")
  flags.DEFINE_string("suite", "all", "Comma list of suites (" + ", ".join(suites_lib.SUITES)
                      + "), or a group: all, or score (what the paper's Score averages).")
  flags.DEFINE_string("output", None, "Where results.json, report.md and plots go.")
  flags.DEFINE_list("tatoeba_languages", None, "Tatoeba codes (default: all present).")
  flags.DEFINE_list("training_languages", None,
                    "Languages the model was trained on, for Tatoeba seen/unseen averages; "
                    "`ntrex128` stands for the NTREX-128 languages.")
  flags.DEFINE_list("stsb_multi_mt_languages", None, "STSb-multi-mt languages (default all).")
  flags.DEFINE_list("mining_pairs", None, "BUCC language pairs, e.g. de-en (default all).")
  flags.DEFINE_enum("mining_index", "exact", ["exact", "ivf"],
                    "BUCC neighbour search: exact, or a faiss IVF index per side (what "
                    "`python -m vmsst.mine --index=ivf` mines corpora with; its default geometry).")
  flags.DEFINE_string("split", None, "FLORES split: devtest (the default when present) or dev.")
  flags.DEFINE_string("src", None, "--suite=parallel: the source file, one sentence per line.")
  flags.DEFINE_string("trg", None, "--suite=parallel: the target file, line-aligned with --src.")
  encoder_flags.define_side_languages(when="--suite=parallel")


def options_from_flags(default_training_languages=None) -> suites_lib.SuiteOptions:
  """The suite options the parsed flags give."""
  f = flags.FLAGS
  return suites_lib.SuiteOptions(
      tatoeba_languages=f.tatoeba_languages,
      training_languages=training_languages(f.training_languages or default_training_languages),
      stsb_multi_mt_languages=f.stsb_multi_mt_languages, mining_pairs=f.mining_pairs,
      mining_index=f.mining_index,
      flores_split=f.split, src=f.src, trg=f.trg, src_language=f.src_language,
      trg_language=f.trg_language)


def run_suites(encoder: protocol.Encoder, *, data_dirs: Sequence[str], suite: str,
               output: str, options: suites_lib.SuiteOptions | None = None,
               batch_size: int = 256) -> dict:
  """Runs the suites, writes results.json, report.md and plots; returns the results."""
  options = options or suites_lib.SuiteOptions()
  roots = [files.as_path(d) for d in data_dirs]
  located, skipped = locate_suites(data_dirs, suite, options)
  unique = protocol.UniqueSentences(encoder, batch_size=batch_size)
  output_dir = files.as_path(output)
  output_dir.mkdir(parents=True, exist_ok=True)
  results, plots, seconds, truncated = {}, {}, {}, {}
  for name, folder in located.items():
    started = time.time()
    logging.info("suite %s from %s", name, folder)
    suite = suites_lib.SUITES[name]
    unique.take_asked()  # each suite counts the sentences it asks for, cached or not
    results[name] = suite.run(unique, folder, options)
    if suite.plot is not None:
      plots[name] = suite.plot(unique, folder, results[name], output_dir)
    seconds[name] = round(time.time() - started, 1)
    cut = unique.truncation(unique.take_asked())
    if cut is not None:
      truncated[name] = dataclasses.asdict(cut)
      (logging.warning if cut.truncated else logging.info)("suite %s: %s", name, cut)
    logging.info("suite %s done in %.0f s", name, seconds[name])
  results["_meta"] = {"encoder": encoder.name, "data_dirs": [str(r) for r in roots],
                      "suites": list(located), "skipped": skipped, "seconds": seconds,
                      "truncated": truncated}
  results["_score"] = score_lib.paper_score(results)
  results["_five_family_score"] = score_lib.five_family_score(results)
  results = _finite(results)
  (output_dir / "results.json").write_text(json.dumps(results, indent=1, ensure_ascii=False,
                                                      allow_nan=False))
  (output_dir / "report.md").write_text(report.render(results, plots))
  logging.info("wrote %s/results.json and report.md", output_dir)
  return results


def locate_suites(data_dirs: Sequence[str], suite: str, options: suites_lib.SuiteOptions
                  ) -> tuple[dict[str, pathlib.Path], dict[str, str]]:
  """({suite: its data folder}, {skipped suite: why}) for --suite over --data_dir.

  Cheap (no encoder, no reading), so the command calls it before the model loads.

  Raises:
    ValueError: an unknown suite name.
    FileNotFoundError: a suite named explicitly has no data (the message says
      where it looked and how to get it).
  """
  roots = [files.as_path(d) for d in data_dirs]
  names, run_all = suites_lib.parse_suites(suite)
  located, skipped = {}, {}
  for name in names:
    folder = suites_lib.locate(name, roots, options)
    if folder is not None:
      located[name] = folder
    elif run_all:
      skipped[name] = suites_lib.missing_message(name, roots)
    else:
      raise FileNotFoundError(suites_lib.missing_message(name, roots))
  return located, skipped


def _finite(tree):
  """NaN/inf (e.g. a correlation of constant scores) -> None: strict JSON has no NaN."""
  if isinstance(tree, dict):
    return {k: _finite(v) for k, v in tree.items()}
  if isinstance(tree, (list, tuple)):
    return [_finite(v) for v in tree]
  if isinstance(tree, np.generic):
    tree = tree.item()
  if isinstance(tree, float) and not math.isfinite(tree):
    return None
  return tree


def training_languages(codes: Sequence[str] | None) -> list[str] | None:
  """Expands `ntrex128` to the NTREX-128 languages."""
  if codes is None:
    return None
  expanded = []
  for code in codes:
    expanded += list(languages.NTREX_LANGUAGES) if code == "ntrex128" else [code]
  return expanded
