"""Tatoeba bitext retrieval (Artetxe & Schwenk 2019), the LASER v1 test files.

For each language xxx, `tatoeba.xxx-eng.xxx` and `tatoeba.xxx-eng.eng` are
line-aligned. Every xxx sentence retrieves its nearest English sentence of the
same file pair by cosine (xx2en), and every English sentence its nearest xxx
sentence (en2xx); accuracy is the fraction whose neighbour is the aligned line.
Scoring is strictly by line index, as SOURCE.md requires: duplicate sentences
are not removed, and among tied neighbours the lowest line index wins, so a
duplicate of the gold sentence earlier in the file counts as an error (the
deterministic reading of LASER's argmax).

Averages: over all evaluated languages, and — given the training languages —
over seen and unseen languages separately (the VMSST paper's Table 8).
Language codes are compared canonically (`lvs` ≡ `lav`, `cmn` ≡ `zho-CN`).
"""

import pathlib
from typing import Sequence

import numpy as np

from vmsst.base import languages as languages_lib
from vmsst.mining import neighbors
from vmsst.evaluation import plots
from vmsst.base import text_files

FOLDER = "tatoeba/v1"


def available_languages(folder: pathlib.Path) -> list[str]:
  """Codes xxx with both `tatoeba.xxx-eng.xxx` and `tatoeba.xxx-eng.eng`, sorted."""
  codes = []
  for path in sorted(folder.glob("tatoeba.*-eng.eng")):
    code = path.name[len("tatoeba."):-len("-eng.eng")]
    if (folder / f"tatoeba.{code}-eng.{code}").exists():
      codes.append(code)
  return codes


def read_pairs(folder: pathlib.Path, code: str) -> tuple[list[str], list[str]]:
  """(xxx sentences, English sentences), line-aligned; a count mismatch is an error."""
  paths = [folder / f"tatoeba.{code}-eng.{code}", folder / f"tatoeba.{code}-eng.eng"]
  for path in paths:
    if not path.exists():
      raise FileNotFoundError(f"{path} is missing; Tatoeba needs both sides of "
                              f"tatoeba.{code}-eng (LASER data/tatoeba/v1).")
  source, english = (text_files.read_lines(path) for path in paths)
  if len(source) != len(english):
    raise ValueError(f"{paths[0]} has {len(source)} lines but {paths[1]} has {len(english)}; "
                     "the two files must be line-aligned.")
  return source, english


def retrieval_accuracy(queries: np.ndarray, keys: np.ndarray) -> float:
  """Fraction of rows i whose cosine nearest key (lowest index on ties) is key i."""
  _, indices = neighbors.knn(queries, keys, 1)
  return float(np.mean(indices[:, 0] == np.arange(len(queries))))


def evaluate(encoder, folder: pathlib.Path, *, languages: Sequence[str] | None = None,
             training_languages: Sequence[str] | None = None) -> dict:
  """Per-language xx2en / en2xx / avg accuracy ×100 and the averages.

  Args:
    encoder: `protocol.UniqueSentences`.
    folder: the `tatoeba/v1` directory.
    languages: codes to evaluate (default: every language present).
    training_languages: codes the model was trained on; adds `_seen` and
      `_unseen` averages.

  Returns:
    {"deu": {"xx2en", "en2xx", "avg", "n"}, ..., "_mean": avg over languages,
     "_mean_xx2en": ..., "_languages": count, and `_seen` / `_unseen` (each
     {"mean", "languages"}) when training languages are given}.
  """
  present = available_languages(folder)
  if not present:
    raise FileNotFoundError(f"no tatoeba.xxx-eng.{{xxx,eng}} pairs under {folder}.")
  codes = list(languages) if languages else present
  missing = sorted(set(codes) - set(present))
  if missing:
    raise FileNotFoundError(f"Tatoeba languages {missing} have no files under {folder}; "
                            f"present: {' '.join(present)}.")
  results = {}
  for code in codes:
    source, english = read_pairs(folder, code)
    # A two-tower encoder embeds each side with its language's tower (protocol.tower_of).
    src = encoder.encode(source, desc=f"tatoeba {code}", language=code)
    eng = encoder.encode(english, desc=f"tatoeba {code}-eng", language=languages_lib.ENGLISH)
    xx2en, en2xx = 100 * retrieval_accuracy(src, eng), 100 * retrieval_accuracy(eng, src)
    results[code] = {"xx2en": xx2en, "en2xx": en2xx, "avg": (xx2en + en2xx) / 2,
                     "n": len(source)}
  results.update(_averages(results, codes, training_languages))
  return results


def _averages(per_language: dict, codes: Sequence[str],
              training_languages: Sequence[str] | None) -> dict:
  averages = {
      "_mean": float(np.mean([per_language[c]["avg"] for c in codes])),
      "_mean_xx2en": float(np.mean([per_language[c]["xx2en"] for c in codes])),
      "_languages": len(codes),
  }
  if training_languages is not None:
    trained = {languages_lib.canonical_language(c) for c in training_languages}
    seen = [c for c in codes if languages_lib.canonical_language(c) in trained]
    unseen = [c for c in codes if c not in seen]
    for key, group in (("_seen", seen), ("_unseen", unseen)):
      averages[key] = {
          "mean": float(np.mean([per_language[c]["avg"] for c in group])) if group else None,
          "languages": group,
      }
  return averages


def table(results: dict) -> str:
  """Markdown: one row per language, then the averages (Table 8 layout)."""
  rows = ["| language | xx→en | en→xx | avg | n |", "|---|---:|---:|---:|---:|"]
  for code, r in results.items():
    if not code.startswith("_"):
      rows.append(f"| {code} | {r['xx2en']:.1f} | {r['en2xx']:.1f} | {r['avg']:.1f} | {r['n']} |")
  rows.append(f"| **mean ({results['_languages']} languages)** | {results['_mean_xx2en']:.1f} |"
              f" | **{results['_mean']:.1f}** | |")
  for key, label in (("_seen", "seen in training"), ("_unseen", "unseen in training")):
    if key in results and results[key]["mean"] is not None:
      group = results[key]
      rows.append(f"| {label} ({len(group['languages'])}) | | | {group['mean']:.1f} | |")
  return "\n".join(rows)


def bar_plot(results: dict, path: pathlib.Path) -> None:
  """Per-language bars of the two-direction average, sorted, to `path` (PNG)."""
  codes = sorted((c for c in results if not c.startswith("_")), key=lambda c: results[c]["avg"])
  seen = set(results.get("_seen", {}).get("languages", []))
  fig = plots.figure((max(4, 0.22 * len(codes) + 1), 3.2))
  ax = fig.add_subplot()
  ax.bar(codes, [results[c]["avg"] for c in codes],
         color=["tab:blue" if c in seen else "tab:gray" for c in codes])
  ax.set_ylabel("accuracy (avg of both directions)")
  ax.set_ylim(0, 100)
  ax.set_title("Tatoeba" + (" (blue: seen in training)" if seen else ""))
  ax.tick_params(axis="x", labelrotation=90, labelsize=7)
  plots.save(fig, path)
