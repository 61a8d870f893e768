"""Trains the SentencePiece vocabulary from the data sources' training splits.

On the data side: its sentences are the Tatoeba-filtered training splits the
sources read (NTREX-128, Multi30k, OPUS folders), sampled by a seed so a rerun
trains the same vocabulary. The command is `python -m vmsst.vocabulary`;
loading a vocabulary is vmsst/base/sentencepiece_vocabulary.py (ids: see there).
"""

import os
import random
from typing import AbstractSet, Iterable, Iterator, Sequence

import sentencepiece as spm

from vmsst_tasks.sources import opus_readers
from vmsst_tasks.sources import pair_readers
from vmsst.base import cli
from vmsst.base import files
from vmsst.base import sentencepiece_vocabulary


def train_vocabulary(sentences: Iterable[str], output_prefix: str, vocab_size: int, *,
                     character_coverage: float = 0.9995, input_sentence_size: int = 200_000,
                     seed: int = 0, num_threads: int | None = None) -> str:
  """Trains a unigram SentencePiece model; returns the path of the .model file.

  Args:
    sentences: raw training sentences (one per item, no newlines needed).
    output_prefix: writes `<output_prefix>.model` and `<output_prefix>.vocab`.
    vocab_size: total pieces, including the 3 special ids and 256 byte pieces
      (no language symbols: see vmsst/base/sentencepiece_vocabulary.py).
    character_coverage: share of characters covered by character pieces; the
      rest are spelled with byte pieces (byte_fallback), never mapped to unk.
      Lower it (e.g. 0.995) for tiny vocabularies over many scripts.
    input_sentence_size: sentences sampled (shuffled) for training; bounds
      time and memory on big corpora.
    seed: seeds the sentence sampling, so a rerun gives the same model.
    num_threads: trainer threads (default: all CPUs).
  """
  # SentencePiece writes only to the local disk: a bucket prefix is written here, then uploaded.
  with files.local_output(files.parent(output_prefix) or ".", directory=True) as local:
    _train(sentences, os.path.join(local, files.name(output_prefix)), vocab_size,
           character_coverage=character_coverage, input_sentence_size=input_sentence_size,
           seed=seed, num_threads=num_threads)
  return f"{output_prefix}.model"


def _train(sentences: Iterable[str], output_prefix: str, vocab_size: int, *,
           character_coverage: float, input_sentence_size: int, seed: int,
           num_threads: int | None) -> None:
  sentences = [s.replace("\n", " ") for s in sentences]
  if len(sentences) > input_sentence_size:
    # Sampled here, by `seed`: SentencePiece's own sampling (shuffle_input_sentence)
    # ignores set_random_generator_seed, so two runs gave two vocabularies.
    keep = sorted(random.Random(seed).sample(range(len(sentences)), input_sentence_size))
    sentences = [sentences[i] for i in keep]
  spm.set_random_generator_seed(seed)
  spm.SentencePieceTrainer.train(
      sentence_iterator=iter(sentences),
      model_prefix=output_prefix,
      model_type="unigram",
      vocab_size=vocab_size,
      pad_id=sentencepiece_vocabulary.PAD_ID, eos_id=sentencepiece_vocabulary.EOS_ID,
      unk_id=sentencepiece_vocabulary.UNK_ID, bos_id=-1,
      byte_fallback=True,
      character_coverage=character_coverage,
      input_sentence_size=0,  # every sentence given: the sample above
      shuffle_input_sentence=False,
      # Fewer seed pieces and faster pruning than the defaults (1M, 0.75): on
      # 340k NTREX+Multi30k sentences this takes ~40 s on 2 cores instead of
      # ~210 s, and an 8k vocabulary needs nowhere near 1M candidates.
      seed_sentencepiece_size=100_000,
      shrinking_factor=0.6,
      num_threads=num_threads or os.cpu_count() or 1,
      minloglevel=2,  # The trainer's progress log is thousands of lines.
  )


def interleaved_sentences(data_dir: str, source_names: Sequence[str]) -> list[str]:
  """training_sentences shuffled by a fixed seed, so sampling draws from every source."""
  sentences = list(training_sentences(data_dir, source_names))
  random.Random(0).shuffle(sentences)
  return sentences


def training_sentences(data_dir: str, source_names: Sequence[str]) -> Iterator[str]:
  """Distinct sentences of the training splits (Tatoeba-filtered); logs per-source counts."""
  exclude = pair_readers.tatoeba_test_sentences(data_dir)
  seen = set()
  for name in source_names:
    counts = pair_readers.PairCounts()
    if name == "ntrex128":
      pairs = pair_readers.ntrex_pairs(data_dir, "train", counts=counts, exclude=exclude)
    elif name == "multi30k":
      pairs = pair_readers.multi30k_pairs(data_dir, "train", counts=counts, exclude=exclude)
    elif name.startswith("opus:"):
      pairs = _opus_pairs(name[len("opus:"):], counts, exclude)
    else:
      raise ValueError(f"Unknown source {name!r}: use ntrex128, multi30k or opus:<dir>.")
    before = len(seen)
    for pair in pairs:
      for text in (pair.text_a, pair.text_b):
        if text not in seen:
          seen.add(text)
          yield text
    print(f"{counts.report(name)}; {len(seen) - before} new distinct sentences")


def _opus_pairs(opus_dir: str, counts: pair_readers.PairCounts,
                exclude: AbstractSet[str]) -> Iterator[pair_readers.Pair]:
  """An OPUS directory's pairs, refused as `train` refuses it (one shared check each).

  Before reading: opus_readers.checked_corpora (no OPUS file, unknown codes,
  misaligned sides). After each language pair: one whose every line was
  skipped (a binary or non-UTF-8 side) is the error train's data check gives,
  not a vocabulary trained on the other pairs alone.
  """
  for (lang_a, lang_b), found in opus_readers.checked_corpora(opus_dir).items():
    corpora = [corpus for corpus, _ in found]
    pair_counts = pair_readers.PairCounts()
    yield from opus_readers.opus_pairs(corpora, counts=pair_counts, exclude=exclude,
                                       name=f"opus:{opus_dir} {lang_a}-{lang_b}")
    counts.read, counts.kept = counts.read + pair_counts.read, counts.kept + pair_counts.kept
    counts.skipped.update(pair_counts.skipped)
    if pair_counts.read and not pair_counts.kept:
      # Imported here: data_counts loads seqio, which reading the sources does not need.
      from vmsst_tasks.registry import data_counts  # pylint: disable=import-outside-toplevel
      raise cli.UserError(data_counts.empty_input_message(
          f"opus:{opus_dir} {lang_a}-{lang_b}",
          ", ".join(str(p) for c in corpora for p in c.paths), pair_counts))
