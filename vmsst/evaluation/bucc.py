"""BUCC 2018 parallel-sentence mining: read the task, mine pairs, score F1.

Mining itself (neighbour search, margin scores, candidates, one-to-one
selection) is vmsst/mining/, which `python -m vmsst.mine` runs on two files.

The task (Zweigenbaum et al., 2018): two large monolingual sets, a few
percent of whose sentences are translations of each other; find those pairs.
Layout under a root, one directory per language pair (the official one):

    <root>/<src>-<trg>/<src>-<trg>.<split>.<src>   lines "de-000000001<TAB>sentence"
    <root>/<src>-<trg>/<src>-<trg>.<split>.<trg>   lines "en-000000001<TAB>sentence"
    <root>/<src>-<trg>/<src>-<trg>.<split>.gold    lines "de-000000001<TAB>en-000000042"

with splits `sample`, `training` and `test`. BUCC 2018 itself is not
shipped here; vmsst/build_data/bucc.py writes a task in this layout from real
translations.

Mining is vmsst/mining (Artetxe & Schwenk's margin scores, `forward`,
`backward`, `max` retrieval; its docstring has the formulas), so memory stays
bounded on 10^6-sentence sides.

A threshold on the score is chosen to maximize F1 against the `training`
gold and applied to `test`, as in the shared task. The headline figures are
"cosine" (cosine score, max retrieval) and "margin" (ratio margin, max
retrieval, LASER's BUCC protocol); every scoring x retrieval pair is kept in
a detail section.
"""

import dataclasses
import itertools
import pathlib
from typing import Mapping, Sequence

import numpy as np

from vmsst.base import files
from vmsst.encoding import protocol
from vmsst.mining import approximate
from vmsst.mining import bitext
from vmsst.base import text_files

SPLITS = ("sample", "training", "test")
SCORINGS = bitext.SCORINGS
RETRIEVALS = ("forward", "backward", "max")  # the BUCC detail columns
HEADLINE = {"cosine": "cosine/max", "margin": "ratio/max"}
_NO_TEST_GOLD = ("no test gold: figures are on the training split with the threshold tuned "
                 "on it (optimistic)")


# -------------------------------------------------------------- reading and writing


@dataclasses.dataclass(frozen=True)
class Split:
  """One split of one language pair.

  Attributes:
    source: id -> sentence of the source side, in file order.
    target: id -> sentence of the target side, in file order.
    gold: (source id, target id) pairs, or None when the split has no gold file.
  """
  source: Mapping[str, str]
  target: Mapping[str, str]
  gold: Sequence[tuple[str, str]] | None = None

  def gold_indices(self) -> set[tuple[int, int]]:
    """Gold as (row in source, row in target) pairs."""
    src = {i: n for n, i in enumerate(self.source)}
    trg = {i: n for n, i in enumerate(self.target)}
    return {(src[s], trg[t]) for s, t in self.gold or ()}


def split_paths(root: str | pathlib.Path, src: str, trg: str,
                split: str) -> dict[str, pathlib.Path]:
  """{"source", "target", "gold"} -> the split's three files (which may not exist)."""
  stem = files.as_path(root) / f"{src}-{trg}" / f"{src}-{trg}.{split}"
  return {"source": stem.with_name(f"{stem.name}.{src}"),
          "target": stem.with_name(f"{stem.name}.{trg}"),
          "gold": stem.with_name(f"{stem.name}.gold")}


def read_sentences(path: pathlib.Path) -> dict[str, str]:
  """id -> sentence from "id<TAB>sentence" lines; ValueError names file, line and fix."""
  sentences = {}
  for number, line in enumerate(text_files.read_lines(path), 1):
    sentence_id, tab, sentence = line.partition("\t")
    if not tab or not sentence_id:
      raise ValueError(f"{path}:{number}: expected 'id<TAB>sentence' (e.g. "
                       f"'de-000000001\\tEin Satz.'), got {line[:60]!r}; fix or delete the line.")
    if sentence_id in sentences:
      raise ValueError(f"{path}:{number}: duplicate id {sentence_id!r}; every id must be unique "
                       "within a file, renumber or delete the line.")
    sentences[sentence_id] = sentence
  return sentences


