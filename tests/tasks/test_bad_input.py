"""Bad corpus input (issue #6): every case is an error naming file and line, or counted.

Each test writes a few lines (raw bytes where the bytes matter) to tmp_path and
checks the policy table of tasks/sources/pair_readers.py: exact counts with
read = kept + skipped, the good lines around a bad one kept in order, or the
exact error content. The last tests cover untrusted parameter files.
"""

import gzip
import json
import logging
import os
import pathlib
import re

import numpy as np
import pytest
import seqio

from vmsst_tasks import registry
from vmsst_tasks.registry import common
from vmsst_tasks.registry import data_counts
from vmsst_tasks.registry import opus
from vmsst_tasks.registry import pairs as pair_family
from vmsst_tasks.sources import opus_readers
from vmsst_tasks.sources import pair_readers
from vmsst.base import run_directory
from vmsst.base import sentencepiece_vocabulary
from vmsst.base import text_files

REPO_ROOT = pathlib.Path(__file__).resolve().parents[2]
STRICT = pair_readers.InputPolicy(strict=True)


def write_bytes(path: pathlib.Path, data: bytes) -> pathlib.Path:
  if path.suffix == ".gz":
    with gzip.open(path, "wb") as f:
      f.write(data)
  else:
    path.write_bytes(data)
  return path


def read_opus(directory, policy=pair_readers.DEFAULT_POLICY, exclude=frozenset()):
  """(pairs as (text_a, text_b) tuples, counts) of every corpus in `directory`."""
  counts = pair_readers.PairCounts()
  pairs = opus_readers.opus_pairs(opus_readers.discover_opus(directory), counts=counts, policy=policy,
                             exclude=exclude)
  return [(p.text_a, p.text_b) for p in pairs], counts


def assert_counts(counts, read, kept, skipped):
  assert (counts.read, counts.kept, dict(counts.skipped)) == (read, kept, skipped)
  assert counts.read == counts.kept + sum(counts.skipped.values())


# ------------------------------------------------------------------ no tab / extra tab


def test_tsv_line_without_one_tab_is_skipped_and_counted(tmp_path):
  write_bytes(tmp_path / "t.de-en.tsv", b"eins\tone\nno tab\nzwei\ttwo\na\tb\tc\ndrei\tthree\n")
  pairs, counts = read_opus(tmp_path)
  assert pairs == [("eins", "one"), ("zwei", "two"), ("drei", "three")]
  assert_counts(counts, 5, 3, {"no_tab": 1, "extra_tab": 1})


def test_tsv_line_without_tab_is_an_error_when_strict(tmp_path):
  write_bytes(tmp_path / "t.de-en.tsv", b"eins\tone\nzwei\ttwo\nno tab\n")
  with pytest.raises(ValueError, match=r"t\.de-en\.tsv, line 3: 0 tabs, expected one .*"
                                       r"InputPolicy\.strict = False"):
    read_opus(tmp_path, STRICT)


def test_first_skips_are_logged_with_file_and_line(tmp_path, caplog):
  write_bytes(tmp_path / "t.de-en.tsv", b"x\n" * 3 + b"ok\tok\n" + b"\t\n")
  with caplog.at_level(logging.INFO, logger="absl"):  # whatever verbosity absl flags set
    read_opus(tmp_path, pair_readers.InputPolicy(log_first=2))
  logged = [r.getMessage() for r in caplog.records if "skipped" in r.getMessage()]
  path = tmp_path / "t.de-en.tsv"
  assert logged[0].startswith(f"opus: skipped {path}:1 (no_tab): {path}, line 1: 0 tabs")
  assert logged[1].startswith(f"opus: skipped {path}:2 (no_tab)")
  assert logged[2] == f"opus: skipped {path}:5 (empty_side)"  # Line 3 is over log_first=2.
  assert logged[3] == "opus: read=5 kept=1 skipped=4 (empty_side=1, no_tab=3)"


# ------------------------------------------------------------------------ empty side


