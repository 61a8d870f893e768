"""An input that yields nothing stops with one `error:` line where it is made and at training.

The README's `--min_links=10` on the shipped two-article sample keeps no entity:
the command used to write 0 examples and exit 0, and training then died in
JAX (`Cannot do a non-empty jnp.take() from an empty axis`).
"""

import pathlib
import subprocess
import sys

import pytest
import seqio

import vmsst_testing
from vmsst_tasks.registry import common
from vmsst_tasks.registry import data_counts
from vmsst_tasks.registry import entities
from vmsst_tasks.registry import opus
from vmsst_tasks.registry import seqio_sources
from vmsst_tasks.sources import pair_readers
from vmsst_tasks.sources import wikipedia as we
from vmsst.base import cli
from vmsst.base import sentencepiece_vocabulary

REPO = vmsst_testing.ROOT
SAMPLE = (REPO.parent / "shared" / "data" / "wiki_entity_sample"
          / "enwiki-pages-articles-sample.xml.bz2")


def _error_line(done: subprocess.CompletedProcess | vmsst_testing.Ended) -> str:
  assert done.returncode == 2, done.stderr[-3000:]
  assert "Traceback" not in done.stderr, done.stderr[-3000:]
  errors = [line for line in done.stderr.splitlines() if line.startswith("error: ")]
  assert len(errors) == 1, done.stderr[-3000:]
  return errors[0]


def test_wiki_entities_command_with_the_readme_threshold_on_the_sample_stops(tmp_path):
  if not SAMPLE.exists():
    pytest.skip(f"{SAMPLE} not found")
  done = subprocess.run([sys.executable, "-m", "vmsst_tasks.wiki_entities", f"--dump={SAMPLE}",
                         f"--output={tmp_path / 'out'}", "--min_links=10"],
                        cwd=REPO, capture_output=True, text=True, check=False)
  line = _error_line(done)
  assert str(SAMPLE) in line and "0 examples" in line and "--min_links" in line
  assert "kept" in line and "below_threshold" in line  # the counts that explain it
  assert not (tmp_path / "out").exists()  # nothing half-written for training to trip on


def test_entity_directory_without_training_examples_is_refused_at_registration(tmp_path):
  we.write(str(tmp_path), [], [], we.Counts(), 0, min_links=10)  # what the old command wrote
  with pytest.raises(cli.UserError, match=r"no training example.*--min_links"):
    seqio_sources.EntitySentenceSource(str(tmp_path), name=entities.ENTITY_TASK)


def test_opus_directory_of_empty_files_is_refused(tmp_path, tiny_vocab_path):
  for side in ("en", "de"):
    (tmp_path / f"Europarl.de-en.{side}").write_text("")
  (tmp_path / "no_opus_files").mkdir()
  vocab = sentencepiece_vocabulary.get_vocabulary(tiny_vocab_path)
  with pytest.raises(cli.UserError, match=r"no usable OPUS pair \(1 files, 0 lines\)"):
    opus.register_opus_tasks(str(tmp_path), vocab, frozenset())
  with pytest.raises(cli.UserError, match="No OPUS files"):
    opus.register_opus_tasks(str(tmp_path / "no_opus_files"), vocab, frozenset())


def test_a_filter_that_drops_every_pair_names_the_task_counts_and_the_flag(tiny_vocab_path):
  counts = pair_readers.PairCounts(read=3, kept=0)
  counts.skipped["overlong"] = 3
  source = seqio_sources.InMemoryPairSource({"train": [], "validation": []},
                                            {"train": counts, "validation": pair_readers.PairCounts()})
  common.register_pair_task("vmsst_test_empty", source,
                              sentencepiece_vocabulary.get_vocabulary(tiny_vocab_path))
  seqio.MixtureRegistry.remove("vmsst_test_empty_mix")
  seqio.MixtureRegistry.add("vmsst_test_empty_mix", [("vmsst_test_empty", 1.0)])
  with pytest.raises(cli.UserError) as raised:
    data_counts.check_training_data("vmsst_test_empty_mix")
  message = str(raised.value)
  assert message.startswith("vmsst_test_empty: no training example")
  assert "read=3 kept=0 skipped=3 (overlong=3)" in message and "InputPolicy.max_chars" in message


@pytest.mark.integration  # registers the run's tasks over the shared corpora first (~1 s)
def test_training_on_an_empty_entity_directory_is_one_error_line(data_dir, tiny_vocab_path,
                                                                 tmp_path, monkeypatch, capfd):
  """`python -m vmsst.train` past its imports, in this process (`vmsst_testing.command_here`:
  absl's parsing and `cli.user_errors`, as the command runs its `main`)."""
  entity_dir = tmp_path / "entities"
  we.write(str(entity_dir), [], [], we.Counts(), 0, min_links=10)
  bindings = vmsst_testing.small_run_bindings(data_dir, tiny_vocab_path, tmp_path / "run", 2,
                                              extra=[f"ENTITY_DIR = '{entity_dir}'",
                                                     "train.evaluator = None"])
  monkeypatch.chdir(REPO)
  with vmsst_testing.command_module("vmsst.train") as train:
    done = vmsst_testing.command_here(
        train.main, "vmsst.train", ["--gin_file=gin/runs/entity_contrastive_cpu.gin",
                                    *[f"--gin_bindings={b}" for b in bindings]], capfd)
  line = _error_line(done)
  assert str(entity_dir) in line and "--min_links" in line
  assert "jnp.take" not in done.stderr


def test_opus_files_whose_every_pair_is_dropped_stop_training_with_their_counts(
    tmp_path, tiny_vocab_path):
  (tmp_path / "Europarl.de-en.de").write_text("ein\n\nzwei\n")
  (tmp_path / "Europarl.de-en.en").write_text("\n\n\n")  # every English side empty
  names = opus.register_opus_tasks(str(tmp_path),
                                   sentencepiece_vocabulary.get_vocabulary(tiny_vocab_path),
                                   frozenset())
  with pytest.raises(cli.UserError) as raised:  # what train runs before the first batch
    data_counts.check_training_data(opus.OPUS_MIXTURE)
  message = str(raised.value)
  assert message.startswith(f"{names[('deu', 'eng')]}: no training example in "
                            "Europarl.de-en.de+Europarl.de-en.en")
  assert "read=3 kept=0 skipped=3 (empty_side=3)" in message
