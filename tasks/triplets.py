r"""Builds English triplets from STSb (query-tower tuning).

  python -m vmsst_tasks.triplets --stsb_dir=../shared/data/stsb --output=runs/triplets

writes train.tsv, validation.tsv and test.tsv (anchor<TAB>positive<TAB>negative,
from STSb train, dev and test) and prints the build counts;

  python -m vmsst_tasks.triplets --msmarco=msmarco-triplets.jsonl.gz --output=runs/msmarco_triplets

writes the MSMARCO splits of query-tower tuning (Vasilyev et al. 2022, §2.2;
`msmarco_splits`): of the sentence-transformers file's 499,184 samples
{"query", "pos": [...], "neg": [...]}, the first 487,983 train and the next
4,200 validation, each as (query, first positive, first negative); the last
7,000 test, as every (query, positive, negative) of each sample (357,642
triplets in the paper). The one sample between validation and test is unused,
as in the paper's counts.

The STSb rule (`stsb_triplets`), for each pair scored >= HIGH (4.0 of 5,
"mostly equivalent"): anchor = sentence1, positive = sentence2. The negative
is, in this order of preference:
  1. same_anchor: the other sentence of a pair scored <= LOW (1.0, "not
     equivalent, maybe same topic") that contains the anchor text (the first
     such pair in file order): a sentence a rater judged unrelated to this very
     anchor;
  2. same_file: a sentence of a low-scoring pair from the same source file
     (MSRvid, headlines, ...), drawn with a seeded generator: same domain and
     style, so length or genre alone does not separate it from the positive;
  3. any_file: the same from every low-scoring pair (a file without any).
A candidate equal to the anchor or positive is never used. Pairs whose two
sentences are identical are skipped and counted (nothing to rank). Every
count is reported: pairs read = kept + skipped_identical + not_high.

TSV files are read with vmsst.base.text_files.read_tsv (as pair_ranking does): a line
without exactly three non-empty TAB-separated fields is an error naming file
and line; blank lines are skipped and counted.

The seqio task `vmsst_triplets` (tasks/registry/triplets.py, triplet_tasks) feeds
PairFeatureConverter: tokens_a = anchor, tokens_b = positive, lang_a = lang_b
= eng, plus `tokens_negative`, tokenized, EOS-terminated and 0-padded here to
the training length (the converter passes it through at that static width).
"""

from vmsst.base import cli  # pylint: disable=g-bad-import-order
from vmsst.base import path_checks  # pylint: disable=g-bad-import-order
from vmsst.base import console  # pylint: disable=g-bad-import-order


def _define_flags() -> None:
  """The command's flags, defined before its imports so `--help` answers without them."""
  from absl import flags as absl_flags  # pylint: disable=import-outside-toplevel
  absl_flags.DEFINE_string("stsb_dir", "../shared/data/stsb", "The STS Benchmark folder.")
  absl_flags.DEFINE_string("msmarco", None, "msmarco-triplets.jsonl.gz: write the query-tower "
                           "paper's MSMARCO splits instead of STSb's.")
  absl_flags.DEFINE_string("output", None, "Where train/validation/test.tsv go.", required=True)
  absl_flags.DEFINE_integer("seed", 0, "Seed of the same_file / any_file negative draws.")


if __name__ == "__main__":  # the command, not an import: before TensorFlow and JAX load
  console.quiet_startup()
  _define_flags()
  cli.answer_help()  # before seqio and TensorFlow

# pylint: disable=wrong-import-position
import collections
import functools
import json
import pathlib
from typing import Sequence

from absl import flags
from absl import logging
import numpy as np
import seqio
import tensorflow as tf

from vmsst_tasks.registry import preprocessors
from vmsst_tasks.registry import seqio_sources
from vmsst_tasks.sources import pair_readers
from vmsst.base import files
from vmsst.base import sts_files
from vmsst.base import tallies
from vmsst.base import text_files

