"""The commands around a trained model with every path in a bucket, on the GCS emulator.

`export` (SavedModel and sentence-transformers) from a model directory in the bucket into
the bucket; `evaluate`, `embed`, `score` and `mine` with inputs and outputs there. Each
runs from an empty working directory: a bucket path that lost its scheme (`pathlib` makes
`gs:/bucket/...`) would show there, or in the temporary directory, as a local `gs:` folder.
`evaluate`, `embed`, `score` and `mine` are typed as a pod user types them, flags and all, and
run in this process (`vmsst_testing.run_here`: absl's parsing and the command's `main`, without
a process's seconds of imports); `export` and `score --saved_model` run as processes:
TensorFlow's own reads of the bucket (a SavedModel) would wait, in this process, on the
emulator's proxy, whose threads need the GIL it holds.
"""

import json
import os
import pathlib
import subprocess
import sys
import tempfile
import uuid

import numpy as np
import pytest

import vmsst_testing
from vmsst.base import cli
from vmsst import embed
from vmsst import evaluate
from vmsst.base import files
from vmsst import mine
from vmsst import score
from vmsst.encoding import checkpoint
from vmsst.encoding import embed_files
from vmsst.encoding import encoder_flags
from vmsst.encoding import protocol

pytestmark = pytest.mark.slow

TIMEOUT_S = 600
SENTENCES = ["Die Katze schläft.", "Der Zug ist spät.", "Ich lese ein Buch.", "",
             "Die Katze schläft.", "Wir gehen nach Hause."]
ENGLISH = ["The cat sleeps.", "The train is late.", "I am reading a book.",
           "We are going home.", "It is raining."]


def local_gs_folders(*roots: pathlib.Path) -> list[str]:
  """Any local folder named like a bucket path that lost its scheme (`gs:`)."""
  return [str(p) for root in roots for p in pathlib.Path(root).rglob("gs:*")]


def objects(gcs, prefix: str) -> set[str]:
  """The emulator's own object names under a gs:// prefix, relative to it (no directory
  markers)."""
  key = prefix[len(f"gs://{gcs.bucket}/"):].rstrip("/") + "/"
  return {name[len(key):] for name in gcs.objects(key) if not name.endswith("/")}


@pytest.fixture(name="bucket", scope="module")
def _bucket(gcs, tiny_model):
  """The tiny trained model and the inputs, copied into a fresh prefix of the bucket."""
  root = gcs.path(f"commands-{uuid.uuid4().hex[:8]}")
  model_dir = files.join(root, "model")
  files.copytree(tiny_model[0], model_dir)
  files.write_text(files.join(root, "in", "de.txt"), "\n".join(SENTENCES) + "\n")
  files.write_text(files.join(root, "in", "en.txt"), "\n".join(ENGLISH) + "\n")
  files.write_text(files.join(root, "in", "pairs.tsv"),
                   "".join(f"{a}\t{b}\n" for a, b in zip(SENTENCES, ENGLISH)))
  tatoeba = files.join(root, "data", "tatoeba", "v1")
  files.write_text(files.join(tatoeba, "tatoeba.deu-eng.deu"), "\n".join(SENTENCES[:3]) + "\n")
  files.write_text(files.join(tatoeba, "tatoeba.deu-eng.eng"), "\n".join(ENGLISH[:3]) + "\n")
  return {"root": root, "model": model_dir, "local_model": str(tiny_model[0])}


@pytest.fixture(name="workdir")
def _workdir(tmp_path, monkeypatch):
  """An empty working directory and temporary directory of the test's own."""
  (tmp_path / "tmp").mkdir()
  monkeypatch.chdir(tmp_path)
  monkeypatch.setenv("TMPDIR", str(tmp_path / "tmp"))
  monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))
  yield tmp_path
  assert local_gs_folders(tmp_path) == []


@pytest.fixture(name="encoder", scope="module")
def _encoder(bucket):
  """The bucket model, restored from the bucket (orbax and model.json through gs://)."""
  return checkpoint.CheckpointEncoder.from_model_dir(bucket["model"], batch_size=4)


def run_command(module: str, *flags: str, cwd: pathlib.Path) -> subprocess.CompletedProcess:
  """`python -m <module> <flags>` with the emulator's variables (os.environ, set by the gcs
  fixture), one CPU device and a temporary directory under `cwd`."""
  env = dict(os.environ, XLA_FLAGS="--xla_force_host_platform_device_count=1",
             JAX_PLATFORMS="cpu", TF_CPP_MIN_LOG_LEVEL="2", TMPDIR=str(cwd / "tmp"))
  return subprocess.run([sys.executable, "-m", module, *flags], cwd=cwd, env=env,
                        capture_output=True, text=True, timeout=TIMEOUT_S, check=False)


