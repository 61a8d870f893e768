"""One error style across commands: a user's mistake is one `error:` line and exit 2.

Subprocesses, since the exit status and what reaches stderr are the behaviour.
"""

import subprocess
import sys

import pytest

import vmsst_testing
from vmsst import encoder_flags
from vmsst import cli


def _run(*args: str) -> subprocess.CompletedProcess:
  return subprocess.run([sys.executable, "-m", *args], cwd=vmsst_testing.ROOT,
                        capture_output=True, text=True, timeout=300, check=False)


@pytest.mark.parametrize("args, message", [
    (("vmsst.export", "--model_dir={tmp}/nowhere", "--output={tmp}/out"),
     "error: --model_dir={tmp}/nowhere is not a directory; give a MODEL_DIR written by "
     "`python -m vmsst.train` (an older one with config.gin only: "
     "`python -m vmsst.model_json --model_dir=DIR` writes its model.json)."),
    (("vmsst.evaluate", "--saved_model={tmp}", "--output={tmp}/eval"),
     "error: --saved_model={tmp} has no saved_model.pb; give an --output written by "
     "`python -m vmsst.export`."),
])
def test_export_and_evaluate_name_the_bad_directory_without_a_traceback(tmp_path, args,
                                                                        message):
  done = _run(*(a.format(tmp=tmp_path) for a in args))
  assert done.returncode == 2, done.stderr[-2000:]
  assert "Traceback" not in done.stderr
  assert done.stderr.splitlines()[-1] == message.format(tmp=tmp_path)


def test_a_remote_model_dir_is_left_to_the_loader():
  encoder_flags.check_paths(model_dir="gs://bucket/run", saved_model="gs://bucket/export")
  with pytest.raises(cli.UserError, match="--saved_model=/nonexistent is not a directory"):
    encoder_flags.check_paths(saved_model="/nonexistent")


def _fake_model_dir(root) -> str:
  """Passes the --model_dir check (model.json, checkpoints/1) but fails any restore.

  So an error about another flag shows that flag was checked before the model loaded.
  """
  (root / "model" / "checkpoints" / "1").mkdir(parents=True)
  (root / "model" / "model.json").write_text("{}")
  return str(root / "model")


def _bad_paths(tmp) -> None:
  (tmp / "a.txt").write_text("Hello.\nA cat.\n")
  (tmp / "b.txt").write_text("Hallo.\nEine Katze.\n")
  (tmp / "pairs.tsv").write_text("Hello.\tHallo.\n")
  (tmp / "a_file").write_text("")
  (tmp / "full").mkdir()
  (tmp / "full" / "x").write_text("")
  (tmp / "nul.txt").write_bytes(b"\0" * 16)


LINES = "give a UTF-8 text file, one sentence per line."