def read_gold(path: pathlib.Path, source_ids: Mapping[str, str],
              target_ids: Mapping[str, str]) -> list[tuple[str, str]]:
  """(source id, target id) pairs from "src_id<TAB>trg_id" lines, checked against both sides."""
  gold, seen = [], set()
  for number, line in enumerate(text_files.read_lines(path), 1):
    fields = line.split("\t")
    where = f"{path}:{number}"
    if len(fields) != 2:
      raise ValueError(f"{where}: expected 'source_id<TAB>target_id', got {line[:60]!r}; "
                       "fix or delete the line.")
    for side, sentence_id, ids in (("source", fields[0], source_ids),
                                   ("target", fields[1], target_ids)):
      if sentence_id not in ids:
        raise ValueError(f"{where}: {side} id {sentence_id!r} is not in the {side} sentence "
                         "file; the gold must match the sentence files of the same split.")
    if tuple(fields) in seen:
      raise ValueError(f"{where}: duplicate gold pair {line!r}; delete the repeat.")
    seen.add(tuple(fields))
    gold.append((fields[0], fields[1]))
  return gold


def read_split(root: str | pathlib.Path, src: str, trg: str, split: str) -> Split | None:
  """The split, None if its sentence files are absent; gold is None if its file is absent."""
  paths = split_paths(root, src, trg, split)
  if not paths["source"].exists() and not paths["target"].exists():
    return None
  for side in ("source", "target"):
    if not paths[side].exists():
      raise ValueError(f"{paths[side]} is missing but the other side of the {split} split "
                       "exists; both sentence files are needed.")
  source, target = read_sentences(paths["source"]), read_sentences(paths["target"])
  gold = read_gold(paths["gold"], source, target) if paths["gold"].exists() else None
  return Split(source, target, gold)


def write_split(root: str | pathlib.Path, src: str, trg: str, split: str, data: Split) -> None:
  """Writes the split in the official layout (gold only if `data.gold` is not None)."""
  paths = split_paths(root, src, trg, split)
  paths["source"].parent.mkdir(parents=True, exist_ok=True)
  for side in ("source", "target"):
    for sentence_id, sentence in getattr(data, side).items():
      if any(c in sentence_id + sentence for c in "\t\n\r"):
        raise ValueError(f"{side} sentence {sentence_id!r} holds a tab or line break; "
                         "collapse its whitespace before writing.")
    _write_lines(paths[side], (f"{i}\t{s}" for i, s in getattr(data, side).items()))
  if data.gold is not None:
    _write_lines(paths["gold"], (f"{s}\t{t}" for s, t in data.gold))


def _write_lines(path: pathlib.Path, lines) -> None:
  with files.open_text(path, "w", newline="\n") as f:
    f.writelines(f"{line}\n" for line in lines)


def language_pairs(root: str | pathlib.Path) -> list[tuple[str, str]]:
  """Sorted (src, trg) of every `<src>-<trg>/` directory holding at least one split."""
  found = []
  for directory in sorted(files.as_path(root).glob("*-*")):
    src, _, trg = directory.name.partition("-")
    if directory.is_dir() and any(split_paths(root, src, trg, s)["source"].exists()
                                  for s in SPLITS):
      found.append((src, trg))
  return found


def resolve_root(folder: str | pathlib.Path) -> pathlib.Path:
  """The directory holding `<src>-<trg>/`: `folder` itself or its `bucc2018/` child."""
  folder = files.as_path(folder)
  if not language_pairs(folder) and language_pairs(folder / "bucc2018"):
    return folder / "bucc2018"
  return folder


# ------------------------------------------------------------------ scoring against gold


def is_gold(pairs: np.ndarray, gold: set[tuple[int, int]]) -> np.ndarray:
  """bool [p]: whether each (source row, target row) of int [p, 2] is a gold pair."""
  return np.array([(int(s), int(t)) in gold for s, t in pairs], bool).reshape(-1)


