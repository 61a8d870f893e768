"""The STSb triplet rule on a hand-written file, the negative's padding, and the command as
typed (in this process).

(The real STSb split, the TSV reader and the seqio task are exercised in
tests/objectives/test_query_tower.py, whose objective consumes them.)
"""

import gzip
import json

import numpy as np
import pytest

import vmsst_testing
from vmsst_tasks import triplets as triplets_command
from vmsst_tasks.registry import triplets as triplet_task
from vmsst_tasks.sources import triplet_sets as triplets

ROWS = [  # file, score, sentence1, sentence2 (STSb's TAB-only csv layout)
    ("MSRvid", 5.0, "A man plays a guitar.", "A man is playing a guitar."),
    ("MSRvid", 4.5, "A cat sleeps.", "A cat is sleeping."),
    ("MSRvid", 0.5, "A man plays a guitar.", "A woman slices an onion."),
    ("headlines", 4.0, "Markets fall in Asia.", "Asian markets drop."),
    ("headlines", 5.0, "Rain expected today.", "Rain expected today."),
    ("images", 1.0, "A dog runs on grass.", "Two birds on a wire."),
    ("MSRvid", 3.0, "A boy jumps.", "A girl sings."),
]


def _write_stsb(folder, split="train"):
  lines = [f"main-captions\t{f}\t2012test\t{i:04d}\t{s:.3f}\t{a}\t{b}\n"
           for i, (f, s, a, b) in enumerate(ROWS)]
  (folder / f"sts-{split}.csv").write_text("".join(lines), encoding="utf-8")
  return folder


def test_each_high_pair_gets_the_most_specific_negative_available(tmp_path):
  rows, counts = triplets.stsb_triplets(_write_stsb(tmp_path), "train")
  assert (counts.pairs, counts.not_high, counts.skipped_identical, counts.kept) == (7, 3, 1, 3)
  assert (counts.same_anchor, counts.same_file, counts.any_file) == (1, 1, 1)
  # 1. same_anchor: the other side of the low pair that contains this anchor.
  assert rows[0] == ("A man plays a guitar.", "A man is playing a guitar.",
                     "A woman slices an onion.")
  # 2. same_file: a sentence of MSRvid's low pair (row 3).
  assert rows[1][:2] == ("A cat sleeps.", "A cat is sleeping.")
  assert rows[1][2] in {"A man plays a guitar.", "A woman slices an onion."}
  # 3. any_file: headlines has no low pair, so any low-pair sentence.
  assert rows[2][:2] == ("Markets fall in Asia.", "Asian markets drop.")
  assert rows[2][2] in {"A man plays a guitar.", "A woman slices an onion.",
                        "A dog runs on grass.", "Two birds on a wire."}
  assert triplets.stsb_triplets(tmp_path, "train", seed=0)[0] == rows  # seeded


def test_a_higher_threshold_keeps_fewer_pairs_and_counts_them(tmp_path):
  rows, counts = triplets.stsb_triplets(_write_stsb(tmp_path), "train", high=4.6)
  assert [r[0] for r in rows] == ["A man plays a guitar."]
  assert counts.pairs == counts.kept + counts.skipped_identical + counts.not_high == 7
  reported = triplets.pair_counts(counts)
  assert reported.read == 7 == reported.kept + sum(reported.skipped.values())


def test_a_split_without_low_pairs_says_there_are_no_negatives(tmp_path):
  (tmp_path / "sts-dev.csv").write_text(
      "main-captions\tMSRvid\t2012test\t0000\t5.000\tA man sings.\tA man is singing.\n")
  with pytest.raises(ValueError, match=r"sts-dev\.csv has no pair scored <= 1\.0"):
    triplets.stsb_triplets(tmp_path, "dev")


@pytest.mark.parametrize("ids, want", [([8, 41], [8, 41, 1, 0, 0]),
                                       ([5, 6, 7, 8, 9, 10], [5, 6, 7, 8, 1]),
                                       ([], [1, 0, 0, 0, 0])])
def test_pad_negative_trims_appends_eos_and_zero_pads(ids, want):
  import tensorflow as tf  # pylint: disable=import-outside-toplevel
  got = triplet_task.pad_negative(tf.constant(ids, tf.int32), 5).numpy()
  np.testing.assert_array_equal(got, want)


def test_command_writes_the_three_splits_from_stsb_dir(tmp_path, capfd):
  for split in ("train", "dev", "test"):
    _write_stsb(tmp_path, split)
  done = vmsst_testing.run_here(triplets_command, [f"--stsb_dir={tmp_path}", "--seed=0",
                                           f"--output={tmp_path / 'out'}"], capfd)
  assert done.returncode == 0, done.stderr[-2000:]
  for name, split in (("train", "train"), ("validation", "dev"), ("test", "test")):
    lines = (tmp_path / "out" / f"{name}.tsv").read_text(encoding="utf-8").splitlines()
    rows = [tuple(line.split("\t")) for line in lines]
    assert rows and rows == triplets.stsb_triplets(tmp_path, split, seed=0)[0], name


def test_command_names_an_msmarco_file_too_short_for_the_splits_and_writes_nothing(tmp_path,
                                                                                    capfd):
  path = tmp_path / "msmarco-triplets.jsonl.gz"
  with gzip.open(path, "wt", encoding="utf-8") as f:
    f.write(json.dumps({"query": "q", "pos": ["p"], "neg": ["n"]}) + "\n")
  done = vmsst_testing.run_here(triplets_command, [f"--msmarco={path}", f"--output={tmp_path / 'out'}"],
                                capfd)
  vmsst_testing.assert_user_error(done, str(path))
  assert not (tmp_path / "out").exists()
  done = vmsst_testing.run_here(triplets_command, [f"--stsb_dir={tmp_path / 'nowhere'}",
                                           f"--output={tmp_path / 'out'}"], capfd)
  vmsst_testing.assert_user_error(done, str(tmp_path / "nowhere"))