def test_empty_side_is_skipped_in_moses_and_tsv(tmp_path):
  write_bytes(tmp_path / "m.de-en.de", b"a\n\n  \nd\n")
  write_bytes(tmp_path / "m.de-en.en", b"A\nB\nC\n\t\n")
  write_bytes(tmp_path / "t.de-en.tsv", b"x\tX\n\tY\n z \t \n")
  pairs, counts = read_opus(tmp_path, STRICT)  # Empty sides are filtered, even when strict.
  assert pairs == [("a", "A"), ("x", "X")]
  assert_counts(counts, 7, 2, {"empty_side": 5})


# ----------------------------------------------------------------------- invalid UTF-8


@pytest.mark.parametrize("suffix", ["", ".gz"])
def test_invalid_utf8_skips_the_pair_and_keeps_alignment(tmp_path, suffix):
  # Line 2 of the German side is Latin-1 ("Grüße" with 0xfc), line 4 is cut
  # mid-character; the English side stays aligned with every later line.
  write_bytes(tmp_path / f"m.de-en.de{suffix}",
              b"eins\nGr\xfc\xdfe\ndrei\n\xc3\nf\xc3\xbcnf\n")
  write_bytes(tmp_path / "m.de-en.en", b"one\ngreetings\nthree\nfour\nfive\n")
  pairs, counts = read_opus(tmp_path)
  assert pairs == [("eins", "one"), ("drei", "three"), ("fünf", "five")]
  assert_counts(counts, 5, 3, {"invalid_utf8": 2})


def test_invalid_utf8_is_an_error_naming_line_and_bytes_when_strict(tmp_path):
  write_bytes(tmp_path / "m.de-en.de", b"eins\nzwei Gr\xfc\xdfe\n")
  write_bytes(tmp_path / "m.de-en.en", b"one\ntwo\n")
  expected = (f"{tmp_path / 'm.de-en.de'}, line 2: invalid UTF-8 b'\\xfc' at byte 7 of the "
              "line (byte 12 of the file, counting from 0); re-encode the file as UTF-8 "
              "(iconv -f <its encoding> -t utf-8 in > out)")
  with pytest.raises(ValueError, match=re.escape(expected)):
    read_opus(tmp_path, STRICT)


def test_read_lines_of_side_files_is_always_strict(tmp_path):
  path = write_bytes(tmp_path / "DOCUMENT_IDS.tsv.gz", b"a\nb\n\xff\n")
  with pytest.raises(ValueError, match=r"DOCUMENT_IDS\.tsv\.gz:3: byte 0xff is not UTF-8; re-encode"):
    text_files.read_lines(path)


def test_invalid_utf8_in_multi30k_skips_only_that_languages_pairs(tmp_path):
  root = tmp_path / pair_readers.MULTI30K_DIR
  root.mkdir()
  for short in pair_readers.MULTI30K_LANGUAGES:
    lines = [f"{short} {i}".encode() for i in range(3)]
    if short == "de":
      lines[1] = b"de \xe4"
    write_bytes(root / f"train.{short}.gz", b"\n".join(lines) + b"\n")
  counts = pair_readers.PairCounts()
  pairs = list(pair_readers.multi30k_pairs(tmp_path, "train", counts=counts))
  # 3 lines x 6 pairs; line 1's three German pairs (eng-deu, deu-fra, deu-ces) go.
  assert_counts(counts, 18, 15, {"invalid_utf8": 3})
  assert [(p.text_a, p.text_b) for p in pairs[6:9]] == [
      ("en 1", "fr 1"), ("en 1", "cs 1"), ("fr 1", "cs 1")]


# ------------------------------------------------------------------------ CRLF, BOM


