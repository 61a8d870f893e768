"""Short-text clustering accuracy (the MewsC-16 protocol).

Protocol, per language: embed every sentence, run k-means with k = the number
of distinct gold categories, match clusters to categories one-to-one with the
Hungarian algorithm on the contingency table, and report the fraction of
sentences whose cluster is matched to their category (×100). The score is the
mean of three k-means runs (seeds 0, 1, 2); `_mean` averages the languages.

Choices:
  * Embeddings are L2-normalized before k-means. Cosine is the suite's only
    similarity, and on unit vectors ||a − b||² = 2 − 2·cos(a, b), so Euclidean
    k-means then clusters by cosine (spherical k-means up to the centroid
    norm). Without it, vector length, which the suite never scores, would
    move sentences between clusters.
  * Each seeded run keeps the best of `n_init=10` k-means++ restarts (lowest
    inertia), so a run reports what k-means finds rather than one unlucky
    initialisation; the three seeds then show how stable that result is.
    Ten restarts of k ≈ 10 on a few thousand 512-d points take seconds on
    two cores, less than embedding those points.

Folder format (MewsC-16's, one pair of files per language):
  <folder>/<lang>_sentences.txt.gz   one sentence per line, UTF-8, gzipped
  <folder>/<lang>_categories.txt     one category label per line, aligned
A line whose sentence or category is empty is skipped and counted.

MewsC-16 is not in the shared data; vmsst/build_data/clustering.py writes a
stand-in in this format from the STS Benchmark.
"""

import pathlib
from typing import Mapping, Sequence

import numpy as np
import scipy.optimize
from sklearn import cluster as sk_cluster

from vmsst.base import files
from vmsst.encoding import protocol
from vmsst.encoding import similarity
from vmsst.base import text_files

DEFAULT_FOLDER = "mewsc16"
SEEDS = (0, 1, 2)
N_INIT = 10
SENTENCES_SUFFIX = "_sentences.txt.gz"
CATEGORIES_SUFFIX = "_categories.txt"


# ---------------------------------------------------------------- the metric


def clustering_accuracy(categories: Sequence, clusters: Sequence) -> float:
  """Accuracy ×100 of the best one-to-one map from clusters to categories.

  Args:
    categories: [n] gold labels (any hashable values).
    clusters: [n] cluster ids (any hashable values); their number may differ
      from the number of categories (the surplus side stays unmatched).

  Returns:
    100 · (sentences in matched cluster–category cells) / n. Invariant to any
    renaming of clusters or categories.
  """
  if len(categories) != len(clusters) or not len(categories):
    raise ValueError(f"need as many cluster ids as labels (got {len(clusters)} and "
                     f"{len(categories)}), at least one.")
  _, gold = np.unique(np.asarray(categories), return_inverse=True)
  _, found = np.unique(np.asarray(clusters), return_inverse=True)
  contingency = np.zeros((found.max() + 1, gold.max() + 1), np.int64)
  np.add.at(contingency, (found, gold), 1)
  rows, cols = scipy.optimize.linear_sum_assignment(contingency, maximize=True)
  return 100.0 * contingency[rows, cols].sum() / len(categories)


def kmeans(embeddings: np.ndarray, k: int, seed: int, n_init: int = N_INIT) -> np.ndarray:
  """int [n] cluster ids of float [n, d] embeddings, clustered by cosine (see module doc)."""
  model = sk_cluster.KMeans(n_clusters=k, n_init=n_init, random_state=seed)
  return model.fit_predict(similarity.normalize(embeddings).astype(np.float64))


# ---------------------------------------------------------------- reading


def find_folder(folder: str | pathlib.Path) -> pathlib.Path:
  """`folder` itself when it holds sentence files, else `folder/mewsc16`."""
  folder = files.as_path(folder)
  if not any(folder.glob(f"*{SENTENCES_SUFFIX}")) and (folder / DEFAULT_FOLDER).is_dir():
    folder = folder / DEFAULT_FOLDER
  if not any(folder.glob(f"*{SENTENCES_SUFFIX}")):
    raise ValueError(f"{folder}: no <lang>{SENTENCES_SUFFIX} files; point the clustering "
                     f"benchmark at a MewsC-16-format folder (see vmsst/evaluation/clustering.py).")
  return folder


def languages_in(folder: pathlib.Path) -> list[str]:
  """Sorted language codes that have a sentences file in `folder`."""
  return sorted(p.name[:-len(SENTENCES_SUFFIX)] for p in folder.glob(f"*{SENTENCES_SUFFIX}"))