HIGH, LOW = 4.0, 1.0
TASK = "vmsst_triplets"
STSB_SPLITS = {"train": "train", "validation": "dev", "test": "test"}
Triplet = tuple[str, str, str]


class BuildCounts(tallies.Tally):
  """What `stsb_triplets` did with each pair it read.

  pairs = kept + skipped_identical + not_high; each kept pair also counts
  under the kind of its negative (same_anchor, same_file or any_file).
  """
  NAMES = ("pairs", "not_high", "skipped_identical", "kept", "same_anchor", "same_file",
           "any_file")


def stsb_triplets(stsb_dir: str | pathlib.Path, split: str, *, high: float = HIGH,
                  low: float = LOW, seed: int = 0) -> tuple[list[Triplet], BuildCounts]:
  """Triplets of one STSb split ("train", "dev" or "test") by the module's rule."""
  pairs = sts_files.read_stsb(files.as_path(stsb_dir), split)
  first = [text_files.one_line(s) for s in pairs.sentences1]
  second = [text_files.one_line(s) for s in pairs.sentences2]
  source_files = list(pairs.source_files)
  low_rows = [i for i, g in enumerate(pairs.gold) if g <= low]
  partner = {}  # sentence -> the other side of its first low-scoring pair
  by_file = collections.defaultdict(list)
  for i in low_rows:
    partner.setdefault(first[i], second[i])
    partner.setdefault(second[i], first[i])
    by_file[source_files[i]] += [first[i], second[i]]
  everywhere = [s for i in low_rows for s in (first[i], second[i])]
  if not everywhere:
    raise ValueError(f"{stsb_dir} sts-{split}.csv has no pair scored <= {low}: no negatives.")
  rng = np.random.default_rng(seed)
  counts, triplets = BuildCounts(pairs=len(first)), []
  for i, gold in enumerate(pairs.gold):
    anchor, positive = first[i], second[i]
    if gold < high:
      counts.not_high += 1
      continue
    if anchor == positive:
      counts.skipped_identical += 1
      continue
    negative = partner.get(anchor)
    if negative is not None and negative not in (anchor, positive):
      counts.same_anchor += 1
    else:
      kind = "same_file" if by_file.get(source_files[i]) else "any_file"
      pool = by_file[source_files[i]] if kind == "same_file" else everywhere
      negative = _draw(pool, (anchor, positive), rng)
      counts.add(kind)
    triplets.append((anchor, positive, negative))
  counts.kept = len(triplets)
  return triplets, counts


def _draw(pool: Sequence[str], avoid: tuple[str, str], rng: np.random.Generator) -> str:
  """A seeded draw from `pool` that is neither sentence of `avoid`."""
  for _ in range(100):
    candidate = pool[int(rng.integers(len(pool)))]
    if candidate not in avoid:
      return candidate
  raise ValueError(f"no negative candidate differs from {avoid[0]!r}; the pool is too small.")


def write_tsv(path: str | pathlib.Path, triplets: Sequence[Triplet]) -> None:
  """anchor<TAB>positive<TAB>negative lines (fields made one-line, TAB-free)."""
  path = files.as_path(path)
  path.parent.mkdir(parents=True, exist_ok=True)
  path.write_text("".join("\t".join(text_files.one_line(x) for x in t) + "\n"
                          for t in triplets), encoding="utf-8")


def read_tsv(path: str | pathlib.Path) -> tuple[list[Triplet], int]:
  """([(anchor, positive, negative)], blank lines skipped); see the module docstring."""
  rows, blank = text_files.read_tsv(files.as_path(path), 3, "anchor, positive, negative")
  return [tuple(r[1:]) for r in rows], blank


# ---------------------------------------------------------------- seqio task