def test_crlf_and_byte_order_marks_are_removed_without_loss(tmp_path):
  bom = "\ufeff".encode()
  write_bytes(tmp_path / "m.de-en.de", bom + b"eins\r\nzw" + bom + b"ei\r\ndrei\r")
  write_bytes(tmp_path / "m.de-en.en", b"one\r\ntwo\nthree")
  write_bytes(tmp_path / "t.de-en.tsv.gz", bom + b"vier\tfour\r\nf\xc3\xbcnf\tfive\r\n")
  pairs, counts = read_opus(tmp_path, STRICT)
  assert pairs == [("eins", "one"), ("zwei", "two"), ("drei", "three"), ("vier", "four"),
                   ("fünf", "five")]
  assert_counts(counts, 5, 5, {})


def test_lone_carriage_return_inside_a_line_does_not_split_it(tmp_path):
  write_bytes(tmp_path / "m.de-en.de", b"a\rb\nc\n")
  write_bytes(tmp_path / "m.de-en.en", b"A\nC\n")
  pairs, _ = read_opus(tmp_path)
  assert pairs == [("a\rb", "A"), ("c", "C")]


# ----------------------------------------------------------- Moses line-count mismatch


def test_moses_mismatch_names_both_files_and_counts(tmp_path):
  write_bytes(tmp_path / "m.de-en.de", b"a\nb\n\xff\nd\n")  # A bad byte is still a line.
  write_bytes(tmp_path / "m.de-en.en", b"A\nB\nC\n")
  (corpus,) = opus_readers.discover_opus(tmp_path)
  expected = (f"Moses files are not line-aligned: {tmp_path / 'm.de-en.de'} has 4 lines but "
              f"{tmp_path / 'm.de-en.en'} has 3; re-extract the corpus.")
  with pytest.raises(ValueError, match=re.escape(expected)):
    opus_readers.check_moses_line_counts(corpus)
  counts = pair_readers.PairCounts()
  stream = opus_readers.opus_pairs([corpus], counts=counts)
  assert [next(stream).text_a, next(stream).text_a] == ["a", "b"]
  with pytest.raises(ValueError, match=re.escape(expected)):
    next(stream)  # Never truncated to the shorter side: the pass fails at its end.
  assert_counts(counts, 3, 2, {"invalid_utf8": 1})


# ------------------------------------------------------------ unknown language codes


def test_unknown_code_in_opus_file_name_names_file_and_close_codes(tmp_path):
  write_bytes(tmp_path / "m.deu-engl.deu", b"a\n")
  write_bytes(tmp_path / "m.deu-engl.engl", b"b\n")
  with pytest.raises(ValueError) as error:
    opus_readers.discover_opus(tmp_path)
  message = str(error.value)
  assert message.startswith(f"{tmp_path / 'm.deu-engl.deu'}: language code 'engl' is unknown "
                            "(closest known: eng")
  assert "vmsst.base.languages.LANGUAGES" in message and "_EXTRA_LANGUAGES" in message


def test_unknown_code_in_ntrex_file_name_names_the_file(tmp_path):
  root = tmp_path / pair_readers.NTREX_DIR
  root.mkdir()
  write_bytes(root / "newstest2019-src.eng.txt.gz", b"a\n")
  write_bytes(root / "newstest2019-ref.qqq.txt.gz", b"b\n")
  with pytest.raises(ValueError, match=re.escape(
      f"{root / 'newstest2019-ref.qqq.txt.gz'}: language code 'qqq' is unknown")):
    pair_readers.ntrex_files(tmp_path)


# --------------------------------------------------------------------- overlong lines


def test_overlong_side_is_skipped_at_max_chars_plus_one(tmp_path):
  write_bytes(tmp_path / "t.de-en.tsv",
              b"kurz\tshort\n" + b"x" * 10 + b"\tten\n" + b"y" * 11 + b"\televen\n"
              + b"ok\t" + b"z" * 11 + b"  \nende\tend\n")
  pairs, counts = read_opus(tmp_path, pair_readers.InputPolicy(max_chars=10))
  assert pairs == [("kurz", "short"), ("x" * 10, "ten"), ("ende", "end")]
  assert_counts(counts, 5, 3, {"overlong": 2})
  _, default = read_opus(tmp_path)  # 2000 characters by default: all kept.
  assert_counts(default, 5, 5, {})