def read_language(folder: pathlib.Path, lang: str) -> tuple[list[str], list[str], int]:
  """(sentences [n], categories [n], skipped) of one language.

  Raises:
    ValueError: the categories file is missing or has a different line count.
  """
  sentence_path = folder / f"{lang}{SENTENCES_SUFFIX}"
  category_path = folder / f"{lang}{CATEGORIES_SUFFIX}"
  if not category_path.is_file():
    raise ValueError(f"{category_path}: missing; every {sentence_path.name} needs an aligned "
                     f"{category_path.name} (one category per line).")
  with files.open_text(sentence_path, "rt", newline="\n") as f:
    sentence_lines = f.read().split("\n")
  with files.open_text(category_path, newline="\n") as f:
    category_lines = f.read().split("\n")
  for lines in (sentence_lines, category_lines):
    if lines and lines[-1] == "":
      lines.pop()  # The final newline ends the last line; it starts no new one.
  if len(sentence_lines) != len(category_lines):
    shorter = category_path if len(category_lines) < len(sentence_lines) else sentence_path
    line = min(len(sentence_lines), len(category_lines)) + 1
    raise ValueError(f"{shorter}:{line}: file ends here, but {sentence_path.name} has "
                     f"{len(sentence_lines)} lines and {category_path.name} "
                     f"{len(category_lines)}; they must be line-aligned (one category per "
                     f"sentence).")
  pairs = [(s.strip(), c.strip()) for s, c in zip(sentence_lines, category_lines)]
  kept = [(s, c) for s, c in pairs if s and c]
  return [s for s, _ in kept], [c for _, c in kept], len(pairs) - len(kept)


# ---------------------------------------------------------------- benchmark


def evaluate_language(encoder: protocol.UniqueSentences, sentences: Sequence[str],
                      categories: Sequence[str], *, seeds: Sequence[int] = SEEDS,
                      n_init: int = N_INIT, desc: str = "clustering") -> dict:
  """{"accuracy", "runs", "n", "k"} for one language; accuracy is the mean over seeds."""
  k = len(set(categories))
  if k < 2 or len(sentences) < k:
    raise ValueError(f"{desc}: clustering needs at least 2 categories and as many sentences "
                     f"as categories (got {len(sentences)} sentences, {k} categories).")
  embeddings = encoder.encode(list(sentences), desc=desc)
  runs = [clustering_accuracy(categories, kmeans(embeddings, k, seed, n_init)) for seed in seeds]
  return {"accuracy": float(np.mean(runs)), "runs": [float(r) for r in runs],
          "n": len(sentences), "k": k}


def evaluate(encoder: protocol.UniqueSentences, folder: str | pathlib.Path, *,
             languages: Sequence[str] | None = None, seeds: Sequence[int] = SEEDS,
             n_init: int = N_INIT) -> dict:
  """Clustering accuracy ×100 per language of a MewsC-16-format folder.

  Args:
    encoder: embeds sentences (float32 [n, d]).
    folder: the MewsC-16-format folder, or a data root holding `mewsc16/`.
    languages: codes to evaluate; default every language in the folder.
    seeds: one k-means run per seed; the reported accuracy is their mean.
    n_init: k-means++ restarts per run (best inertia kept).

  Returns:
    {lang: {"accuracy", "runs": [per seed], "n", "k", "skipped_lines"}, ...,
     "_mean": mean accuracy over languages}.
  """
  folder = find_folder(folder)
  available = languages_in(folder)
  missing = sorted(set(languages or ()) - set(available))
  if missing:
    raise ValueError(f"{folder}: no {SENTENCES_SUFFIX} file for {missing}; available: "
                     f"{available}.")
  results = {}
  for lang in languages or available:
    sentences, categories, skipped = read_language(folder, lang)
    results[lang] = evaluate_language(encoder, sentences, categories, seeds=seeds,
                                      n_init=n_init, desc=f"clustering {lang}")
    results[lang]["skipped_lines"] = skipped
  results["_mean"] = float(np.mean([r["accuracy"] for r in results.values()]))
  return results


def table(results: Mapping) -> str:
  """Markdown: one row per language, then the mean."""
  lines = ["| language | accuracy | runs (seeds 0,1,2) | n | k | skipped |",
           "|---|---:|---|---:|---:|---:|"]
  for lang, r in sorted((k, v) for k, v in results.items() if not k.startswith("_")):
    runs = " / ".join(f"{x:.1f}" for x in r["runs"])
    lines.append(f"| {lang} | {r['accuracy']:.1f} | {runs} | {r['n']} | {r['k']} | "
                 f"{r.get('skipped_lines', 0)} |")
  lines.append(f"| **mean** | **{results['_mean']:.1f}** | | | | |")
  return "\n".join(lines)