def test_files_streams_renames_and_local_copies_in_the_bucket(gcs, workdir):
  """vmsst.base.files' bucket side beyond the emulator's smoke test: what the commands rely on."""
  root = gcs.path(f"files-{uuid.uuid4().hex[:8]}")
  with files.open(files.join(root, "a.txt"), "w") as f:
    f.writelines(["one\n", "twö\n"])
  with files.open(files.join(root, "a.txt")) as f:
    assert list(f) == ["one\n", "twö\n"]
  with files.open_text(files.join(root, "b.txt.gz"), "w") as f:
    f.write("x\ty\n")
  assert files.read_bytes(files.join(root, "b.txt.gz"))[:2] == b"\x1f\x8b"
  with files.open_text(files.join(root, "b.txt.gz")) as f:
    assert f.read() == "x\ty\n"
  with pytest.raises(FileNotFoundError):
    files.read_text(files.join(root, "absent.txt"))
  files.write_text(files.join(root, "c.txt"), "new")
  files.rename(files.join(root, "c.txt"), files.join(root, "a.txt"))  # replaces, as os.replace
  assert files.read_text(files.join(root, "a.txt")) == "new"
  files.write_text(files.join(root, "dir", "deep", "d.txt"), "d")
  files.rename(files.join(root, "dir"), files.join(root, "moved"))
  assert files.find(files.join(root, "moved")) == [files.join(root, "moved", "deep", "d.txt")]
  assert not files.exists(files.join(root, "dir"))
  with files.local_copy(files.join(root, "moved")) as local:
    assert pathlib.Path(local, "deep", "d.txt").read_text() == "d"
  with files.local_output(files.join(root, "out"), directory=True) as local:
    pathlib.Path(local, "e.txt").write_text("e")
  assert objects(gcs, root) == {"a.txt", "b.txt.gz", "moved/deep/d.txt", "out/e.txt"}


def _typed(command, *args: str, capfd) -> vmsst_testing.Ended:
  """`python -m <command> ARGS` in this process; the test fails on any exit but 0."""
  done = vmsst_testing.run_here(command, args, capfd)
  assert done.returncode == 0, done.stderr[-3000:]
  return done


def test_embed_command_reads_the_model_and_input_from_the_bucket_and_writes_there(
    gcs, bucket, workdir, encoder, capfd):
  output = files.join(bucket["root"], "out", "embed", "de.npy")
  done = _typed(embed, f"--model_dir={bucket['model']}",
                f"--input={files.join(bucket['root'], 'in', 'de.txt')}", f"--output={output}",
                capfd=capfd)
  assert f"wrote {output}" in done.stdout + done.stderr
  assert objects(gcs, files.join(bucket["root"], "out", "embed")) == {"de.npy"}
  got = files.load_npy(output)
  want = protocol.UniqueSentences(encoder, progress=False).encode(SENTENCES)
  np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_a_missing_bucket_model_or_input_is_one_error_line(bucket, workdir, capfd):
  missing = files.join(bucket["root"], "no_such_model")
  with pytest.raises(cli.UserError, match=f"--model_dir={missing} is not a directory"):
    encoder_flags.check_paths(model_dir=missing)
  with pytest.raises(cli.UserError, match="has no model.json"):
    encoder_flags.check_paths(model_dir=files.join(bucket["root"], "in"))
  done = vmsst_testing.run_here(embed, [
      f"--model_dir={bucket['model']}", f"--input={files.join(bucket['root'], 'in', 'nothing.txt')}",
      f"--output={files.join(bucket['root'], 'out', 'x.npy')}"], capfd)
  vmsst_testing.assert_user_error(done, "input", "nothing.txt")


def test_score_and_mine_commands_read_and_write_the_bucket(gcs, bucket, workdir, encoder, capfd):
  get_encoder = lambda: protocol.UniqueSentences(encoder, progress=False)
  out = files.join(bucket["root"], "out", "pairs")
  model = f"--model_dir={bucket['model']}"
  done = _typed(score, model, f"--input={files.join(bucket['root'], 'in', 'pairs.tsv')}",
                f"--output={files.join(out, 'scores.txt')}", capfd=capfd)
  assert f"{len(ENGLISH)} pairs scored" in done.stdout
  scores = [float(x) for x in files.read_text(files.join(out, "scores.txt")).split()]
  first, second = SENTENCES[:len(ENGLISH)], ENGLISH
  np.testing.assert_allclose(scores, score.score_pairs(get_encoder(), first, second), atol=2e-6)
  _typed(mine, model, f"--src={files.join(bucket['root'], 'in', 'de.txt')}",
         f"--trg={files.join(bucket['root'], 'in', 'en.txt')}",
         f"--output={files.join(out, 'mined.tsv')}", "--k=2", capfd=capfd)
  mined = files.read_text(files.join(out, "mined.tsv")).splitlines()
  assert mined and all(len(line.split("\t")) == 3 for line in mined)
  assert objects(gcs, out) == {"scores.txt", "mined.tsv"}