def best_threshold(scores: np.ndarray, correct: np.ndarray, num_gold: int) -> tuple[float, float]:
  """The score threshold maximizing F1 of the pairs scoring >= it.

  Candidates with equal scores are kept or dropped together, so F1 is only
  evaluated after the last of a run of equal scores. The threshold is the
  midpoint between the lowest kept and the highest dropped score (the lowest
  score if all are kept); among equal F1 the highest threshold wins. With no
  correct candidate, the threshold lies just above the top score (keep none).

  Args:
    scores: float [p] candidate scores.
    correct: bool [p], whether each candidate is a gold pair.
    num_gold: size of the gold set (gold pairs never mined count as misses).

  Returns:
    (threshold, best F1 as a fraction in [0, 1]).
  """
  if num_gold < 1:
    raise ValueError("the gold set is empty; a threshold cannot be tuned without gold pairs.")
  if len(scores) == 0:
    return 0.0, 0.0
  order = np.argsort(-np.asarray(scores, np.float64), kind="stable")
  ranked = np.asarray(scores, np.float64)[order]
  true_positives = np.cumsum(np.asarray(correct, bool)[order])
  ends = np.flatnonzero(np.append(ranked[1:] != ranked[:-1], True))
  f1 = 2 * true_positives[ends] / (ends + 1 + num_gold)
  best = int(np.argmax(f1))
  if f1[best] == 0:
    return float(np.nextafter(ranked[0], np.inf)), 0.0
  last = ends[best]
  if last == len(ranked) - 1:
    return float(ranked[last]), float(f1[best])
  midpoint = (ranked[last] + ranked[last + 1]) / 2
  return float(midpoint if midpoint > ranked[last + 1] else ranked[last]), float(f1[best])


def precision_recall_f1(scores: np.ndarray, correct: np.ndarray, num_gold: int,
                        threshold: float) -> dict[str, float]:
  """{"precision", "recall", "f1"} ×100 of the candidates scoring >= threshold."""
  kept = np.asarray(scores) >= threshold
  true_positives = int(np.sum(np.asarray(correct, bool) & kept))
  precision = true_positives / max(int(kept.sum()), 1)
  recall = true_positives / max(num_gold, 1)
  f1 = 2 * true_positives / max(int(kept.sum()) + num_gold, 1)
  return {"precision": 100 * precision, "recall": 100 * recall, "f1": 100 * f1}


# ----------------------------------------------------------------------- benchmark


def evaluate(encoder: protocol.UniqueSentences, folder: str | pathlib.Path, *,
             pairs: Sequence[str] | None = None, k: int = 4, index: str = "exact",
             **knn_options) -> dict:
  """Mining P/R/F1 ×100 for every language pair under `folder`.

  Args:
    encoder: embeds sentences (`encode(sentences, desc=...)` -> float32 [n, d]).
    folder: the directory of `<src>-<trg>/` task directories, or its parent
      holding `bucc2018/` (what vmsst/build_data/bucc.py writes).
    pairs: "de-en"-style names (or one comma-separated string) to evaluate;
      all pairs found when None.
    k: neighbours per side for the margin and the candidates (4 in the paper).
    index: "exact", or "ivf" for approximate neighbours from one faiss IVF
      index per side (approximate.IvfOptions()'s geometry unless an
      `ivf=` option gives one): the F1 a corpus-scale mining run would get.
    **knn_options: query_block, key_block, backend for neighbors.knn; or ivf.

  Returns:
    {"<src>-<trg>": pair results (see `evaluate_pair`), ...,
     "_mean": {"cosine_f1", "margin_f1", "index"}: F1 averaged over the pairs,
     "_built": whether the task is vmsst/build_data/bucc.py's (`is_built`)}.
  """
  if index not in ("exact", "ivf"):
    raise ValueError(f"index={index!r}; pick exact or ivf.")
  if index == "ivf":
    knn_options.setdefault("ivf", approximate.IvfOptions())
  if isinstance(pairs, str):
    pairs = pairs.split(",")
  root = resolve_root(folder)
  found = [f"{s}-{t}" for s, t in language_pairs(root)]
  if not found:
    raise ValueError(f"no <src>-<trg>/ mining task under {root} (nor {root}/bucc2018); "
                     "build one with `python -m vmsst.build_bucc`.")
  missing = sorted(set(pairs or ()) - set(found))
  if missing:
    raise ValueError(f"pairs {missing} are not under {root}; found {found}.")
  results = {}
  for name in pairs or found:
    src, trg = name.split("-", 1)
    results[name] = evaluate_pair(encoder, root, src, trg, k=k, **knn_options)
  results["_mean"] = {
      f"{h}_f1": float(np.mean([results[n][h]["f1"] for n in pairs or found])) for h in HEADLINE}
  results["_mean"]["index"] = index
  results["_built"] = is_built(root)
  return results


# The first words of the README.md vmsst/build_data/bucc.py writes next to its task.
BUILT_NOTE = "Not BUCC 2018 data"


def is_built(root: pathlib.Path) -> bool:
  """Whether `root` is vmsst/build_data/bucc.py's stand-in task, not BUCC 2018 (its README says)."""
  readme = files.as_path(root) / "README.md"
  return readme.is_file() and BUILT_NOTE in readme.read_text(encoding="utf-8")


