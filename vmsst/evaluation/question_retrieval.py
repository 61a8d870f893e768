"""Question retrieval R@1: find a query's paraphrase in a large knowledge base.

The VMSST paper's NQ/MKQA-over-PAQ protocol: queries in many languages each
retrieve their nearest entry, by cosine, from one large English KB of
questions; R@1 is the fraction whose nearest entry is a gold entry (×100).
Ties go to the lower KB index (the order of kb.tsv), so a non-gold entry
that ties with the gold one and comes first counts as a miss. The search is
exact and bounded in memory: `neighbors.knn` walks the KB in blocks.

File format, one folder per set (UTF-8, TAB-separated, no header):
  <folder>/<set>/queries.tsv   query_id<TAB>language<TAB>text
  <folder>/<set>/kb.tsv        kb_id<TAB>text
  <folder>/<set>/gold.tsv      query_id<TAB>kb_id  (one line per gold entry;
                               a query may have several, it must have one)
Ids are unique within their file. Blank lines (and repeated gold lines) are
skipped and counted; any other malformed line is an error naming the line.

Results: per set, R@1 per query language, their mean over languages (each
language weighs the same, as the paper averages languages), R@1 over all
queries, and `_mean` over sets.

The builder of sets in this format from the shared data (no NQ, MKQA or PAQ
here) is vmsst/build_data/question_retrieval.py.
"""

import collections
import pathlib
from typing import Mapping, NamedTuple, Sequence

import numpy as np

from vmsst.base import files
from vmsst.base import languages as languages_lib
from vmsst.encoding import protocol
from vmsst.mining import neighbors
from vmsst.base import text_files

FOLDER = "question_retrieval"
QUERIES, KB, GOLD = "queries.tsv", "kb.tsv", "gold.tsv"


class RetrievalSet(NamedTuple):
  """One set read from disk; gold[i] holds KB row indices of query i."""
  query_ids: list[str]
  languages: list[str]
  queries: list[str]
  kb: list[str]
  gold: list[set[int]]
  skipped: dict


# ---------------------------------------------------------------- the metric


def nearest_is_gold(queries: np.ndarray, kb: np.ndarray, gold: Sequence[set[int]], *,
                    query_block: int = 2048, key_block: int = 8192) -> np.ndarray:
  """bool [nq]: whether the cosine-nearest KB row of each query is gold.

  Args:
    queries: float [nq, d] query embeddings.
    kb: float [nk, d] KB embeddings.
    gold: nq sets of KB row indices.
    query_block, key_block: block sizes of the bounded-memory search.
  """
  _, indices = neighbors.knn(queries, kb, 1, query_block=query_block, key_block=key_block)
  return np.array([int(i) in g for i, g in zip(indices[:, 0], gold)], bool)


# ---------------------------------------------------------------- reading


def _read_tsv(path: pathlib.Path, columns: int, names: str) -> tuple[list[tuple], int]:
  """([(1-based line, field, ...)] of `columns` non-empty fields, blank lines skipped)."""
  if not path.is_file():
    raise ValueError(f"{path}: missing; a question-retrieval set needs {QUERIES}, {KB} and "
                     f"{GOLD} (see vmsst/evaluation/question_retrieval.py).")
  return text_files.read_tsv(path, columns, names)


def _index(path: pathlib.Path, rows: Sequence[tuple]) -> dict[str, int]:
  """{id: row index}; a repeated id is an error."""
  index = {}
  for i, (number, key, *_) in enumerate(rows):
    if index.setdefault(key, i) != i:
      raise ValueError(f"{path}:{number}: id {key!r} repeats line {rows[index[key]][0]}; "
                       f"ids must be unique.")
  return index


def read_set(folder: str | pathlib.Path) -> RetrievalSet:
  """Reads and checks one set folder (see the module doc for the format)."""
  folder = files.as_path(folder)
  query_rows, query_blank = _read_tsv(folder / QUERIES, 3, "query_id, language, text")
  kb_rows, kb_blank = _read_tsv(folder / KB, 2, "kb_id, text")
  gold_rows, gold_blank = _read_tsv(folder / GOLD, 2, "query_id, kb_id")
  if not query_rows or not kb_rows:
    raise ValueError(f"{folder}: {QUERIES} and {KB} need at least one line each.")
  query_index, kb_index = _index(folder / QUERIES, query_rows), _index(folder / KB, kb_rows)
  gold, repeated = [set() for _ in query_rows], 0
  for number, query_id, kb_id in gold_rows:
    for key, index, name in ((query_id, query_index, QUERIES), (kb_id, kb_index, KB)):
      if key not in index:
        raise ValueError(f"{folder / GOLD}:{number}: {key!r} is not an id of {name}; fix the "
                         f"id or delete the line.")
    repeated += kb_index[kb_id] in gold[query_index[query_id]]
    gold[query_index[query_id]].add(kb_index[kb_id])
  for (number, query_id, *_), entries in zip(query_rows, gold):
    if not entries:
      raise ValueError(f"{folder / QUERIES}:{number}: query {query_id!r} has no line in "
                       f"{GOLD}; add its gold KB id or delete the query.")
  return RetrievalSet([r[1] for r in query_rows], [r[2] for r in query_rows],
                      [r[3] for r in query_rows], [r[2] for r in kb_rows], gold,
                      {"blank_lines": query_blank + kb_blank + gold_blank,
                       "repeated_gold_lines": repeated})