def test_mine_command_reads_precomputed_embeddings_from_the_bucket(gcs, bucket, workdir, encoder,
                                                                   capfd):
  """The .npy files written by the library with the module's encoder (the embed command's own
  bucket run is the first test): one model restore here, not three."""
  out = files.join(bucket["root"], "out", "precomputed")
  model = f"--model_dir={bucket['model']}"
  sides = [f"--src={files.join(bucket['root'], 'in', 'de.txt')}",
           f"--trg={files.join(bucket['root'], 'in', 'en.txt')}", "--k=2"]
  unique = protocol.UniqueSentences(encoder, progress=False)
  for side in ("de", "en"):
    embed_files.embed_file(lambda: unique, files.join(bucket["root"], "in", f"{side}.txt"),
                           files.join(out, f"{side}.npy"))
  _typed(mine, *sides, f"--src_embeddings={files.join(out, 'de.npy')}",
         f"--trg_embeddings={files.join(out, 'en.npy')}",
         f"--output={files.join(out, 'from_npy.tsv')}", capfd=capfd)
  _typed(mine, model, *sides, f"--output={files.join(out, 'encoded.tsv')}", capfd=capfd)
  assert (files.read_text(files.join(out, "from_npy.tsv"))
          == files.read_text(files.join(out, "encoded.tsv")))
  assert objects(gcs, out) == {"de.npy", "en.npy", "from_npy.tsv", "encoded.tsv"}


def test_evaluate_command_writes_results_report_and_plot_into_the_bucket(gcs, bucket, workdir,
                                                                         capfd):
  output = files.join(bucket["root"], "out", "eval")
  data = files.join(bucket["root"], "data")
  done = _typed(evaluate, f"--model_dir={bucket['model']}", f"--data_dir={data}",
                "--suite=tatoeba", f"--output={output}", capfd=capfd)
  assert f"wrote {output}/results.json" in done.stdout
  results = json.loads(files.read_text(files.join(output, "results.json")))
  assert results["_meta"]["suites"] == ["tatoeba"]
  assert results["_meta"]["data_dirs"] == [data]
  assert objects(gcs, output) == {"results.json", "report.md", "tatoeba.png"}
  assert files.read_bytes(files.join(output, "tatoeba.png")).startswith(b"\x89PNG")
  assert "tatoeba" in files.read_text(files.join(output, "report.md")).lower()


def test_export_command_writes_a_saved_model_into_the_bucket_that_encodes_from_there(
    gcs, bucket, workdir, encoder):
  output = files.join(bucket["root"], "out", "saved_model")
  done = run_command("vmsst.export", f"--model_dir={bucket['model']}", f"--output={output}",
                     cwd=workdir)
  assert done.returncode == 0, done.stderr[-3000:]
  written = objects(gcs, output)
  assert {"saved_model.pb", "params.npz", "params_index.json", "assets.extra/model.json",
          "assets.extra/spm.model", "assets.extra/vmsst_export.json"} <= written, written
  assert any(name.startswith("variables/") for name in written)
  assert files.load_npz(files.join(output, "params.npz"))
  # score --saved_model=gs://…: TensorFlow loads the graph from the bucket (in another process:
  # in this one TensorFlow's client would wait on the proxy's threads, which need the GIL).
  scores = files.join(bucket["root"], "out", "saved_model_scores.txt")
  done = run_command("vmsst.score", f"--saved_model={output}",
                     f"--input={files.join(bucket['root'], 'in', 'pairs.tsv')}",
                     f"--output={scores}", cwd=workdir)
  assert done.returncode == 0, done.stderr[-3000:]
  want = score.score_pairs(protocol.UniqueSentences(encoder, progress=False),
                           SENTENCES[:len(ENGLISH)], ENGLISH)
  np.testing.assert_allclose([float(x) for x in files.read_text(scores).split()], want,
                             atol=1e-4)


def test_sentence_transformers_export_goes_from_the_bucket_into_the_bucket(gcs, bucket, workdir):
  from vmsst.export_formats import huggingface as hf_export  # pylint: disable=import-outside-toplevel
  from vmsst.model import initial_weights  # pylint: disable=import-outside-toplevel
  output = files.join(bucket["root"], "out", "st")
  metadata = hf_export.export(bucket["model"], output)
  assert metadata["model_dir"] == bucket["model"]
  written = objects(gcs, output)
  assert {"modules.json", "config.json", "model.safetensors", "spm_char.model", "README.md",
          "vmsst_export.json", "model.json", "config.gin"} <= written, written
  assert initial_weights.is_transformers_export(output)
  local = workdir / "local_st"
  hf_export.export(bucket["local_model"], str(local))
  assert {str(p.relative_to(local)) for p in local.rglob("*") if p.is_file()} == written
