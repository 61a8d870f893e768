"""Tests of tasks/registry/seqio_sources.py: corpora of a language pair are mixed as sampled."""

import collections
import math

import numpy as np
import pytest

from vmsst_tasks.sources import opus_readers
from vmsst_tasks.registry import seqio_sources

# Three French corpora of one pair, lines 6:3:1 (the issue: read one after the
# other, the first 20k examples were all one corpus).
LINES = {"OpenSubtitles": 6000, "UN": 3000, "Europarl": 1000}


@pytest.fixture(name="french")
def _french(tmp_path) -> seqio_sources.StreamingPairSource:
  for corpus, n in LINES.items():
    for side, word in (("en", "house"), ("fr", "maison")):
      (tmp_path / f"{corpus}.en-fr.{side}").write_text(
          "".join(f"{corpus} {word} {i}\n" for i in range(n)), encoding="utf-8")
  corpora = opus_readers.discover_opus(tmp_path)
  lines = [opus_readers.check_moses_line_counts(c) for c in corpora]
  return seqio_sources.StreamingPairSource(corpora, lines, name="vmsst_opus.eng.fra")


def _corpora_of(source, num: int, seed: int) -> list[str]:
  ds = source.get_dataset(split="train", shuffle=True, seed=seed)
  return [ex["text_a"].decode().split()[0] for ex in ds.take(num).as_numpy_iterator()]


@pytest.mark.slow  # over ~7 s (docs/results/tests/)
@pytest.mark.parametrize("seed", [0, 7])
def test_first_examples_have_the_corpus_mix_of_the_line_counts(french, seed):
  num = 2000
  seen = collections.Counter(_corpora_of(french, num, seed))
  total = sum(LINES.values())
  for corpus, lines in LINES.items():
    share = lines / total
    sigma = math.sqrt(share * (1 - share) / num)
    assert abs(seen[corpus] / num - share) < 4 * sigma, (corpus, seen)
  # Any window, not only the start: the last 2000 of the first 8000 too.
  window = collections.Counter(_corpora_of(french, 8000, seed)[-num:])
  assert abs(window["OpenSubtitles"] / num - 0.6) < 4 * math.sqrt(0.24 / num), window


@pytest.mark.slow  # over ~7 s (docs/results/tests/)
def test_a_pass_reads_every_line_once_and_counts_it(french):
  texts = [ex["text_a"] for ex in french.get_dataset(split="train", shuffle=True, seed=3)
           .as_numpy_iterator()]
  assert len(texts) == len(set(texts)) == sum(LINES.values())
  assert french.counts.read == french.counts.kept == sum(LINES.values())
  assert french.num_input_examples("train") == sum(LINES.values())


@pytest.mark.slow  # over ~7 s (docs/results/tests/)
def test_the_sampled_order_is_fixed_by_the_seed(french):
  assert _corpora_of(french, 300, 1) == _corpora_of(french, 300, 1)
  assert _corpora_of(french, 300, 1) != _corpora_of(french, 300, 2)
  # Corpus order within the stream keeps each file's own line order.
  ds = french.get_dataset(split="train", shuffle=False)
  un = [int(ex["text_a"].split()[-1]) for ex in ds.take(3000).as_numpy_iterator()
        if ex["text_a"].startswith(b"UN")]
  assert un == sorted(un) and np.diff(un).max() == 1
