"""vmsst.build_flores: NTREX-128's held-out documents in the FLORES layout the suite reads."""

import gzip
import subprocess
import sys

from vmsst.build_data import flores as build_flores
from vmsst.evaluation import flores
from vmsst_tasks.sources import pair_readers

import vmsst_testing


def test_held_out_lines_of_every_training_language_aligned_and_read_back(data_dir, tmp_path):
  counts = build_flores.build(data_dir, tmp_path)
  documents = pair_readers.ntrex_documents(data_dir)
  held_out = pair_readers.ntrex_validation_documents(data_dir)
  rows = [i for i, doc in enumerate(documents) if doc in held_out]
  assert counts == {"languages": len(pair_readers.ntrex_files(data_dir)), "lines": len(rows),
                    "dropped_lines": 0, "documents": len(held_out)}
  directory, split = flores.split_folder(tmp_path / "flores")
  texts = flores.read_split(directory, split)
  assert len(texts) == counts["languages"] and {len(v) for v in texts.values()} == {len(rows)}
  assert all(flores.canonical(code) == code for code in texts)  # no code unknown to the suite
  assert flores.english_code(list(texts), directory) == "eng"
  with gzip.open(data_dir / "ntrex128" / "newstest2019-ref.deu.txt.gz", "rt") as f:
    german = f.read().split("\n")
  assert texts["deu"] == [german[i].strip("\r\ufeff") for i in rows]  # only held-out lines
  assert "Not FLORES data" in (tmp_path / "flores" / "README.md").read_text()


def test_command_names_a_missing_corpus(tmp_path):
  done = subprocess.run([sys.executable, "-m", "vmsst.build_flores",
                         f"--data_dir={tmp_path}", f"--output={tmp_path}/out"],
                        cwd=vmsst_testing.ROOT, capture_output=True, text=True, check=False)
  vmsst_testing.assert_user_error(done, f"--data_dir={tmp_path}", "ntrex128/DOCUMENT_IDS.tsv")
