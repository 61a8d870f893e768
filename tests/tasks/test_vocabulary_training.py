"""Tests of tasks/sources/vocabulary_training.py on the shared corpora."""

import subprocess
import sys

import pytest
import sentencepiece as spm

import vmsst_testing
from vmsst import vocabulary
from vmsst_tasks.sources import vocabulary_training


def test_training_sentences_are_distinct_and_tatoeba_filtered(data_dir, tmp_path, capsys):
  tatoeba = (data_dir / "tatoeba" / "v1" / "tatoeba.deu-eng.deu").read_text().splitlines()[0]
  (tmp_path / "toy.de-en.tsv").write_text(f"Hallo Welt\tHello world\n{tatoeba}\tx\nHallo Welt\tHi world\n")
  sentences = list(vocabulary_training.training_sentences(str(data_dir), [f"opus:{tmp_path}"]))
  assert sentences == ["Hallo Welt", "Hello world", "Hi world"]
  assert "read=3 kept=2 skipped=1 (tatoeba_overlap=1); 3 new distinct sentences" in capsys.readouterr().out
  with pytest.raises(ValueError, match="Unknown source 'wmt'"):
    list(vocabulary_training.training_sentences(str(data_dir), ["wmt"]))


_TRAIN_ONE = """
import gzip, sys
from vmsst_tasks.sources import vocabulary_training
with gzip.open(sys.argv[1], "rt", encoding="utf-8") as f:
  sentences = f.read().splitlines()[:30000]
vocabulary_training.train_vocabulary(sentences, sys.argv[2], 2000, input_sentence_size=10000,
                                     num_threads=2)
"""


def test_a_rerun_trains_the_same_vocabulary_when_the_corpus_is_sampled(data_dir, tmp_path):
  """Two processes, one vocabulary: SentencePiece's own sampling differed between processes
  whatever the seed, so two `make train`s on one commit trained two vocabularies."""
  def pieces(name):
    subprocess.run([sys.executable, "-c", _TRAIN_ONE, str(data_dir / "multi30k" / "train.de.gz"),
                    str(tmp_path / name / "spm")], check=True, cwd=vmsst_testing.ROOT)
    processor = spm.SentencePieceProcessor(model_file=str(tmp_path / name / "spm.model"))
    return [(processor.id_to_piece(i), processor.get_score(i))
            for i in range(processor.get_piece_size())]

  assert pieces("first") == pieces("second")


def test_the_command_trains_on_its_input_sentence_size_sample(data_dir, tmp_path, capfd):
  """`vocabulary --input_sentence_size=40` (typed, in this process): 40 sampled Multi30k
  sentences cannot fill 2000 pieces (the session's tiny vocabulary takes its 2000 from 4000
  sentences), so SentencePiece's refusal, one error line naming --vocab_size, shows the sample
  was what it trained on."""
  done = vmsst_testing.run_here(vocabulary, [
      f"--data_dir={data_dir}", "--sources=multi30k", "--vocab_size=2000",
      "--input_sentence_size=40", f"--output={tmp_path / 'vocab' / 'spm'}"], capfd)
  vmsst_testing.assert_user_error(done, "--vocab_size=2000")
  assert not (tmp_path / "vocab").exists()
