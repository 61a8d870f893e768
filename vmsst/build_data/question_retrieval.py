"""Writes question-retrieval sets (vmsst/evaluation/question_retrieval.py's format).

Builder (no NQ, MKQA or PAQ here): `build_question_retrieval` writes, from
the shared data,
  * stsb_multi_mt: queries are the sentence1 of STSb test rows scored >= 4.0
    (near-paraphrases, like a question and its PAQ paraphrase) in each
    non-English language of stsb-multi-mt; the gold is the English sentence2
    of that row, hidden among every distinct English sentence of all splits.
    The query's own English source (the English sentence1 of its row) is
    withheld from the KB: otherwise the task would be translation retrieval,
    and the exact translation would beat the paraphrase. When that source is
    also another query's gold it stays, and is then gold for both (it is a
    >= 4.0 paraphrase of the row's sentence2 too).
  * sts16_questions (English only): STS16 question-question pairs scored
    >= 4.0 (StackExchange titles); query = question 1, gold = question 2,
    KB = every question of the file, with the same withholding rule.
KB texts are deduplicated (one id per distinct whitespace-normalized text), so
a gold text has one id. A query text occurring in several rows of one
language is one query whose gold is the union of the rows' golds.

  python -m vmsst.build_question_retrieval --data_dir=/work/shared/data --output=DIR
"""

import collections
import pathlib
from typing import Iterable, Mapping, NamedTuple, Sequence

from vmsst.base import cli
from vmsst.base import files
from vmsst.base import sts_files
from vmsst.base import text_files
from vmsst.evaluation.question_retrieval import FOLDER, GOLD, KB, QUERIES

# Queries in every STSb-multi-mt language but English, the knowledge base's.
STSB_QUERY_LANGUAGES = tuple(c for c in sts_files.STSB_MULTI_MT_LANGUAGES if c != "en")
MIN_SCORE = 4.0
STS16_QUESTIONS = "sts12-16/raw/STS16/STS.{}.question-question.txt"


# ---------------------------------------------------------------- builder


class Candidate(NamedTuple):
  """A query before deduplication: its target KB text first, then other acceptable ones."""
  language: str
  text: str
  gold_texts: tuple[str, ...]


def assemble(candidates: Sequence[Candidate], kb_texts: Iterable[str],
             withheld: Iterable[str]) -> tuple[dict[tuple[str, str], set[int]], list[str]]:
  """Deduplicated queries with gold KB indices, and the KB.

  Args:
    candidates: queries; `gold_texts[0]` must be in `kb_texts`, the other
      gold texts count only if they end up in the KB.
    kb_texts: English texts in a fixed order (duplicates allowed).
    withheld: texts kept out of the KB unless some candidate's target.

  Returns:
    ({(language, query text): {KB indices}} in first-occurrence order,
     distinct KB texts in first-occurrence order).
  """
  targets = {c.gold_texts[0] for c in candidates}
  blocked = set(withheld) - targets
  kb = list(dict.fromkeys(t for t in kb_texts if t not in blocked))
  position = {text: i for i, text in enumerate(kb)}
  missing = targets - set(position)
  if missing:
    raise ValueError(f"{len(missing)} gold texts are not among the KB texts, e.g. "
                     f"{next(iter(missing))!r}; build the KB from the rows the queries use.")
  queries = {}
  for c in candidates:
    queries.setdefault((c.language, c.text), set()).update(
        position[g] for g in c.gold_texts if g in position)
  return queries, kb


def _read_multi_mt(data_dir: pathlib.Path, lang: str, split: str) -> list[tuple[str, str, float]]:
  pairs = sts_files.read_stsb_multi_mt(data_dir / "stsb-multi-mt", lang, split)
  rows = list(zip(pairs.sentences1, pairs.sentences2, pairs.gold.tolist()))
  for number, (s1, s2, _) in enumerate(rows, 1):
    if not s1.strip() or not s2.strip():
      raise ValueError(f"stsb-multi-mt/stsb-{lang}-{split}.csv.gz:{number}: an empty sentence; "
                       "a question-retrieval query or KB entry needs text.")
  return [(text_files.one_line(s1), text_files.one_line(s2), score) for s1, s2, score in rows]


def stsb_candidates(data_dir: pathlib.Path, languages: Sequence[str], min_score: float,
                    kb_splits: Sequence[str]) -> tuple[list[Candidate], list[str], list[str]]:
  """(candidates, KB texts, withheld texts) of the stsb_multi_mt set (module doc)."""
  english = {split: _read_multi_mt(data_dir, "en", split) for split in sts_files.STSB_SPLITS}
  rows = [i for i, (_, _, score) in enumerate(english["test"]) if score >= min_score]
  candidates = []
  for lang in languages:
    translated = _read_multi_mt(data_dir, lang, "test")
    if len(translated) != len(english["test"]):
      raise ValueError(f"stsb-multi-mt/stsb-{lang}-test.csv.gz has {len(translated)} rows, "
                       f"English {len(english['test'])}; the files must be row-aligned.")
    candidates += [Candidate(lang, translated[i][0], (english["test"][i][1],
                                                      english["test"][i][0])) for i in rows]
  kb_texts = [t for split in kb_splits for s1, s2, _ in english[split] for t in (s1, s2)]
  kb_texts += [english["test"][i][1] for i in rows]  # Targets, even if "test" is not a KB split.
  return candidates, kb_texts, [english["test"][i][0] for i in rows]