@pytest.mark.parametrize("args, message", [
    (("vmsst.embed", "--encoder=usem3", "--input={tmp}", "--output={tmp}/o.npy"),
     f"--input={{tmp}} is a directory; {LINES}"),
    (("vmsst.embed", "--encoder=usem3", "--input={tmp}/nowhere.txt", "--output={tmp}/o.npy"),
     f"--input={{tmp}}/nowhere.txt does not exist; {LINES}"),
    (("vmsst.embed", "--encoder=usem3", "--input={tmp}/a.txt", "--output={tmp}"),
     "--output={tmp} is a directory; give a file name in it, e.g. {tmp}/out."),
    (("vmsst.score", "--encoder=usem3", "--input={tmp}/pairs.tsv", "--output={tmp}/a_file/s.txt"),
     "--output={tmp}/a_file/s.txt: {tmp}/a_file is a file, so no file can be made under it; "
     "give a path in a directory."),
    (("vmsst.mine", "--encoder=usem3", "--src={tmp}/a.txt", "--trg={tmp}/b.txt", "--k=1",
      "--output={tmp}"),
     "--output={tmp} is a directory; give a file name in it, e.g. {tmp}/out."),
    (("vmsst.embed", "--encoder=usem3", "--input={tmp}/a.txt", "--output={tmp}/o.txt"),
     "--output={tmp}/o.txt: embed writes a NumPy .npy (float32 [lines, d]); give a name ending "
     "in .npy, e.g. {tmp}/o.txt.npy."),
    (("vmsst.embed", "--encoder=usem3", "--input={tmp}/nul.txt", "--output={tmp}/o.npy"),
     "{tmp}/nul.txt:1: a NUL byte; this is a binary file, not text: give a UTF-8 text file, one "
     "sentence per line."),
    (("vmsst.embed", "--encoder=usem3", "--input={tmp}/a.txt", "--output={tmp}/o.npy",
      "--batch_size=0"), None),
    # /proc: unwritable even for root, whom the mode bits would let through
    (("vmsst.embed", "--encoder=usem3", "--input={tmp}/a.txt", "--output=/proc/o.npy"),
     "--output=/proc/o.npy: /proc is not writable; give a path you can write."),
    (("vmsst.score", "--encoder=usem3", "--input={tmp}/pairs.tsv", "--output=/proc/s.txt"),
     "--output=/proc/s.txt: /proc is not writable; give a path you can write."),
    (("vmsst.mine", "--encoder=usem3", "--src={tmp}/a.txt", "--trg={tmp}/b.txt", "--k=1",
      "--output=/proc/pairs.tsv"),
     "--output=/proc/pairs.tsv: /proc is not writable; give a path you can write."),
    (("vmsst.mine", "--encoder=usem3", "--src={tmp}/a.txt", "--trg={tmp}/b.txt", "--k=1",
      "--trg_embeddings={tmp}/b.npy", "--output={tmp}/pairs.out"),
     "--trg_embeddings={tmp}/b.npy does not exist; give the float [lines, d] .npy of --trg "
     "(python -m vmsst.embed)."),
])
def test_bad_paths_are_one_error_line_before_any_encoder_loads(tmp_path, args, message):
  _bad_paths(tmp_path)
  done = _run(*(a.format(tmp=tmp_path) for a in args))
  if message is None:  # absl's bound: the flag is named
    flag = args[-1].split("=")[0]
    assert done.returncode == 2 and done.stderr.splitlines()[-1].startswith(f"error: flag {flag}")
  else:
    assert (done.returncode, done.stderr.splitlines()[-1:]) == (
        2, ["error: " + message.format(tmp=tmp_path)]), done.stderr[-2000:]
  assert "Traceback" not in done.stderr
  assert not (tmp_path / "o.npy").exists() and not (tmp_path / "o.txt").exists()


@pytest.mark.parametrize("args, message", [  # each under 4 s: export fails before its imports
    (("vmsst.export", "--model_dir={model}", "--output={tmp}/full"),
     "--output={tmp}/full exists and is not empty; pick a new directory or delete it first."),
    (("vmsst.export", "--model_dir={model}", "--output={tmp}/a_file/export"),
     "--output={tmp}/a_file/export: {tmp}/a_file is a file, so no directory can be made under "
     "it; give a path in a directory."),
    (("vmsst.export", "--model_dir={model}", "--output={tmp}/export", "--step=7"),
     "--step=7: {model}/checkpoints holds steps 1; pick one, or drop --step for the latest."),
    (("vmsst.export", "--model_dir={model}"),
     "give --model_dir (a python -m vmsst.train directory) and --output (a new directory for "
     "the SavedModel)."),
    (("vmsst.evaluate", "--model_dir={model}", "--output={tmp}/a_file", "--suite=tatoeba"),
     "--output={tmp}/a_file is a file; give a directory (a new one is created)."),
    (("vmsst.evaluate", "--model_dir={model}", "--data_dir={tmp}", "--suite=stsb",
      "--output={tmp}/eval"),
     "suite stsb: no data at {tmp}/stsb. To get it: it ships with the shared corpora "
     "(shared/data/README.md); pass their root with --data_dir."),
    (("vmsst.evaluate", "--model_dir={model}", "--suite=parallel", "--src={tmp}/a.txt",
      "--trg={tmp}/pairs.tsv", "--output={tmp}/eval"),
     "{tmp}/a.txt has 2 lines but {tmp}/pairs.tsv has 1; line i of one must translate line i "
     "of the other (one sentence per line, no extra blank line)."),
    (("vmsst.evaluate", "--model_dir={model}", "--suite=parallel", "--src={tmp}/a.txt",
      "--trg={tmp}/nowhere.txt", "--output={tmp}/eval"),
     f"--trg={{tmp}}/nowhere.txt does not exist; {LINES}"),
    (("vmsst.evaluate", "--model_dir={model}"),
     "--output is required: the directory for results.json, report.md and the plots (created "
     "if missing)."),
])
def test_export_and_evaluate_check_flags_before_the_model_loads(tmp_path, args, message):
  """A model directory that cannot restore: the error is about the other flag, so it came first."""
  _bad_paths(tmp_path)
  model = _fake_model_dir(tmp_path)
  done = _run(*(a.format(tmp=tmp_path, model=model) for a in args))
  assert (done.returncode, done.stderr.splitlines()[-1:]) == (
      2, ["error: " + message.format(tmp=tmp_path, model=model)]), done.stderr[-2000:]
  assert "Traceback" not in done.stderr