def find_sets(folder: str | pathlib.Path) -> dict[str, pathlib.Path]:
  """{set name: set folder} under `folder` (or `folder/question_retrieval`)."""
  folder = files.as_path(folder)
  if not any(folder.glob(f"*/{QUERIES}")) and (folder / FOLDER).is_dir():
    folder = folder / FOLDER
  sets = {p.parent.name: p.parent for p in sorted(folder.glob(f"*/{QUERIES}"))}
  if not sets:
    raise ValueError(f"{folder}: no <set>/{QUERIES}; build a set with `python -m "
                     f"vmsst.build_question_retrieval --data_dir=... --output=DIR`.")
  return sets


# ---------------------------------------------------------------- benchmark


def embed_queries(encoder: protocol.UniqueSentences, queries: Sequence[str],
                  query_languages: Sequence[str], desc: str) -> np.ndarray:
  """float32 [n, d]: each query embedded in its language (a two-tower encoder's tower)."""
  rows = collections.defaultdict(list)
  for i, language in enumerate(query_languages):
    rows[language].append(i)
  out = None
  for language, indices in rows.items():
    vectors = encoder.encode([queries[i] for i in indices], desc=f"{desc} {language} queries",
                             language=language)
    out = np.zeros((len(queries), vectors.shape[1]), np.float32) if out is None else out
    out[indices] = vectors
  return out


def evaluate_set(encoder: protocol.UniqueSentences, data: RetrievalSet, *,
                 languages: Sequence[str] | None = None, desc: str = "questions",
                 **blocks) -> dict:
  """R@1 ×100 of one set, per query language, over `languages` (default all)."""
  chosen = [i for i, lang in enumerate(data.languages) if not languages or lang in languages]
  if not chosen:
    raise ValueError(f"{desc}: no queries in languages {list(languages)}; the set has "
                     f"{sorted(set(data.languages))}.")
  kb = encoder.encode(data.kb, desc=f"{desc} KB", language=languages_lib.ENGLISH)
  queries = embed_queries(encoder, [data.queries[i] for i in chosen],
                          [data.languages[i] for i in chosen], desc)
  hits = nearest_is_gold(queries, kb, [data.gold[i] for i in chosen], **blocks)
  by_language = collections.defaultdict(list)
  for i, hit in zip(chosen, hits):
    by_language[data.languages[i]].append(hit)
  per_language = {lang: {"r@1": 100.0 * float(np.mean(h)), "queries": len(h)}
                  for lang, h in sorted(by_language.items())}
  return {"r@1": float(np.mean([r["r@1"] for r in per_language.values()])),
          "r@1_all_queries": 100.0 * float(np.mean(hits)), "queries": len(chosen),
          "kb": len(data.kb), "languages": per_language, "skipped": data.skipped}


def evaluate(encoder: protocol.UniqueSentences, folder: str | pathlib.Path, *,
             sets: Sequence[str] | None = None, languages: Sequence[str] | None = None,
             query_block: int = 2048, key_block: int = 8192) -> dict:
  """Question-retrieval R@1 ×100 of every set under `folder`.

  Args:
    encoder: embeds sentences (float32 [n, d]).
    folder: the `question_retrieval/` folder (or a data root holding it).
    sets: set names to evaluate; default every set.
    languages: query languages to keep; default all (the KB is always whole).
      A set with none of them is skipped and listed.
    query_block, key_block: memory bounds of the nearest-neighbour search.

  Returns:
    {set: {"r@1": mean over query languages, "r@1_all_queries", "queries",
     "kb", "languages": {lang: {"r@1", "queries"}}, "skipped": {"blank_lines",
     "repeated_gold_lines"}}, ..., "_mean": mean "r@1" over sets, and
     "_skipped_sets": [names] when `languages` leaves a set no query}.
  """
  found = find_sets(folder)
  unknown = sorted(set(sets or ()) - set(found))
  if unknown:
    raise ValueError(f"no question-retrieval sets {unknown} under {folder}; found "
                     f"{sorted(found)}.")
  results, skipped = {}, []
  for name in sets or found:
    data = read_set(found[name])
    if languages and not set(languages) & set(data.languages):
      skipped.append(name)  # E.g. the English-only set when only German is asked for.
      continue
    results[name] = evaluate_set(encoder, data, languages=languages, desc=f"questions {name}",
                                 query_block=query_block, key_block=key_block)
  if not results:
    raise ValueError(f"no queries in languages {list(languages)} in any set under {folder}.")
  results["_mean"] = float(np.mean([r["r@1"] for r in results.values()]))
  return {**results, "_skipped_sets": skipped} if skipped else results


def table(results: Mapping) -> str:
  """Markdown: one row per set and query language, a row per set, then the mean."""
  lines = ["| set | query language | R@1 | queries | KB |", "|---|---|---:|---:|---:|"]
  for name, r in results.items():
    if name.startswith("_"):
      continue
    for lang, x in r["languages"].items():
      lines.append(f"| {name} | {lang} | {x['r@1']:.1f} | {x['queries']} | {r['kb']} |")
    lines.append(f"| **{name}** | mean of languages | **{r['r@1']:.1f}** | {r['queries']} | "
                 f"{r['kb']} |")
  lines.append(f"| **mean of sets** | | **{results['_mean']:.1f}** | | |")
  return "\n".join(lines)