def sts16_candidates(data_dir: pathlib.Path,
                     min_score: float) -> tuple[list[Candidate], list[str], list[str]]:
  """(candidates, KB texts, withheld texts) of the sts16_questions set (module doc)."""
  inputs = data_dir / STS16_QUESTIONS.format("input")
  pairs = [_clean_pair(inputs, n, line) for n, line in enumerate(text_files.read_lines(inputs), 1)]
  scores = text_files.read_lines(data_dir / STS16_QUESTIONS.format("gs"))  # Blank: an unscored pair.
  if len(scores) != len(pairs):
    raise ValueError(f"{inputs}: {len(pairs)} lines but its gold file has {len(scores)}.")
  chosen = [p for p, s in zip(pairs, scores) if s.strip() and float(s) >= min_score]
  candidates = [Candidate("en", q1, (q2, q1)) for q1, q2 in chosen]
  return candidates, [q for pair in pairs for q in pair], [q1 for q1, _ in chosen]


def _clean_pair(path: pathlib.Path, number: int, line: str) -> tuple[str, str]:
  fields = line.split("\t")  # question1, question2, then two source notes (not input).
  if len(fields) < 2 or not fields[0].strip() or not fields[1].strip():
    raise ValueError(f"{path}:{number}: expected question1<TAB>question2<TAB>...")
  return text_files.one_line(fields[0]), text_files.one_line(fields[1])


def write_set(folder: pathlib.Path, queries: Mapping[tuple[str, str], set[int]],
              kb: Sequence[str]) -> dict:
  """Writes queries.tsv, kb.tsv and gold.tsv; returns their sizes."""
  folder.mkdir(parents=True, exist_ok=True)
  width = len(str(max(len(kb), len(queries))))
  query_ids = [f"q{i:0{width}d}" for i in range(len(queries))]
  (folder / QUERIES).write_text("".join(
      f"{qid}\t{lang}\t{text}\n" for qid, (lang, text) in zip(query_ids, queries)), "utf-8")
  (folder / KB).write_text("".join(f"kb{i:0{width}d}\t{t}\n" for i, t in enumerate(kb)), "utf-8")
  (folder / GOLD).write_text("".join(
      f"{qid}\tkb{g:0{width}d}\n" for qid, golds in zip(query_ids, queries.values())
      for g in sorted(golds)), "utf-8")
  return {"queries": len(queries), "kb": len(kb),
          "gold_lines": sum(len(g) for g in queries.values()),
          "languages": dict(sorted(collections.Counter(l for l, _ in queries).items()))}


def build_question_retrieval(data_dir: str | pathlib.Path, output: str | pathlib.Path, *,
                             languages: Sequence[str] = STSB_QUERY_LANGUAGES,
                             min_score: float = MIN_SCORE,
                             kb_splits: Sequence[str] = sts_files.STSB_SPLITS,
                             sts16: bool = True) -> dict:
  """Writes `output/question_retrieval/{stsb_multi_mt,sts16_questions}/` (module doc).

  Deterministic: every order is the order of the source files.

  Args:
    data_dir: the shared data root (stsb-multi-mt/, sts12-16/).
    output: where to create `question_retrieval/`.
    languages: stsb-multi-mt query languages (not "en": the KB is English).
    min_score: lowest STS score (0–5) of a query–gold pair.
    kb_splits: stsb-multi-mt splits whose English sentences fill the KB.
    sts16: also write the English STS16 question-question set.

  Returns:
    {"folder", "sets": {name: {"queries", "kb", "gold_lines", "languages",
     "merged_queries": candidates folded into an earlier identical query}}}.
  """
  data_dir, folder = files.as_path(data_dir), files.as_path(output) / FOLDER
  bad = sorted(set(languages) - set(STSB_QUERY_LANGUAGES)) + sorted(
      set(kb_splits) - set(sts_files.STSB_SPLITS))
  if bad:
    raise ValueError(f"unknown languages or splits {bad}; languages come from "
                     f"{STSB_QUERY_LANGUAGES}, splits from {sts_files.STSB_SPLITS}.")
  builders = {"stsb_multi_mt": lambda: stsb_candidates(data_dir, languages, min_score, kb_splits)}
  if sts16:
    builders["sts16_questions"] = lambda: sts16_candidates(data_dir, min_score)
  summary = {}
  for name, build in builders.items():
    candidates, kb_texts, withheld = build()
    queries, kb = assemble(candidates, kb_texts, withheld)
    summary[name] = {**write_set(folder / name, queries, kb),
                     "merged_queries": len(candidates) - len(queries)}
  return {"folder": str(folder), "sets": summary}


if __name__ == "__main__":
  cli.old_name("vmsst.build_data.question_retrieval")