@pytest.mark.parametrize("args, message", [
    (("vmsst.learning_curves", "--model_dir={tmp}/run"),
     "no TensorBoard events in {tmp}/run/tensorboard: train the run first (python -m "
     "vmsst.compare resumes it)."),
    (("vmsst.learning_curves", "--model_dir={tmp}/nowhere"),
     "--model_dir={tmp}/nowhere is not a directory; give a MODEL_DIR written by `python -m "
     "vmsst.train`."),
    (("vmsst.learning_curves", "--model_dir={tmp}/run",
      "--output=/proc/curve.png"),
     "--output=/proc/curve.png: /proc is not writable; give a path you can write."),
    (("vmsst.model_json", "--model_dir={tmp}/run"),
     "{tmp}/run/config.gin not found: --model_dir must be a directory written by "
     "`python -m vmsst.train`."),
])
def test_the_other_commands_name_a_directory_that_is_no_run_without_a_traceback(tmp_path, args,
                                                                                message):
  (tmp_path / "run").mkdir()
  done = _run(*(a.format(tmp=tmp_path) for a in args))
  assert (done.returncode, done.stderr.splitlines()[-1:]) == (
      2, ["error: " + message.format(tmp=tmp_path)]), done.stderr[-2000:]
  assert "Traceback" not in done.stderr


@pytest.mark.parametrize("builder", ["bucc", "clustering", "question_retrieval"])
def test_the_data_builders_name_a_missing_corpus_or_a_bad_output_without_a_traceback(
    tmp_path, builder):
  (tmp_path / "a_file").write_text("")
  command = (f"vmsst.build_data.{builder}",)
  for flags, message in [
      ((f"--data_dir={tmp_path}/nowhere", f"--output={tmp_path}/out"),
       f"--data_dir={tmp_path}/nowhere is not a directory; give the root of the shared corpora "
       "(../shared/data from the repository, see its README.md)."),
      ((f"--data_dir={tmp_path}", f"--output={tmp_path}/a_file"),
       f"--output={tmp_path}/a_file is a file; give a directory (a new one is created)."),
      ((f"--data_dir={tmp_path}", f"--output={tmp_path}/out"), None)]:
    done = _run(*command, *flags)
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr[-2000:]
    last = done.stderr.splitlines()[-1]
    if message:
      assert last == "error: " + message
    else:  # an empty data dir: the first STS file the builder reads, named with the fix
      assert last.startswith(f"error: {tmp_path}/stsb") and "not found; the STS files are in" in last