class TripletSource(seqio.FunctionDataSource):
  """Triplets in memory per split: {"text_a", "text_b", "text_negative", "lang_a", "lang_b"}.

  Attributes:
    counts: split -> pair_readers.PairCounts (read = kept + skipped), which
      registry.data_counts reports like every other task's.
  """

  def __init__(self, triplets: dict[str, Sequence[Triplet]], language: str = "eng",
               counts: dict[str, pair_readers.PairCounts] | None = None):
    self.counts = dict(counts or {})
    self._columns = {}
    for split, rows in triplets.items():
      if not rows:
        raise ValueError(f"{TASK}: the {split} split has no triplets.")
      anchor, positive, negative = (np.array(c, dtype=object) for c in zip(*rows))
      langs = np.array([language] * len(rows), dtype=object)
      self._columns[split] = {"text_a": anchor, "text_b": positive, "text_negative": negative,
                              "lang_a": langs, "lang_b": langs}
    super().__init__(dataset_fn=self._dataset, splits=tuple(triplets),
                     num_input_examples={s: len(r) for s, r in triplets.items()})

  def _dataset(self, split: str, shuffle_files: bool, seed: int | None = None) -> tf.data.Dataset:
    return seqio_sources.in_memory_dataset(self._columns[split], shuffle=shuffle_files, seed=seed)


rekey_triplet = functools.partial(
    seqio.preprocessors.rekey,
    key_map={"tokens_a": "text_a", "tokens_b": "text_b", "tokens_negative": "text_negative",
             "lang_a": "lang_a", "lang_b": "lang_b"})


def pad_negative(tokens: tf.Tensor, length: int) -> tf.Tensor:
  """Ids [n] -> the first length − 1 ids, EOS (1), zeros: int32 [length].

  [8, 41] at length 5 -> [8, 41, 1, 0, 0]: the same trim-then-EOS as
  append_eos_after_trim gives tokens_a/tokens_b, padded as the converter pads them.
  """
  tokens = tf.concat([tf.cast(tokens[:length - 1], tf.int32), [1]], axis=0)
  return tf.ensure_shape(tf.pad(tokens, [[0, length - tf.shape(tokens)[0]]]), [length])


@seqio.map_over_dataset
def _negative_example(example, vocabulary, length):
  out = dict(example)
  out["tokens_negative"] = pad_negative(vocabulary.encode_tf(example["tokens_negative"]), length)
  return out


def tokenize_negative(dataset: tf.data.Dataset, output_features, sequence_length):
  """Tokenizes and pads `tokens_negative` to the length of tokens_a.

  {"tokens_negative": "A cat."} -> {"tokens_negative": [55, 9, 1, 0, ..., 0]} (int32 [L])
  """
  if not sequence_length or "tokens_a" not in sequence_length:
    raise ValueError(f"{TASK} needs task_feature_lengths with tokens_a (the training "
                     "length): tokens_negative is padded to it.")
  return _negative_example(dataset, vocabulary=output_features["tokens_a"].vocabulary,
                           length=sequence_length["tokens_a"])


def pair_counts(counts: BuildCounts) -> pair_readers.PairCounts:
  """The build counts as read / kept / skipped by reason."""
  return pair_readers.PairCounts(read=counts.pairs, kept=counts.kept, skipped=collections.Counter(
      {"score_below_high": counts.not_high, "identical_sentences": counts.skipped_identical}))


def read_triplet_splits(triplets: str, data_dir: str
                        ) -> dict[str, tuple[list[Triplet], pair_readers.PairCounts]]:
  """split -> (triplets, counts); `triplets` = "stsb" (data_dir/stsb train, dev) or a TSV dir."""
  if triplets == "stsb":
    built = {split: stsb_triplets(files.as_path(data_dir, "stsb"), STSB_SPLITS[split])
             for split in ("train", "validation")}
    for split, (_, counts) in built.items():
      logging.info("%s %s from STSb: %s", TASK, split, counts)
    return {split: (rows, pair_counts(counts)) for split, (rows, counts) in built.items()}
  splits = {}
  for split in ("train", "validation"):
    path = files.as_path(triplets, f"{split}.tsv")
    if not path.is_file():
      raise FileNotFoundError(f"{path} not found: triplet_tasks.triplets is 'stsb' or a "
                              "directory with train.tsv and validation.tsv (anchor<TAB>"
                              "positive<TAB>negative; python -m vmsst_tasks.triplets writes them).")
    rows, blank = read_tsv(path)
    logging.info("%s %s: %d triplets, %d blank lines skipped", TASK, split, len(rows), blank)
    splits[split] = (rows, pair_readers.PairCounts(read=len(rows) + blank, kept=len(rows),
                                              skipped=collections.Counter(blank_line=blank)))
  return splits


