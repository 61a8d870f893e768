"""Held-out retrieval sets for the in-training evaluation (never trained on).

  multi30k_test2016.eng-deu / eng-fra / eng-ces  Multi30k test_2016_flickr
  ntrex_val.eng-<xx>                             NTREX validation documents
                                                 (sources/pair_readers.ntrex_validation_documents)

Each set is (sources, targets), line-aligned: targets[i] translates sources[i].
Retrieval scores "is the nearest target of sources[i] targets[i]", so a
sentence repeated on either side would make the answer ambiguous: a pair is
kept only if neither its source nor its target appeared before.
"""

import pathlib
from typing import Iterable

from vmsst_tasks.sources import pair_readers
from vmsst.base import files
from vmsst.base import text_files

MULTI30K_TEST_PREFIX = "test_2016_flickr"
MULTI30K_TARGETS = {"deu": "de", "fra": "fr", "ces": "cs"}
# A spread of scripts and resource levels that are also common eval languages.
NTREX_TARGETS = ("deu", "fra", "spa", "rus", "zho-CN", "jpn", "arb", "hin", "swa")

RetrievalSet = tuple[list[str], list[str]]


def dedupe_pairs(pairs: Iterable[tuple[str, str]], max_pairs: int) -> RetrievalSet:
  """First `max_pairs` stripped pairs whose source and target are both new and non-empty."""
  seen_src, seen_tgt, src_out, tgt_out = set(), set(), [], []
  for src, tgt in pairs:
    src, tgt = src.strip(), tgt.strip()
    if not src or not tgt or src in seen_src or tgt in seen_tgt:
      continue
    seen_src.add(src)
    seen_tgt.add(tgt)
    src_out.append(src)
    tgt_out.append(tgt)
    if len(src_out) == max_pairs:
      break
  return src_out, tgt_out


def _multi30k_sets(data_dir: pathlib.Path, max_pairs: int) -> dict[str, RetrievalSet]:
  root = data_dir / pair_readers.MULTI30K_DIR
  english = text_files.read_lines(root / f"{MULTI30K_TEST_PREFIX}.en.gz")
  sets = {}
  for code, short in MULTI30K_TARGETS.items():
    other = text_files.read_lines(root / f"{MULTI30K_TEST_PREFIX}.{short}.gz")
    if len(other) != len(english):
      raise ValueError(f"Multi30k {MULTI30K_TEST_PREFIX}.{short} has {len(other)} lines, "
                       f".en has {len(english)}")
    sets[f"multi30k_test2016.eng-{code}"] = dedupe_pairs(zip(english, other), max_pairs)
  return sets


def _ntrex_sets(data_dir: pathlib.Path, max_pairs: int) -> dict[str, RetrievalSet]:
  held_out = pair_readers.ntrex_validation_documents(data_dir)
  keep = [doc in held_out for doc in pair_readers.ntrex_documents(data_dir)]
  paths = pair_readers.ntrex_files(data_dir)
  english = [line for line, k in zip(text_files.read_lines(paths["eng"]), keep) if k]
  sets = {}
  for code in NTREX_TARGETS:
    other = [line for line, k in zip(text_files.read_lines(paths[code]), keep) if k]
    sets[f"ntrex_val.eng-{code}"] = dedupe_pairs(zip(english, other), max_pairs)
  return sets


def retrieval_sets(data_dir: str, max_pairs: int = 500) -> dict[str, RetrievalSet]:
  """Name -> (source sentences, aligned target sentences), at most `max_pairs` each."""
  root = files.as_path(data_dir)
  return {**_multi30k_sets(root, max_pairs), **_ntrex_sets(root, max_pairs)}
