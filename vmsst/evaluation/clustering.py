"""Short-text clustering accuracy (the MewsC-16 protocol), and a builder for a stand-in set.

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

MewsC-16 is not in the shared data, so `build_clustering_task` writes the same
format from the STS Benchmark: the category of a sentence is the STSb `file`
column (MSRvid, images, headlines, MSRpar, answers-forums, ...), and the text
in 11 languages comes from stsb-multi-mt, whose rows are the STSb rows in the
same order (checked: 5749/1500/1379 rows, every English sentence equal to
STSb's after whitespace normalization, every score equal). Captions
(MSRvid, images) and news (headlines, MSRpar) are close in topic, so even a
strong encoder stays well below 100: a comparative, not an absolute, score.

  python -m vmsst.evaluation.clustering --data_dir=/work/shared/data --output=DIR
"""

import collections
import gzip
import json
import pathlib
from typing import Mapping, Sequence

from absl import app
from absl import flags
import numpy as np
import scipy.optimize
from sklearn import cluster as sk_cluster

from vmsst.evaluation import encoders
from vmsst.evaluation import similarity
from vmsst.evaluation import sts_files
from vmsst.evaluation import text_files

DEFAULT_FOLDER = "mewsc16"
SEEDS = (0, 1, 2)
N_INIT = 10
SENTENCES_SUFFIX = "_sentences.txt.gz"
CATEGORIES_SUFFIX = "_categories.txt"
STSB_LANGUAGES = ("de", "en", "es", "fr", "it", "ja", "nl", "pl", "pt", "ru", "zh")
STSB_SPLITS = ("train", "dev", "test")


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
  folder = pathlib.Path(folder)
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
  with gzip.open(sentence_path, "rt", encoding="utf-8", newline="\n") as f:
    sentence_lines = f.read().split("\n")
  with open(category_path, encoding="utf-8", newline="\n") as f:
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