# The task's preprocessors (tasks/registry/triplets.py registers it).
PREPROCESSORS = (rekey_triplet, preprocessors.tokenize_pair, tokenize_negative,
                 preprocessors.language_ids, seqio.preprocessors.append_eos_after_trim)


MSMARCO_SPLITS = {"train": 487_983, "validation": 4_200, "test": 7_000}


def msmarco_splits(path: str | pathlib.Path, sizes: dict[str, int] = MSMARCO_SPLITS
                   ) -> dict[str, list[Triplet]]:
  """The paper's train / validation / test triplets of an msmarco-triplets.jsonl(.gz) file.

  Train and validation take each sample's first positive and first negative
  ("we simply select the very first positive and the very first negative");
  test takes every positive x negative of the last `sizes["test"]` samples.

  Raises:
    ValueError: a line that is not a {"query", "pos", "neg"} object (file and
      line named), or fewer samples than the splits need.
  """
  samples = []
  with files.open_text(path) as f:
    for number, line in enumerate(f, 1):
      try:
        sample = json.loads(line)
        samples.append((sample["query"], list(sample["pos"]), list(sample["neg"])))
      except (ValueError, KeyError, TypeError):
        raise ValueError(f"{path}:{number}: expected a JSON object with \"query\", \"pos\" "
                         "and \"neg\" (the sentence-transformers msmarco-triplets format)."
                         ) from None
  train, validation, test = sizes["train"], sizes["validation"], sizes["test"]
  if len(samples) < train + validation + test:
    raise ValueError(f"{path}: {len(samples)} samples, fewer than the {train} + {validation} + "
                     f"{test} the splits take.")
  first = lambda rows: [(q, pos[0], neg[0]) for q, pos, neg in rows if pos and neg]
  return {"train": first(samples[:train]),
          "validation": first(samples[train:train + validation]),
          "test": [(q, p, n) for q, pos, neg in samples[len(samples) - test:]
                   for p in pos for n in neg]}


# ---------------------------------------------------------------- command

FLAGS = flags.FLAGS


def main(argv: Sequence[str]) -> None:
  cli.check_no_arguments(argv)
  if FLAGS.msmarco:
    path_checks.check_input_file("msmarco", FLAGS.msmarco, "the sentence-transformers "
                                 "msmarco-triplets.jsonl.gz")
  path_checks.check_output_path("output", FLAGS.output, directory=True)
  try:
    splits = _build_splits()
  except (FileNotFoundError, ValueError) as e:  # the message names the file and the fix
    raise cli.UserError(str(e)) from e
  output = files.as_path(FLAGS.output)
  for name, (rows, note) in splits.items():
    write_tsv(output / f"{name}.tsv", rows)
    print(f"{output / f'{name}.tsv'}: {note}")


def _build_splits() -> dict[str, tuple[list[Triplet], object]]:
  """{split: (its triplets, what to print of them)}: every split built before any is written,
  so a bad input leaves no partial output behind."""
  if FLAGS.msmarco:
    return {name: (rows, f"{len(rows)} triplets")
            for name, rows in msmarco_splits(FLAGS.msmarco).items()}
  return {name: stsb_triplets(FLAGS.stsb_dir, split, seed=FLAGS.seed)
          for name, split in STSB_SPLITS.items()}


if __name__ == "__main__":
  cli.run(main)
