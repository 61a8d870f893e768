"""Sentences to model inputs, outside tf.data (evaluation, encoding).

Mirrors the training preprocessing: SentencePiece ids, truncated so the EOS
fits, EOS appended, zero padding; no language symbol (the semantic encoder is
language-agnostic).
"""

from typing import Iterator, Sequence

import numpy as np


def tokenize_batch(vocabulary: "seqio.Vocabulary", sentences: Sequence[str],
                   length: int) -> tuple[np.ndarray, np.ndarray]:
  """int32 tokens and mask [len(sentences), length]; empty text gives just EOS."""
  tokens = np.zeros((len(sentences), length), np.int32)
  for row, sentence in enumerate(sentences):
    ids = list(vocabulary.encode(sentence))[: length - 1] + [vocabulary.eos_id]
    tokens[row, : len(ids)] = ids
  return tokens, (tokens != 0).astype(np.int32)


def count_truncated(vocabulary, sentences: Sequence[str], length: int) -> int:
  """How many of `sentences` tokenize_batch cuts: more than length - 1 pieces plus the EOS.

  `vocabulary` is anything with `encode(text) -> ids` (a seqio vocabulary or a
  SentencePiece processor).
  """
  return sum(len(vocabulary.encode(s)) > length - 1 for s in sentences)


def fixed_size_batches(n: int, batch_size: int) -> Iterator[tuple[int, int]]:
  """(start, stop) ranges covering 0..n; the caller pads the last one.

  Fixed batch shapes keep one compiled encoder for every batch.
  """
  for start in range(0, n, batch_size):
    yield start, min(start + batch_size, n)


def embed_sentences(embed_fn, vocabulary: "seqio.Vocabulary", sentences: Sequence[str],
                    length: int, batch_size: int) -> np.ndarray:
  """float32 [len(sentences), d] via `embed_fn(tokens, mask)` on padded batches."""
  outputs = []
  for start, stop in fixed_size_batches(len(sentences), batch_size):
    tokens, mask = tokenize_batch(vocabulary, sentences[start:stop], length)
    pad = batch_size - (stop - start)
    if pad:
      tokens = np.concatenate([tokens, np.repeat(tokens[:1], pad, axis=0)])
      mask = np.concatenate([mask, np.repeat(mask[:1], pad, axis=0)])
    outputs.append(np.asarray(embed_fn(tokens, mask))[: stop - start])
  return np.concatenate(outputs).astype(np.float32)