@pytest.mark.slow  # 8 s each: the command imports seqio (TensorFlow) before main
@pytest.mark.parametrize("flags, message", [
    (("--data_dir={tmp}/nowhere",),
     "--data_dir={tmp}/nowhere is not a directory; give the root of the shared corpora "
     "(../shared/data from the repository, see its README.md)."),
    (("--data_dir={tmp}",),
     "No tatoeba.* files in {tmp}/tatoeba/v1: the Tatoeba filter needs them (pass the right "
     "--data_dir)."),
    (("--data_dir={tmp}", "--sources=opus:{tmp}/nowhere"),
     "--sources=opus:{tmp}/nowhere: {tmp}/nowhere is not a directory; give opus:<dir> of OPUS "
     "Moses/TSV files (python -m vmsst_tasks.opus_download --output=<dir> fetches them)."),
    (("--data_dir={tmp}", "--output={tmp}/a_file/spm"),
     "--output={tmp}/a_file/spm: {tmp}/a_file is a file, so no file can be made under it; give a "
     "path in a directory."),
])
def test_the_vocabulary_command_names_a_bad_corpus_or_output_without_a_traceback(tmp_path, flags,
                                                                                 message):
  (tmp_path / "a_file").write_text("")
  args = [a.format(tmp=tmp_path) for a in flags]
  if not any(a.startswith("--output") for a in args):
    args.append(f"--output={tmp_path}/spm")
  done = _run("vmsst.vocabulary", *args)
  assert (done.returncode, done.stderr.splitlines()[-1:]) == (
      2, ["error: " + message.format(tmp=tmp_path)]), done.stderr[-2000:]
  assert "Traceback" not in done.stderr


@pytest.mark.slow  # 6-10 s each: both commands import gin, JAX and the trainer before main
@pytest.mark.parametrize("args, message", [
    (("vmsst.mt5_import", "--hf_dir={tmp}", "--output={tmp}/mt5.safetensors"),
     "give --gin_file=gin/runs/<run>.gin: the run whose model the parameters are converted for."),
    (("vmsst.mt5_import", "--hf_dir={tmp}/nowhere", "--output={tmp}/mt5.safetensors",
      "--gin_file=gin/runs/vmsst_cpu.gin"),
     "--hf_dir={tmp}/nowhere has no config.json; give a Hugging Face T5/mT5 directory "
     "(save_pretrained(..., safe_serialization=True) writes one)."),
    (("vmsst.mt5_import", "--hf_dir={tmp}", "--output={tmp}/mt5.safetensors",
      "--gin_file=gin/runs/vmsst_cpu.gin"),
     "{tmp} has no model.safetensors(.index.json); save the model with save_pretrained(..., "
     "safe_serialization=True) or convert its .bin first."),
    (("vmsst.compare", "--preset=cpu", "--objectives=vmsst", "--output={tmp}/a_file"),
     "--output={tmp}/a_file is a file; give a directory (a new one is created)."),
    (("vmsst.compare", "--preset=cpu", "--gin_file=gin/runs/vmsst_cpu.gin", "--output={tmp}/x"),
     "--gin_file and --preset=cpu exclude each other: the preset trains each objective from its "
     "own run file."),
])
def test_mt5_import_and_compare_name_the_flag_before_any_work(tmp_path, args, message):
  (tmp_path / "a_file").write_text("")
  (tmp_path / "config.json").write_text("{}")  # a Hugging Face directory without weights
  done = _run(*(a.format(tmp=tmp_path) for a in args))
  assert (done.returncode, done.stderr.splitlines()[-1:]) == (
      2, ["error: " + message.format(tmp=tmp_path)]), done.stderr[-2000:]
  assert "Traceback" not in done.stderr


@pytest.mark.parametrize("args, message", [
    (("vmsst.embed", "--bogus=1"), "error: Unknown command line flag 'bogus'; see --help."),
    (("vmsst.score", "--model_dir=x", "--input=y"),
     "error: flag --output=None: Flag --output must have a value other than None; see --help."),
    (("vmsst.vocabulary", "--vocab_size=many"),
     "error: flag --vocab_size=many: invalid literal for int() with base 10: 'many'; see --help."),
])
def test_a_flag_absl_cannot_parse_is_one_error_line_not_a_fatal(args, message):
  """absl's own parser says "FATAL Flags parsing error" and exits 1; cli.run says `error:`, 2."""
  done = _run(*args)
  assert (done.returncode, done.stderr.splitlines()[-1:]) == (2, [message]), done.stderr[-2000:]
  assert "FATAL" not in done.stderr and "Traceback" not in done.stderr