# ------------------------------------------------- registered tasks report the totals


def bad_opus_dir(directory: pathlib.Path) -> pathlib.Path:
  """One file per bad case; 11 pairs read, 5 kept (EXPECTED_TRAIN, hand-counted)."""
  directory.mkdir()
  write_bytes(directory / "m.de-en.de", b"\xef\xbb\xbfeins\r\nzwei \xfc\n\ndrei\n")
  write_bytes(directory / "m.de-en.en", b"one\r\ntwo\nempty\nthree\n")
  write_bytes(directory / "t.en-fr.tsv", b"hi\tsalut\nno tab\n" + b"w" * 2001 + b"\tlong\n"
              + b"a\tb\tc\nbye\tau revoir\n\t\nok\td'accord\n")
  return directory


EXPECTED_TRAIN = {"read": 11, "kept": 5, "skipped": 6,
                  "skipped_by_reason": {"empty_side": 2, "extra_tab": 1, "invalid_utf8": 1,
                                        "no_tab": 1, "overlong": 1}}


@pytest.mark.slow  # over ~7 s (docs/results/tests/)
def test_registered_tasks_report_the_same_totals(data_dir, tiny_vocab_path, tmp_path):
  opus_dir = bad_opus_dir(tmp_path / "opus")
  exclude = common.tatoeba_exclusion(str(data_dir))
  _, direct = read_opus(opus_dir, exclude=exclude)
  assert direct.as_dict() == EXPECTED_TRAIN
  opus.register_opus_tasks(str(opus_dir), sentencepiece_vocabulary.get_vocabulary(tiny_vocab_path),
                           exclude)
  # Files read by tf.data: the same pairs as the Python readers keep, counted by one pass
  # of the same ops before any training pass.
  before = data_counts.report_data_counts(opus.OPUS_MIXTURE)
  assert before["total"] == {"train": EXPECTED_TRAIN}
  direct_pairs, _ = read_opus(opus_dir, exclude=exclude)
  streamed = [(ex["text_a"].decode(), ex["text_b"].decode())
              for task in ("vmsst_opus.deu.eng", "vmsst_opus.eng.fra")
              for ex in seqio.get_mixture_or_task(task).source.get_dataset(
                  "train", shuffle=False).as_numpy_iterator()]
  assert streamed == direct_pairs
  model_dir = tmp_path / "model"
  report = data_counts.report_data_counts(
      opus.OPUS_MIXTURE, output=run_directory.of(str(model_dir)).data_counts)
  assert report["total"] == {"train": EXPECTED_TRAIN}
  assert report["tasks"]["vmsst_opus.deu.eng"]["train"]["kept"] == 2
  assert json.loads(pathlib.Path(run_directory.of(str(model_dir)).data_counts).read_text()) == report
  vocab = sentencepiece_vocabulary.get_vocabulary(tiny_vocab_path)
  strict = opus.register_opus_tasks(str(opus_dir), vocab, exclude, policy=STRICT)
  dataset = seqio.get_mixture_or_task(strict[("eng", "fra")]).get_dataset(None, shuffle=False)
  with pytest.raises(Exception, match=re.escape(f"{opus_dir / 't.en-fr.tsv'}, line 2: 0 tabs")):
    list(dataset.as_numpy_iterator())  # The policy reaches the streamed pass.