def evaluate_pair(encoder: protocol.UniqueSentences, root: pathlib.Path, src: str, trg: str,
                  *, k: int = 4, **knn_options) -> dict:
  """Tunes thresholds on `training`, scores `test` (or `training` when test has no gold).

  Returns:
    {"cosine": metrics, "margin": metrics, "detail": {"<scoring>/<retrieval>": metrics},
     "evaluated_on": "test" | "training", "note": str (only without test gold),
     "sizes": {split: {"source", "target", "gold"}}} where metrics is
    {"precision", "recall", "f1" (×100, on evaluated_on), "threshold" (raw score),
     "training_f1" (×100, at that threshold)}.
  """
  training = read_split(root, src, trg, "training")
  if training is None or training.gold is None:
    raise ValueError(f"{split_paths(root, src, trg, 'training')['gold']} and its sentence files "
                     "are needed to tune the threshold.")
  test = read_split(root, src, trg, "test")
  splits = {"training": training}
  if test is not None and test.gold is not None:
    splits["test"] = test
  evaluated_on = "test" if "test" in splits else "training"
  hoods = {name: _embed(encoder, split, f"bucc {src}-{trg} {name}", k, knn_options,
                        languages=(src, trg))
           for name, split in splits.items()}
  golds = {name: split.gold_indices() for name, split in splits.items()}
  detail = {}
  for scoring, retrieval in itertools.product(SCORINGS, RETRIEVALS):
    mined = {name: bitext.candidates(hood, scoring, retrieval) for name, hood in hoods.items()}
    correct = {name: is_gold(mined[name][0], golds[name]) for name in splits}
    threshold, training_f1 = best_threshold(mined["training"][1], correct["training"],
                                            len(golds["training"]))
    metrics = precision_recall_f1(mined[evaluated_on][1], correct[evaluated_on],
                                  len(golds[evaluated_on]), threshold)
    detail[f"{scoring}/{retrieval}"] = {**metrics, "threshold": threshold,
                                        "training_f1": 100 * training_f1}
  result = {h: detail[v] for h, v in HEADLINE.items()}
  result.update(detail=detail, evaluated_on=evaluated_on, sizes={
      name: {"source": len(s.source), "target": len(s.target), "gold": len(golds[name])}
      for name, s in splits.items()})
  if evaluated_on == "training":
    result["note"] = _NO_TEST_GOLD
  return result


def _embed(encoder: protocol.UniqueSentences, split: Split, desc: str, k: int,
           knn_options: Mapping, languages: tuple[str, str]) -> bitext.Neighbourhoods:
  """Embeds both sides of a split, each by its language's tower, and searches their
  neighbourhoods."""
  source = encoder.encode(list(split.source.values()), desc=f"{desc} source",
                          language=languages[0])
  target = encoder.encode(list(split.target.values()), desc=f"{desc} target",
                          language=languages[1])
  return bitext.neighbourhoods(source, target, k, **knn_options)


def table(results: Mapping) -> str:
  """Markdown: F1 by cosine and by margin per language pair, then every variant's F1."""
  names = [n for n in results if not n.startswith("_")]
  lines = ["| Pair | Cosine F1 | Margin F1 |", "|:--|--:|--:|"]
  for name in names:
    flag = " ¹" if results[name]["evaluated_on"] != "test" else ""
    lines.append(f"| {name}{flag} | {results[name]['cosine']['f1']:.1f} | "
                 f"{results[name]['margin']['f1']:.1f} |")
  if "_mean" in results:
    lines.append(f"| Mean | {results['_mean']['cosine_f1']:.1f} | "
                 f"{results['_mean']['margin_f1']:.1f} |")
  if any(results[n]["evaluated_on"] != "test" for n in names):
    lines += ["", f"¹ {_NO_TEST_GOLD}."]
  if results.get("_mean", {}).get("index") == "ivf":
    lines += ["", "Neighbours from a faiss IVF index per side (approximate, as corpus-scale "
              "mining runs), not the exact search."]
  variants = [f"{s}/{r}" for s, r in itertools.product(SCORINGS, RETRIEVALS)]
  lines += ["", "Detail: F1 by scoring/retrieval (threshold tuned on training for each).", "",
            "| Pair | " + " | ".join(variants) + " |", "|:--|" + "--:|" * len(variants)]
  for name in names:
    cells = " | ".join(f"{results[name]['detail'][v]['f1']:.1f}" for v in variants)
    lines.append(f"| {name} | {cells} |")
  return "\n".join(lines)