@pytest.mark.parametrize("args, message", [
    (("vmsst.vocabulary", "--data_dir={tmp}/nowhere", "--output={tmp}/spm"),
     "--data_dir={tmp}/nowhere is not a directory; give the root of the shared corpora "
     "(../shared/data from the repository, see its README.md)."),
    (("vmsst.train", "--gin_file={tmp}/run.gin", "--gin_search_path={tmp}"),
     "--gin_file={tmp}/run.gin not found; searched the working directory and ['{tmp}', '"
     + str(vmsst_testing.ROOT) + "']; give a run file (gin/runs/*.gin) or pass "
     "--gin_search_path=<the directory holding gin/>."),
])
def test_a_bad_path_is_reported_before_tensorflow_or_jax_is_imported(tmp_path, args, message):
  """Seconds of imports before a typo's error is what a user should not wait for."""
  done = subprocess.run([sys.executable, "-X", "importtime", "-m",
                         *(a.format(tmp=tmp_path) for a in args)], cwd=vmsst_testing.ROOT,
                        capture_output=True, text=True, timeout=300, check=False)
  said = [line for line in done.stderr.splitlines() if not line.startswith("import time:")]
  assert (done.returncode, said) == (2, ["error: " + message.format(tmp=tmp_path)]), said
  imported = {line.split("|")[-1].strip() for line in done.stderr.splitlines()
              if line.startswith("import time:")}
  assert "vmsst.cli" in imported  # -X importtime did list the imports
  assert not {"tensorflow", "jax", "seqio"} & imported


@pytest.mark.parametrize("flags, named", [
    (("--dump={tmp}/nowhere.xml.bz2", "--output={tmp}/out"),
     "--dump={tmp}/nowhere.xml.bz2 does not exist"),
    (("--dump={tmp}/a.txt", "--output={tmp}/out"),
     "--dump={tmp}/a.txt does not read as a MediaWiki"),
    (("--dump={tmp}/a.txt.bz2", "--output={tmp}/out"), "--dump={tmp}/a.txt.bz2 does not read as"),
    (("--dump={tmp}/a.txt", "--output={tmp}/a_file"), "--output={tmp}/a_file is a file"),
])
def test_wiki_entities_names_a_dump_that_is_none_or_a_bad_output(tmp_path, flags, named):
  _bad_paths(tmp_path)
  (tmp_path / "a.txt.bz2").write_text("not bz2")
  done = _run("vmsst_tasks.wiki_entities", *(a.format(tmp=tmp_path) for a in flags))
  assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr[-2000:]
  assert done.stderr.splitlines()[-1].startswith("error: " + named.format(tmp=tmp_path))
  assert not (tmp_path / "out").exists()


@pytest.mark.slow  # 8-15 s each: the commands import seqio, JAX and gin before main
@pytest.mark.parametrize("args, named", [
    (("vmsst.vocabulary", "--vocab_size=300", "--sources=multi30k", "--output={tmp}/new/spm"),
     ["--vocab_size=300 is below the", "--character_coverage"]),
    (("vmsst.memory_report", "--gin_file=gin/runs/vmsst_cpu.gin", "--mesh=data2"),
     ["--mesh=data2", "--mesh=data:16,model:4"]),
    (("vmsst.memory_report", "--gin_file=gin/runs/vmsst_cpu.gin", "--variants=nonee"),
     ["--variants", "did you mean none?"]),
])
def test_vocabulary_and_memory_report_name_the_flag_to_change(tmp_path, args, named):
  done = _run(*(a.format(tmp=tmp_path) for a in args))
  assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr[-2000:]
  for text in named:
    assert text in done.stderr.splitlines()[-1], done.stderr[-2000:]
  assert not (tmp_path / "new").exists()  # no empty directory left behind
