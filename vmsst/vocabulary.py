r"""Trains the SentencePiece vocabulary (VOCAB_PATH).

Ids follow the T5/seqio convention: pad=0, eos=1, unk=2, no bos (mT5's
spiece.model follows it too, and works as is). The vocabulary holds no language
symbols: language ids are indices into vmsst.languages.LANGUAGES with their own
embedding table in the network, so pieces are spent on text only and a
pretrained model's vocabulary needs nothing added. Vocabularies trained
before this have one user-defined `<2xxx>` piece per language; they load and
train as any other (the pieces are simply never produced from text), and
`legacy_language_rows` reads an old checkpoint's language vectors out of them.

Train from the training splits (Tatoeba-filtered):

  python -m vmsst.vocabulary --data_dir=../shared/data --output=/tmp/vmsst/spm \
      --vocab_size=8000 --sources=ntrex128,multi30k

writes /tmp/vmsst/spm.model and spm.vocab (about 40 s on 2 CPU cores).
"""

import os

from absl import flags

from vmsst import cli
from vmsst import files


def _define_flags() -> None:
  """Only when run as a command: importers (train, evaluate) own their flags."""
  flags.DEFINE_string("data_dir", "../shared/data", "Root of the shared corpora.")
  flags.DEFINE_string("output", None, "Output prefix; writes <output>.model/.vocab.")
  flags.DEFINE_integer("vocab_size", 8000, "Total pieces (special and byte pieces included).")
  flags.DEFINE_list(
      "sources", ["ntrex128", "multi30k"],
      "Training corpora: ntrex128, multi30k, opus:<dir> (all Moses/TSV files under dir).")
  flags.DEFINE_float("character_coverage", 0.9995, "See train_vocabulary.")
  flags.DEFINE_integer("input_sentence_size", 200_000, "Sampled sentences.")


def _check_flags() -> None:
  """What a user can get wrong, checked before seqio and TensorFlow load (seconds).

  Raises:
    cli.UserError: naming the flag and the fix.
  """
  f = flags.FLAGS
  if not f.output:
    raise cli.UserError("--output=DIR/spm is required: the prefix of the .model/.vocab to write.")
  cli.check_data_dir("data_dir", f.data_dir)  # the Tatoeba filter reads it whatever the sources
  for name in f.sources:
    folder = name[len("opus:"):]
    if name.startswith("opus:") and not files.isdir(folder):
      raise cli.UserError(f"--sources={name}: {folder} is not a directory; give opus:<dir> of "
                          "OPUS Moses/TSV files (python -m vmsst_tasks.opus_download "
                          "--output=<dir> fetches them).")
  cli.check_output_path("output", f.output)


if __name__ == "__main__":  # the command, not an import: before TensorFlow and JAX load
  cli.quiet_startup()
  _define_flags()
  cli.check_early(_check_flags)

# pylint: disable=wrong-import-position
import contextlib
import random
import re
import sys
import time
from typing import AbstractSet, Iterable, Iterator, Sequence

import numpy as np
import sentencepiece as spm
from etils import epath

from vmsst import languages
from vmsst import sentencepiece_vocabulary

PAD_ID, EOS_ID, UNK_ID = 0, 1, 2