@pytest.mark.slow
def test_demo_mixture_total_is_the_sum_of_its_sources(data_dir, tiny_vocab_path, caplog):
  registry.register_tasks(str(data_dir), tiny_vocab_path)
  with caplog.at_level(logging.INFO, logger="absl"):  # whatever verbosity absl flags set
    report = data_counts.report_data_counts(pair_family.DEMO_MIXTURE)
  assert [r.getMessage() for r in caplog.records] == [
      "vmsst_multi30k[train]: read=174000 kept=174000 skipped=0 (none)",
      "vmsst_multi30k[validation]: read=6084 kept=6084 skipped=0 (none)",
      "vmsst_ntrex128[train]: read=224192 kept=224191 skipped=1 (tatoeba_overlap=1)",
      "vmsst_ntrex128[validation]: read=23436 kept=23436 skipped=0 (none)",
      "vmsst_ntrex_multi30k total[train]: read=398192 kept=398191 skipped=1 (tatoeba_overlap=1)",
      "vmsst_ntrex_multi30k total[validation]: read=29520 kept=29520 skipped=0 (none)"]
  # NTREX 1808 x 124 + Multi30k 29000 x 6 read; one NTREX line is a Tatoeba sentence.
  assert report["total"]["train"] == {"read": 398192, "kept": 398191, "skipped": 1,
                                      "skipped_by_reason": {"tatoeba_overlap": 1}}
  assert report["total"]["validation"]["read"] == 23436 + 6084
  assert report["tasks"]["vmsst_multi30k"]["train"]["kept"] == 174000


def test_training_writes_the_data_counts_into_model_dir(tiny_model):
  model_dir, _ = tiny_model  # conftest: a 4-step vmsst.training.loop.train() run (shared, once).
  report = json.loads(pathlib.Path(run_directory.of(str(model_dir)).data_counts).read_text())
  assert report["mixture"] == "vmsst_ntrex_multi30k"
  assert report["total"]["train"]["read"] == 398192 and report["total"]["train"]["kept"] == 398191
  assert report["tasks"]["vmsst_ntrex128"]["validation"]["read"] == 23436


def test_input_policy_is_bindable_in_gin():
  import gin  # pylint: disable=g-import-not-at-top
  try:  # Gin rejects a binding of a parameter register_families does not have.
    gin.parse_config(["register_families.input_policy = @InputPolicy()",
                      "InputPolicy.strict = True", "InputPolicy.max_chars = 500"])
    assert pair_readers.InputPolicy() == pair_readers.InputPolicy(strict=True, max_chars=500)
  finally:
    gin.clear_config()
  assert pair_readers.InputPolicy() == pair_readers.DEFAULT_POLICY


# ---------------------------------------------------------------- untrusted files


class _Payload:
  """Unpickling this creates a directory: the proof that a loader ran pickle."""

  def __init__(self, marker: pathlib.Path):
    self.marker = marker

  def __reduce__(self):
    return os.mkdir, (str(self.marker),)


def test_param_file_with_a_pickled_object_array_is_refused(tmp_path):
  from vmsst.model import param_files  # pylint: disable=g-import-not-at-top
  marker = tmp_path / "unpickled"
  path = tmp_path / "params.npz"
  np.savez(path, **{"a/kernel": np.array([_Payload(marker)], dtype=object)})
  with pytest.raises(Exception, match="(?i)header|safetensor|deserializ"):
    param_files.load_params(str(path), {"a": {"kernel": np.zeros(1, np.float32)}})
  with pytest.raises(ValueError, match="allow_pickle=False"):  # numpy's default refuses too.
    np.load(path)["a/kernel"]  # (vmsst.teacher_cache, vmsst.mine load .npy this way).
  assert not marker.exists()


def test_no_code_path_unpickles_files():
  """Checkpoints are orbax (zarr + JSON), params safetensors: nothing may unpickle."""
  pattern = re.compile(r"\bimport pickle\b|\bpickle\.loads?\(|allow_pickle\s*=\s*True|"
                       r"torch\.load\(|\bimport (c?pickle|dill|joblib)\b")
  offenders = [f"{path.relative_to(REPO_ROOT)}:{number}"
               for folder in ("vmsst", "tasks", "bench", "launch")
               for path in sorted((REPO_ROOT / folder).rglob("*.py"))
               for number, line in enumerate(path.read_text().splitlines(), 1)
               if pattern.search(line)]
  assert not offenders
