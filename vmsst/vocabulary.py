r"""Trains the SentencePiece vocabulary (VOCAB_PATH).

The training is vmsst_tasks/sources/vocabulary_training.py; loading a vocabulary (ids,
legacy language pieces) is vmsst/base/sentencepiece_vocabulary.py.

Train from the training splits (Tatoeba-filtered):

  python -m vmsst.vocabulary --data_dir=../shared/data --output=/tmp/vmsst/spm \
      --vocab_size=8000 --sources=ntrex128,multi30k

writes /tmp/vmsst/spm.model and spm.vocab (about 40 s on 2 CPU cores).
"""

from absl import flags

from vmsst.base import cli
from vmsst.base import path_checks
from vmsst.base import console
from vmsst.base import files


def _define_flags() -> None:
  """Only when run as a command: importers (train, evaluate) own their flags."""
  flags.DEFINE_string("data_dir", "../shared/data", "Root of the shared corpora.")
  flags.DEFINE_string("output", None, "Output prefix; writes <output>.model/.vocab.")
  flags.DEFINE_integer("vocab_size", 8000, "Total pieces (special and byte pieces included).")
  flags.DEFINE_list(
      "sources", ["ntrex128", "multi30k"],
      "Training corpora: ntrex128, multi30k, opus:<dir> (all Moses/TSV files under dir).")
  flags.DEFINE_float("character_coverage", 0.9995, "See vocabulary_training.train_vocabulary.")
  flags.DEFINE_integer("input_sentence_size", 200_000, "Sampled sentences.")


def _check_flags() -> None:
  """What a user can get wrong, checked before seqio and TensorFlow load (seconds).

  Raises:
    cli.UserError: naming the flag and the fix.
  """
  f = flags.FLAGS
  if not f.output:
    raise cli.UserError("--output=DIR/spm is required: the prefix of the .model/.vocab to write.")
  path_checks.check_data_dir("data_dir", f.data_dir)  # the Tatoeba filter reads it whatever the sources
  for name in f.sources:
    folder = name[len("opus:"):]
    if name.startswith("opus:") and not files.isdir(folder):
      raise cli.UserError(f"--sources={name}: {folder} is not a directory; give opus:<dir> of "
                          "OPUS Moses/TSV files (python -m vmsst_tasks.opus_download "
                          "--output=<dir> fetches them).")
  path_checks.check_output_path("output", f.output)


if __name__ == "__main__":  # the command, not an import: before TensorFlow and JAX load
  console.quiet_startup()
  _define_flags()
  cli.check_early(_check_flags)

# pylint: disable=wrong-import-position
import contextlib
import re
import sys
import time
from typing import Sequence

from etils import epath

from vmsst.base import sentencepiece_vocabulary
from vmsst_tasks.sources import vocabulary_training


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
    sentences = vocabulary_training.interleaved_sentences(f.data_dir, f.sources)
  except (FileNotFoundError, ValueError) as e:  # the message names the file or source and the fix
    raise cli.UserError(str(e)) from e
  print(f"{len(sentences)} distinct sentences; training vocab_size={f.vocab_size} ...")
  made = _first_missing(files.as_path(files.parent(files.abspath(f.output))))
  try:
    model = vocabulary_training.train_vocabulary(sentences, f.output, f.vocab_size,
                                                 character_coverage=f.character_coverage,
                                                 input_sentence_size=f.input_sentence_size)
  except RuntimeError as e:  # SentencePiece refuses the settings for this corpus
    if made is not None and not files.find(made):
      with contextlib.suppress(OSError):
        files.rmtree(made)
    raise cli.UserError(_trainer_hint(e)) from e
  vocab = sentencepiece_vocabulary.get_vocabulary(model)
  print(f"wrote {model}: {vocab.vocab_size} pieces, {time.time() - start:.0f} s")
  sys.stdout.flush()


if __name__ == "__main__":
  cli.run(main)
