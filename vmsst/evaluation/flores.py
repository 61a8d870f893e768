"""FLORES-200 / FLORES-101 multi-parallel retrieval: xsim to and from English.

The public releases (and their mirrors) ship one file per language, line i of
every file translating the same English sentence:

    flores200_dataset/dev/<code>.dev            997 lines each
    flores200_dataset/devtest/<code>.devtest    1012 lines each

`<code>` is ISO 639-3 with an ISO 15924 script (`eng_Latn`, `ace_Arab`;
FLORES-200) or ISO 639-3 alone (`eng`; FLORES-101). `split_folder` accepts
the dataset folder, its parent, one split folder, or a flat folder holding
`<code>.<split>` files, and the split (`devtest` unless told).

Every language is scored against the English file (the one whose code is
canonically `eng`) with LASER's xsim error rate (parallel.xsim_errors):
xx2en retrieves English for each xx line, en2xx the reverse; cosine and ratio
margin (k = 4). Averages: over all languages, and over the languages the
model was trained on (NTREX-128 + Multi30k unless told) vs the rest.

File-name codes map to vmsst.base.languages codes in this order: the code with its
script (`srp_Cyrl` -> `srp-Cyrl`), FLORES's script-distinguished Chinese
(`zho_Hant` -> `zho-TW`), then the ISO 639-3 part (`deu_Latn` -> `deu`,
`pes_Arab` -> `fas`). A code that maps to nothing (`ace_Arab`) is still
evaluated, counts among "the rest", and is listed under `_unknown` and in
the log, never dropped. The script of a code whose language has one usual
script in vmsst.base.languages is not checked: romanized `arb_Latn` maps to `arb`.
"""

import pathlib
from typing import Mapping, Sequence

import numpy as np
from absl import logging

from vmsst_tasks.sources import pair_readers
from vmsst.base import files
from vmsst.base import languages as languages_lib
from vmsst.encoding import protocol
from vmsst.evaluation import parallel
from vmsst.base import text_files

FOLDERS = ("flores200_dataset", "flores101_dataset", "flores")  # what the suite looks for
SPLITS = ("devtest", "dev")  # the first present is the default
# What a model of this project trains on, unless --training_languages says otherwise.
TRAINING_LANGUAGES = tuple(languages_lib.NTREX_LANGUAGES) + tuple(
    pair_readers.MULTI30K_LANGUAGES.values())
# FLORES codes whose script picks another variant than the ISO 639-3 part alone would.
_SCRIPT_VARIANTS = {"zho_hans": "zho-CN", "zho_hant": "zho-TW"}


def canonical(code: str) -> str | None:
  """The vmsst.base.languages code of a FLORES file-name code, None when unknown."""
  key = code.lower()
  if key in _SCRIPT_VARIANTS:
    return _SCRIPT_VARIANTS[key]
  for candidate in (code, code.split("_")[0]):
    try:
      return languages_lib.canonical_language(candidate)
    except ValueError:
      continue
  return None


def split_folder(folder: pathlib.Path, split: str | None = None) -> tuple[pathlib.Path, str]:
  """(the directory holding `<code>.<split>` files, the split) under a FLORES folder.

  Raises:
    FileNotFoundError: naming what was searched, when no split folder or
      file of the split is found.
  """
  folder = files.as_path(folder)
  splits = [split] if split else list(SPLITS)
  for name in splits:
    for candidate in (folder / name, *(folder / f / name for f in FOLDERS), folder):
      if candidate.is_dir() and any(candidate.glob(f"*.{name}")):
        return candidate, name
  raise FileNotFoundError(
      f"no FLORES files <code>.{' or .'.join(splits)} under {folder}, {folder}/<split>/ or "
      f"{folder}/flores200_dataset/<split>/; unpack flores200_dataset.tar.gz (FLORES-200) "
      "there" + ("" if split else ", or pass --split") + ".")


def read_split(folder: pathlib.Path, split: str) -> dict[str, list[str]]:
  """File-name code -> lines, sorted by code; every file has as many lines as the first.

  Raises:
    ValueError: naming both files and counts, when line counts differ.
  """
  texts = {path.name[:-len(split) - 1]: text_files.read_lines(path)
           for path in sorted(folder.glob(f"*.{split}"))}
  first = next(iter(texts))
  for code, lines in texts.items():
    if len(lines) != len(texts[first]):
      raise ValueError(f"{folder / f'{code}.{split}'} has {len(lines)} lines but "
                       f"{folder / f'{first}.{split}'} has {len(texts[first])}; FLORES files "
                       "are line-aligned (line i of each translates the same sentence).")
  if not texts[first]:
    raise ValueError(f"{folder / f'{first}.{split}'} and every other .{split} file are empty.")
  return texts


def english_code(codes: Sequence[str], folder: pathlib.Path) -> str:
  """The one file-name code that is English (eng_Latn in FLORES-200, eng in FLORES-101)."""
  english = [c for c in codes if canonical(c) == "eng"]
  if len(english) != 1:
    raise ValueError(f"{folder} needs exactly one English file (eng_Latn.* or eng.*) to "
                     f"retrieve against; found {english or 'none'}.")
  return english[0]