def train_vocabulary(sentences: Iterable[str], output_prefix: str, vocab_size: int, *,
                     character_coverage: float = 0.9995, input_sentence_size: int = 200_000,
                     seed: int = 0, num_threads: int | None = None) -> str:
  """Trains a unigram SentencePiece model; returns the path of the .model file.

  Args:
    sentences: raw training sentences (one per item, no newlines needed).
    output_prefix: writes `<output_prefix>.model` and `<output_prefix>.vocab`.
    vocab_size: total pieces, including the 3 special ids and 256 byte pieces
      (no language symbols: see the module docstring).
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
      pad_id=PAD_ID, eos_id=EOS_ID, unk_id=UNK_ID, bos_id=-1,
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


def get_vocabulary(path: str) -> "seqio.SentencePieceVocabulary":
  """The seqio vocabulary of a trained model (no T5 sentinel extra ids).

  Where seqio (TensorFlow) is absent, the same ids from SentencePiece itself
  (vmsst/sentencepiece_vocabulary.py).
  """
  if not files.exists(path):
    raise FileNotFoundError(
        f"No SentencePiece model at {path}: train one with `python -m vmsst.vocabulary "
        "--data_dir=../shared/data --output=DIR/spm` and point the vocabulary path at "
        "DIR/spm.model.")
  try:
    import seqio  # pylint: disable=import-outside-toplevel
  except ImportError:
    return sentencepiece_vocabulary.SentencePieceVocabulary(path)
  return seqio.SentencePieceVocabulary(path, extra_ids=0)


def language_token_id(vocab: "seqio.SentencePieceVocabulary", code: str) -> int:
  """Id of a language's `<2xxx>` piece in a legacy vocabulary (any spelling of its code).

  Raises:
    ValueError: the vocabulary has no such piece (new vocabularies have none:
      language ids are `languages.language_index`, not pieces).
  """
  token = languages.language_token(code)
  token_id = vocab.tokenizer.piece_to_id(token)
  if token_id == vocab.tokenizer.unk_id() or vocab.tokenizer.id_to_piece(token_id) != token:
    raise ValueError(f"Vocabulary {vocab.sentencepiece_model_file} has no symbol {token}: "
                     "language ids are indices into vmsst.languages.LANGUAGES "
                     "(languages.language_index), not vocabulary pieces.")
  return token_id


def legacy_language_rows(vocab: "seqio.SentencePieceVocabulary",
                         token_table: np.ndarray) -> tuple[np.ndarray, list[str]]:
  """An old checkpoint's language table, read from its token table.

  Models trained before language ids had their own table embedded a language
  as the token-table row of its `<2xxx>` piece. Row i of the result is that
  row for LANGUAGES[i], so `language_embed` reproduces the old network exactly
  (except the routing of NetworkConfig.num_language_encoders > 1, which
  followed piece ids).

  Args:
    vocab: the vocabulary the checkpoint was trained with (MODEL_DIR/spm.model).
    token_table: its `token_embed/embedding`, float [V, d].
  Returns:
    (float32 [len(LANGUAGES), d], the codes without a piece, whose rows are 0).
  """
  rows = np.zeros((len(languages.LANGUAGES), token_table.shape[1]), np.float32)
  missing = []
  for index, code in enumerate(languages.LANGUAGES):
    try:
      rows[index] = token_table[language_token_id(vocab, code)]
    except ValueError:
      missing.append(code)
  return rows, missing


# ------------------------------------------------------------------- command

def training_sentences(data_dir: str, source_names: Sequence[str]) -> Iterator[str]:
  """Distinct sentences of the training splits (Tatoeba-filtered); logs per-source counts."""
  # pylint: disable=g-import-not-at-top  (tasks depends on vmsst)
  from vmsst_tasks import opus_sources
  from vmsst_tasks import sources

  exclude = sources.tatoeba_test_sentences(data_dir)
  seen = set()
  for name in source_names:
    counts = sources.PairCounts()
    if name == "ntrex128":
      pairs = sources.ntrex_pairs(data_dir, "train", counts=counts, exclude=exclude)
    elif name == "multi30k":
      pairs = sources.multi30k_pairs(data_dir, "train", counts=counts, exclude=exclude)
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


def _opus_pairs(opus_dir: str, counts: "sources.PairCounts",
                exclude: AbstractSet[str]) -> Iterator["sources.Pair"]:
  """An OPUS directory's pairs, refused as `train` refuses it (one shared check each).

  Before reading: opus_sources.checked_corpora (no OPUS file, unknown codes,
  misaligned sides). After each language pair: one whose every line was
  skipped (a binary or non-UTF-8 side) is the error train's data check gives,
  not a vocabulary trained on the other pairs alone.
  """
  # pylint: disable=g-import-not-at-top  (tasks depends on vmsst)
  from vmsst_tasks import opus_sources
  from vmsst_tasks import sources

  for (lang_a, lang_b), found in opus_sources.checked_corpora(opus_dir).items():
    corpora = [corpus for corpus, _ in found]
    pair_counts = sources.PairCounts()
    yield from opus_sources.opus_pairs(corpora, counts=pair_counts, exclude=exclude,
                                       name=f"opus:{opus_dir} {lang_a}-{lang_b}")
    counts.read, counts.kept = counts.read + pair_counts.read, counts.kept + pair_counts.kept
    counts.skipped.update(pair_counts.skipped)
    if pair_counts.read and not pair_counts.kept:
      from vmsst_tasks.registry import data_counts
      raise cli.UserError(data_counts.empty_input_message(
          f"opus:{opus_dir} {lang_a}-{lang_b}",
          ", ".join(str(p) for c in corpora for p in c.paths), pair_counts))


def _first_missing(path: epath.Path) -> epath.Path | None:
  """The top-most of `path` and its parents that does not exist yet (None: it exists)."""
  missing = None
  while not path.exists():
    missing, path = path, path.parent
  return missing


_TOO_SMALL = re.compile(r"Vocabulary size is smaller than required_chars\. (\d+) vs (\d+)")


def _trainer_hint(error: RuntimeError) -> str:
  """SentencePiece's refusal as the flag to change: --vocab_size or --character_coverage."""
  f = flags.FLAGS
  if m := _TOO_SMALL.search(str(error)):
    needed = int(m.group(2))
    return (f"--vocab_size={f.vocab_size} is below the {needed} pieces this corpus needs for "
            f"its characters at --character_coverage={f.character_coverage}; give "
            f"--vocab_size={-(-needed // 1000) * 1000} or more, or lower --character_coverage "
            "(e.g. 0.995: rarer characters are spelled in bytes).")
  message = str(error).strip().splitlines()[-1]
  return (f"SentencePiece cannot train --vocab_size={f.vocab_size} on this corpus: "
          f"{message.split('] ')[-1]}")


def main(argv: Sequence[str]) -> None:
  cli.check_no_arguments(argv)
  f = flags.FLAGS
  _check_flags()
  start = time.time()
  try:
    sentences = list(training_sentences(f.data_dir, f.sources))
  except (FileNotFoundError, ValueError) as e:  # the message names the file or source and the fix
    raise cli.UserError(str(e)) from e
  random.Random(0).shuffle(sentences)  # Interleave sources before sampling.
  print(f"{len(sentences)} distinct sentences; training vocab_size={f.vocab_size} ...")
  made = _first_missing(files.as_path(files.parent(files.abspath(f.output))))
  try:
    model = train_vocabulary(sentences, f.output, f.vocab_size,
                             character_coverage=f.character_coverage,
                             input_sentence_size=f.input_sentence_size)
  except RuntimeError as e:  # SentencePiece refuses the settings for this corpus
    if made is not None and not files.find(made):
      with contextlib.suppress(OSError):
        files.rmtree(made)
    raise cli.UserError(_trainer_hint(e)) from e
  vocab = get_vocabulary(model)
  print(f"wrote {model}: {vocab.vocab_size} pieces, {time.time() - start:.0f} s")
  sys.stdout.flush()


if __name__ == "__main__":
  cli.run(main)