def evaluate_language(encoder: encoders.UniqueSentences, sentences: Sequence[str],
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


def evaluate(encoder: encoders.UniqueSentences, folder: str | pathlib.Path, *,
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


# ---------------------------------------------------------------- builder


def _read_stsb(data_dir: pathlib.Path, split: str) -> list[tuple[str, str, str]]:
  """(file column, e.g. "MSRvid"; sentence1; sentence2) of every STSb row of one split."""
  pairs = sts_files.read_stsb(data_dir / "stsb", split)
  return [(f, text_files.one_line(a), text_files.one_line(b))
          for f, a, b in zip(pairs.source_files, pairs.sentences1, pairs.sentences2)]


def _read_multi_mt(data_dir: pathlib.Path, lang: str, split: str) -> list[tuple[str, str]]:
  """(sentence1, sentence2) rows of stsb-multi-mt, whitespace-normalized."""
  pairs = sts_files.read_stsb_multi_mt(data_dir / "stsb-multi-mt", lang, split)
  return [(text_files.one_line(a), text_files.one_line(b)) for a, b in zip(pairs.sentences1, pairs.sentences2)]


def _labelled_units(data_dir: pathlib.Path) -> tuple[list[tuple[str, int, int, str]], dict]:
  """Every STSb sentence with one unambiguous category, once: [(split, row, side, category)].

  A unit is one side (0 or 1) of one STSb row. An English sentence is kept at
  its first occurrence only, and dropped when it occurs under two categories,
  so every label is well defined; the same units are then read in every
  language. Also returns counts: all English sentences, the distinct ones
  kept, and the distinct ones dropped for having two categories.
  """
  units, categories_of = [], collections.defaultdict(set)
  for split in STSB_SPLITS:
    stsb = _read_stsb(data_dir, split)
    english = _read_multi_mt(data_dir, "en", split)
    if len(stsb) != len(english):
      raise ValueError(f"{data_dir}: stsb/sts-{split}.csv has {len(stsb)} rows but "
                       f"stsb-multi-mt/stsb-en-{split}.csv.gz {len(english)}; the builder "
                       f"needs the two row-aligned.")
    for row, ((category, *sides), mt_sides) in enumerate(zip(stsb, english)):
      if tuple(sides) != mt_sides:
        raise ValueError(f"stsb-multi-mt/stsb-en-{split}.csv.gz:{row + 1}: differs from "
                         f"stsb/sts-{split}.csv; the builder needs the two row-aligned.")
      for side, text in enumerate(sides):
        units.append((split, row, side, category, text))
        categories_of[text].add(category)
  kept, seen = [], set()
  for split, row, side, category, text in units:
    if len(categories_of[text]) == 1 and text not in seen:
      kept.append((split, row, side, category))
    seen.add(text)
  ambiguous = sum(len(c) > 1 for c in categories_of.values())
  return kept, {"english_sentences": len(units), "kept_distinct": len(kept),
                "dropped_ambiguous_distinct": ambiguous}


def _sample(units: list, max_per_category: int, seed: int) -> list:
  """At most `max_per_category` units per category, chosen by a seeded shuffle, in corpus order."""
  rng = np.random.default_rng(seed)
  by_category = collections.defaultdict(list)
  for index, unit in enumerate(units):
    by_category[unit[-1]].append(index)
  chosen = []
  for category in sorted(by_category):
    indices = by_category[category]
    chosen += [indices[i] for i in rng.permutation(len(indices))[:max_per_category]]
  return [units[i] for i in sorted(chosen)]


def build_clustering_task(data_dir: str | pathlib.Path, output: str | pathlib.Path, *,
                          languages: Sequence[str] = STSB_LANGUAGES, max_per_category: int = 250,
                          seed: int = 0, name: str = DEFAULT_FOLDER) -> dict:
  """Writes a MewsC-16-format clustering set built from STSb (see module doc).

  Every language gets the same sentences (the same STSb rows and sides), so
  accuracies are comparable across languages. Deterministic for a given seed.
  The folder is named like MewsC-16's by default so the `mewsc16` suite finds
  it; its SOURCE.md says what it really holds.

  Args:
    data_dir: the shared data root (holding stsb/ and stsb-multi-mt/).
    output: where to create `<name>/`.
    languages: stsb-multi-mt language codes.
    max_per_category: cap per category, keeping encoding cheap (9 categories
      × 250 = 2,250 sentences per language by default).
    seed: of the per-category sample.
    name: folder created under `output`.

  Returns:
    {"folder", "languages", "n", "categories": {category: count}, "source": {counts}}.
  """
  data_dir, folder = pathlib.Path(data_dir), pathlib.Path(output) / name
  unknown = sorted(set(languages) - set(STSB_LANGUAGES))
  if unknown:
    raise ValueError(f"no stsb-multi-mt data for {unknown}; choose from {STSB_LANGUAGES}.")
  units, source = _labelled_units(data_dir)
  units = _sample(units, max_per_category, seed)
  folder.mkdir(parents=True, exist_ok=True)
  for lang in languages:
    rows = {split: _read_multi_mt(data_dir, lang, split) for split in STSB_SPLITS}
    sentences = [rows[split][row][side] for split, row, side, _ in units]
    text = "".join(s + "\n" for s in sentences).encode("utf-8")
    # mtime=0: the same input writes the same bytes.
    (folder / f"{lang}{SENTENCES_SUFFIX}").write_bytes(gzip.compress(text, mtime=0))
    (folder / f"{lang}{CATEGORIES_SUFFIX}").write_text(
        "".join(u[-1] + "\n" for u in units), encoding="utf-8")
  (folder / "SOURCE.md").write_text(
      "# Not MewsC-16: an STSb-derived stand-in in its format\n\n"
      "Written by vmsst.evaluation.clustering.build_clustering_task from stsb/ (category = "
      f"the `file` column) and stsb-multi-mt/ (text), {max_per_category} sentences per "
      f"category, sample seed {seed}. See that module's docstring.\n", encoding="utf-8")
  return {"folder": str(folder), "languages": list(languages), "n": len(units),
          "categories": dict(sorted(collections.Counter(u[-1] for u in units).items())),
          "source": source}


# ---------------------------------------------------------------- CLI


def _define_flags() -> None:
  """Defined only when run as a command, so importing this module adds no flags."""
  flags.DEFINE_string("data_dir", None, "Shared data root (stsb/, stsb-multi-mt/).", required=True)
  flags.DEFINE_string("output", None, "Directory to write <name>/ into.", required=True)
  flags.DEFINE_list("languages", list(STSB_LANGUAGES), "stsb-multi-mt languages to write.")
  flags.DEFINE_integer("max_per_category", 250, "Sentences sampled per category.")
  flags.DEFINE_integer("seed", 0, "Seed of the per-category sample.")


def main(argv: Sequence[str]) -> None:
  if len(argv) > 1:
    raise app.UsageError(f"Unexpected arguments: {argv[1:]}")
  config = flags.FLAGS
  summary = build_clustering_task(config.data_dir, config.output, languages=config.languages,
                                  max_per_category=config.max_per_category, seed=config.seed)
  print(json.dumps(summary, indent=2))


if __name__ == "__main__":
  _define_flags()
  app.run(main)