def evaluate(encoder: protocol.UniqueSentences, folder: pathlib.Path, *,
             split: str | None = None, training_languages: Sequence[str] | None = None,
             k: int = parallel.MARGIN_K) -> dict:
  """xsim error ×100 of every language to and from English, and the averages.

  Args:
    encoder: `protocol.UniqueSentences`.
    folder: a FLORES folder (see `split_folder`).
    split: "devtest" or "dev" (default: devtest if present).
    training_languages: codes the model was trained on (any spelling
      vmsst.base.languages knows); default NTREX-128 + Multi30k.
    k: margin neighbourhood.

  Returns:
    {"<code as in the file name>": {"language": canonical code or None,
       "xx2en", "en2xx" (cosine xsim), "xx2en_margin", "en2xx_margin",
       "avg", "avg_margin" (of the two directions), "n"},
     "_mean", "_mean_margin": avg over languages, "_languages": count,
     "_training", "_rest": {"mean", "mean_margin", "languages"},
     "_unknown": codes without a canonical code, "_english": the pivot's code,
     "_split", "_folder", "_k"}.
  """
  directory, split = split_folder(folder, split)
  texts = read_split(directory, split)
  pivot = english_code(list(texts), directory)
  english = encoder.encode(texts.pop(pivot), desc=f"flores {pivot}",
                           language=languages_lib.ENGLISH)
  logging.info("flores %s: %d languages against %s, %d lines each, from %s", split, len(texts),
               pivot, len(english), directory)
  results = {}
  for code, lines in texts.items():
    embedded = encoder.encode(lines, desc=f"flores {code}", language=canonical(code) or code)
    errors = parallel.xsim_errors(embedded, english, k=k)
    results[code] = {"language": canonical(code),
                     "xx2en": errors["forward"], "en2xx": errors["backward"],
                     "xx2en_margin": errors["forward_margin"],
                     "en2xx_margin": errors["backward_margin"],
                     "avg": (errors["forward"] + errors["backward"]) / 2,
                     "avg_margin": (errors["forward_margin"] + errors["backward_margin"]) / 2,
                     "n": len(lines)}
  unknown = [c for c, r in results.items() if r["language"] is None]
  if unknown:
    logging.warning("flores: %d codes unknown to vmsst.base.languages, evaluated and counted as "
                    "not trained on: %s", len(unknown), " ".join(unknown))
  trained = {languages_lib.canonical_language(c)
             for c in (TRAINING_LANGUAGES if training_languages is None else training_languages)}
  seen = [c for c, r in results.items() if r["language"] in trained]
  results.update(_mean=_mean(results, results, "avg"),
                 _mean_margin=_mean(results, results, "avg_margin"),
                 _languages=len(results),
                 _training=_group(results, seen),
                 _rest=_group(results, [c for c in results if c not in seen]),
                 _unknown=unknown, _english=pivot, _split=split, _folder=str(directory),
                 _k=min(k, len(english)))
  return results


def _mean(results: Mapping, codes, key: str) -> float | None:
  values = [results[c][key] for c in codes]
  return float(np.mean(values)) if values else None


def _group(results: Mapping, codes: Sequence[str]) -> dict:
  return {"mean": _mean(results, codes, "avg"), "mean_margin": _mean(results, codes, "avg_margin"),
          "languages": list(codes)}


def table(results: Mapping) -> str:
  """Markdown: xsim per language (error rates, lower is better), then the averages."""
  cell = lambda v: "–" if v is None else f"{v:.1f}"
  rows = [f"xsim error rate ×100 against `{results['_english']}` ({results['_split']}), "
          f"cosine and ratio margin (k = {results['_k']}); lower is better.", "",
          "| code | language | xx→en | en→xx | xx→en margin | en→xx margin | n |",
          "|---|---|---:|---:|---:|---:|---:|"]
  for code, r in results.items():
    if not code.startswith("_"):
      rows.append(f"| {code} | {r['language'] or 'unknown'} | {r['xx2en']:.1f} | "
                  f"{r['en2xx']:.1f} | {r['xx2en_margin']:.1f} | {r['en2xx_margin']:.1f} | "
                  f"{r['n']} |")
  rows += ["", "| average | languages | cosine | margin |", "|---|---:|---:|---:|",
           f"| all | {results['_languages']} | {cell(results['_mean'])} | "
           f"{cell(results['_mean_margin'])} |"]
  for key, label in (("_training", "trained on"), ("_rest", "the rest")):
    group = results[key]
    rows.append(f"| {label} | {len(group['languages'])} | {cell(group['mean'])} | "
                f"{cell(group['mean_margin'])} |")
  if results["_unknown"]:
    rows += ["", f"Codes unknown to vmsst.base.languages (counted in the rest): "
             f"{', '.join(results['_unknown'])}."]
  return "\n".join(rows)
