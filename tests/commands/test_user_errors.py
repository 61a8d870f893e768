"""One error style across commands: a user's mistake is one `error:` line and exit 2.

Most cases run the command in this process (the `here` fixture, `vmsst_testing.command_here`):
absl parses the typed command line (`cli.parse_flags`, as `cli.run` does) and the command's
`main` runs under `cli.user_errors`, which prints the `error:` line and exits 2, as in a process
once its imports are done. The exit status and what reaches the file descriptors are checked as
a process's would be, without its seconds of importing JAX, TensorFlow and seqio.

Subprocesses stay where only a process shows the behaviour: a check answered before the
command's imports (`-X importtime` lists them), absl's own parse errors (that `cli.run` hands
absl's parsing to `cli.parse_flags`, not absl's FATAL and exit 1), `--distributed` (it joins a
JAX job, which this process, its backend started, cannot) and, end to end, export's and
evaluate's missing directory (one check before the imports, one after).
"""

import subprocess
import sys

import pytest

import vmsst_testing
from vmsst.encoding import encoder_flags
from vmsst.export_formats import export_flags
from vmsst.base import cli


def _named(named, **paths) -> tuple[str, ...]:
  """What the error line must name (a flag with its value, a file): one or several, formatted."""
  return tuple(n.format(**paths) for n in ((named,) if isinstance(named, str) else named))


def _run(*args: str) -> subprocess.CompletedProcess:
  return subprocess.run([sys.executable, "-m", *args], cwd=vmsst_testing.ROOT,
                        capture_output=True, text=True, timeout=300, check=False)


# How a command defines its flags, where not by its `_define_flags` (or at import).
DEFINE = {"vmsst.export": export_flags.define}


@pytest.fixture
def here(monkeypatch, capfd):
  """`here(command, *args)`: `python -m COMMAND ARGS` in this process, from the repository root
  (where `_run` starts it): an `Ended` with a finished process's fields."""
  monkeypatch.chdir(vmsst_testing.ROOT)

  def run(command: str, *args: str) -> vmsst_testing.Ended:
    return vmsst_testing.command_named(command, args, capfd, DEFINE.get(command))

  return run


@pytest.mark.parametrize("args, message", [
    (("vmsst.export", "--model_dir={tmp}/nowhere", "--output={tmp}/out"),
     '--model_dir={tmp}/nowhere'),
    (("vmsst.evaluate", "--saved_model={tmp}", "--output={tmp}/eval"),
     '--saved_model={tmp}'),
])
def test_export_and_evaluate_name_the_bad_directory_without_a_traceback(tmp_path, args,
                                                                        message):
  """The whole command, end to end: export's check before its imports, evaluate's after."""
  done = _run(*(a.format(tmp=tmp_path) for a in args))
  vmsst_testing.assert_user_error(done, *_named(message, tmp=tmp_path))


def test_a_missing_saved_model_is_named():
  # A bucket path is checked the same way, on the emulator: tests/gcs/test_gcs_commands.py.
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
     '--input={tmp}'),
    (("vmsst.embed", "--encoder=usem3", "--input={tmp}/nowhere.txt", "--output={tmp}/o.npy"),
     '--input={tmp}/nowhere.txt'),
    (("vmsst.embed", "--encoder=usem3", "--input={tmp}/a.txt", "--output={tmp}"),
     '--output={tmp}'),
    (("vmsst.score", "--encoder=usem3", "--input={tmp}/pairs.tsv", "--output={tmp}/a_file/s.txt"),
     '--output={tmp}/a_file/s.txt'),
    (("vmsst.mine", "--encoder=usem3", "--src={tmp}/a.txt", "--trg={tmp}/b.txt", "--k=1",
      "--output={tmp}"),
     '--output={tmp}'),
    (("vmsst.embed", "--encoder=usem3", "--input={tmp}/a.txt", "--output={tmp}/o.txt"),
     '--output={tmp}/o.txt'),
    (("vmsst.embed", "--encoder=usem3", "--input={tmp}/nul.txt", "--output={tmp}/o.npy"),
     '{tmp}/nul.txt'),
    (("vmsst.embed", "--encoder=usem3", "--input={tmp}/a.txt", "--output={tmp}/o.npy",
      "--batch_size=0"), None),
    # /proc: unwritable even for root, whom the mode bits would let through
    (("vmsst.embed", "--encoder=usem3", "--input={tmp}/a.txt", "--output=/proc/o.npy"),
     '--output=/proc/o.npy'),
    (("vmsst.score", "--encoder=usem3", "--input={tmp}/pairs.tsv", "--output=/proc/s.txt"),
     '--output=/proc/s.txt'),
    (("vmsst.mine", "--encoder=usem3", "--src={tmp}/a.txt", "--trg={tmp}/b.txt", "--k=1",
      "--output=/proc/pairs.tsv"),
     '--output=/proc/pairs.tsv'),
    (("vmsst.mine", "--encoder=usem3", "--src={tmp}/a.txt", "--trg={tmp}/b.txt", "--k=1",
      "--trg_embeddings={tmp}/b.npy", "--output={tmp}/pairs.out"),
     '--trg_embeddings={tmp}/b.npy'),
])
def test_bad_paths_are_one_error_line_before_any_encoder_loads(here, tmp_path, args, message):
  _bad_paths(tmp_path)
  done = here(*(a.format(tmp=tmp_path) for a in args))
  if message is None:  # absl's bound: the flag is named
    vmsst_testing.assert_user_error(done, args[-1].split("=")[0])
  else:
    vmsst_testing.assert_user_error(done, *_named(message, tmp=tmp_path))
  assert not (tmp_path / "o.npy").exists() and not (tmp_path / "o.txt").exists()


# Out of the unit tier: export's module imports TensorFlow (whose import starts a process: h5py
# asks `uname -p`) and evaluate's its suites', a few seconds once per process.
@pytest.mark.integration
@pytest.mark.parametrize("args, message", [
    (("vmsst.export", "--model_dir={model}", "--output={tmp}/full"),
     '--output={tmp}/full'),
    (("vmsst.export", "--model_dir={model}", "--output={tmp}/a_file/export"),
     '--output={tmp}/a_file/export'),
    (("vmsst.export", "--model_dir={model}", "--output={tmp}/export", "--step=7"),
     '--step=7'),
    (("vmsst.export", "--model_dir={model}"),
     "give --model_dir (a python -m vmsst.train directory) and --output (a new directory for "
     "the SavedModel)."),
    (("vmsst.evaluate", "--model_dir={model}", "--output={tmp}/a_file", "--suite=tatoeba"),
     '--output={tmp}/a_file'),
    (("vmsst.evaluate", "--model_dir={model}", "--data_dir={tmp}", "--suite=stsb",
      "--output={tmp}/eval"),
     "suite stsb: no data at {tmp}/stsb. To get it: it ships with the shared corpora "
     "(shared/data/README.md); pass their root with --data_dir."),
    (("vmsst.evaluate", "--model_dir={model}", "--suite=parallel", "--src={tmp}/a.txt",
      "--trg={tmp}/pairs.tsv", "--output={tmp}/eval"),
     ('{tmp}/a.txt', '{tmp}/pairs.tsv')),
    (("vmsst.evaluate", "--model_dir={model}", "--suite=parallel", "--src={tmp}/a.txt",
      "--trg={tmp}/nowhere.txt", "--output={tmp}/eval"),
     '--trg={tmp}/nowhere.txt'),
    (("vmsst.evaluate", "--model_dir={model}"),
     '--output'),
])
def test_export_and_evaluate_check_flags_before_the_model_loads(here, tmp_path, args, message):
  """A model directory that cannot restore: the error is about the other flag, so it came first."""
  _bad_paths(tmp_path)
  model = _fake_model_dir(tmp_path)
  done = here(*(a.format(tmp=tmp_path, model=model) for a in args))
  vmsst_testing.assert_user_error(done, *_named(message, tmp=tmp_path, model=model))


@pytest.mark.parametrize("args, message", [
    (("vmsst.learning_curves", "--model_dir={tmp}/run"),
     "no TensorBoard events in {tmp}/run/tensorboard: train the run first (python -m "
     "vmsst.compare resumes it)."),
    (("vmsst.learning_curves", "--model_dir={tmp}/nowhere"),
     '--model_dir={tmp}/nowhere'),
    (("vmsst.learning_curves", "--model_dir={tmp}/run",
      "--output=/proc/curve.png"),
     '--output=/proc/curve.png'),
])
def test_the_other_commands_name_a_directory_that_is_no_run_without_a_traceback(here, tmp_path,
                                                                                args, message):
  (tmp_path / "run").mkdir()
  done = here(*(a.format(tmp=tmp_path) for a in args))
  vmsst_testing.assert_user_error(done, *_named(message, tmp=tmp_path))


@pytest.mark.integration  # build_clustering's imports take a second, once per process
@pytest.mark.parametrize("builder", ["bucc", "clustering", "question_retrieval"])
def test_the_data_builders_name_a_missing_corpus_or_a_bad_output_without_a_traceback(
    here, tmp_path, builder):
  (tmp_path / "a_file").write_text("")
  command = (f"vmsst.build_{builder}",)
  for flags, named in [
      ((f"--data_dir={tmp_path}/nowhere", f"--output={tmp_path}/out"),
       f"--data_dir={tmp_path}/nowhere"),
      ((f"--data_dir={tmp_path}", f"--output={tmp_path}/a_file"), f"--output={tmp_path}/a_file"),
      # an empty data dir: the first STS file the builder reads
      ((f"--data_dir={tmp_path}", f"--output={tmp_path}/out"), f"{tmp_path}/stsb")]:
    vmsst_testing.assert_user_error(here(*command, *flags), named)


@pytest.mark.parametrize("flags, message", [
    (("--data_dir={tmp}/nowhere",),
     '--data_dir={tmp}/nowhere'),
    (("--data_dir={tmp}",),
     "No tatoeba.* files in {tmp}/tatoeba/v1: the Tatoeba filter needs them (pass the right "
     "--data_dir)."),
    (("--data_dir={tmp}", "--sources=opus:{tmp}/nowhere"),
     '--sources=opus:{tmp}/nowhere'),
    (("--data_dir={tmp}", "--output={tmp}/a_file/spm"),
     '--output={tmp}/a_file/spm'),
])
def test_the_vocabulary_command_names_a_bad_corpus_or_output_without_a_traceback(here, tmp_path,
                                                                                 flags, message):
  (tmp_path / "a_file").write_text("")
  args = [a.format(tmp=tmp_path) for a in flags]
  if not any(a.startswith("--output") for a in args):
    args.append(f"--output={tmp_path}/spm")
  done = here("vmsst.vocabulary", *args)
  vmsst_testing.assert_user_error(done, *_named(message, tmp=tmp_path))


# mt5_import parses the run and builds its model, compare imports the trainer: seconds, once
@pytest.mark.integration
@pytest.mark.parametrize("args, message", [
    (("vmsst.mt5_import", "--hf_dir={tmp}", "--output={tmp}/mt5.safetensors"),
     "give --gin_file=gin/runs/<run>.gin: the run whose model the parameters are converted for."),
    (("vmsst.mt5_import", "--hf_dir={tmp}/nowhere", "--output={tmp}/mt5.safetensors",
      "--gin_file=gin/runs/vmsst_cpu.gin"),
     '--hf_dir={tmp}/nowhere'),
    (("vmsst.mt5_import", "--hf_dir={tmp}", "--output={tmp}/mt5.safetensors",
      "--gin_file=gin/runs/vmsst_cpu.gin"),
     ('{tmp}', 'model.safetensors')),
    (("vmsst.compare", "--preset=cpu", "--objectives=vmsst", "--output={tmp}/a_file"),
     '--output={tmp}/a_file'),
    (("vmsst.compare", "--preset=cpu", "--gin_file=gin/runs/vmsst_cpu.gin", "--output={tmp}/x"),
     ('--gin_file', '--preset=cpu')),
])
def test_mt5_import_and_compare_name_the_flag_before_any_work(here, tmp_path, args, message):
  (tmp_path / "a_file").write_text("")
  (tmp_path / "config.json").write_text("{}")  # a Hugging Face directory without weights
  done = here(*(a.format(tmp=tmp_path) for a in args))
  vmsst_testing.assert_user_error(done, *_named(message, tmp=tmp_path))


@pytest.mark.parametrize("args, named", [
    (("vmsst.embed", "--bogus=1"), ("bogus", "--help")),
    (("vmsst.score", "--model_dir=x", "--input=y"), ("--output", "--help")),
    (("vmsst.vocabulary", "--vocab_size=many"), ("--vocab_size=many", "--help")),
])
def test_a_flag_absl_cannot_parse_is_one_error_line_not_a_fatal(args, named):
  """absl's own parser says "FATAL Flags parsing error" and exits 1; cli.run says `error:`, 2.

  A process each (0.2 s): in this one `command_here` calls `cli.parse_flags` itself, so only
  the command shows that `cli.run` hands absl's `app.run` that parser rather than absl's own.
  """
  done = _run(*args)
  vmsst_testing.assert_user_error(done, *named)
  assert "FATAL" not in done.stderr


@pytest.mark.parametrize("args, message", [
    (("vmsst.vocabulary", "--data_dir={tmp}/nowhere", "--output={tmp}/spm"),
     '--data_dir={tmp}/nowhere'),
    (("vmsst.train", "--gin_file={tmp}/run.gin", "--gin_search_path={tmp}"),
     ("--gin_file={tmp}/run.gin", "--gin_search_path", str(vmsst_testing.ROOT))),
])
def test_a_bad_path_is_reported_before_tensorflow_or_jax_is_imported(tmp_path, args, message):
  """Seconds of imports before a typo's error is what a user should not wait for."""
  done = subprocess.run([sys.executable, "-X", "importtime", "-m",
                         *(a.format(tmp=tmp_path) for a in args)], cwd=vmsst_testing.ROOT,
                        capture_output=True, text=True, timeout=300, check=False)
  said = [line for line in done.stderr.splitlines() if not line.startswith("import time:")]
  assert len(said) == 1, said  # the error line only
  vmsst_testing.assert_user_error(subprocess.CompletedProcess(done.args, done.returncode, "",
                                                              said[0]),
                                  *_named(message, tmp=tmp_path))
  imported = {line.split("|")[-1].strip() for line in done.stderr.splitlines()
              if line.startswith("import time:")}
  assert "vmsst.base.cli" in imported  # -X importtime did list the imports
  assert not {"tensorflow", "jax", "seqio"} & imported


@pytest.mark.parametrize("flags, named", [
    (("--dump={tmp}/nowhere.xml.bz2", "--output={tmp}/out"),
     '--dump={tmp}/nowhere.xml.bz2'),
    (("--dump={tmp}/a.txt", "--output={tmp}/out"),
     '--dump={tmp}/a.txt'),
    (("--dump={tmp}/a.txt.bz2", "--output={tmp}/out"), "--dump={tmp}/a.txt.bz2"),
    (("--dump={tmp}/a.txt", "--output={tmp}/a_file"), "--output={tmp}/a_file"),
])
def test_wiki_entities_names_a_dump_that_is_none_or_a_bad_output(here, tmp_path, flags, named):
  _bad_paths(tmp_path)
  (tmp_path / "a.txt.bz2").write_text("not bz2")
  done = here("vmsst_tasks.wiki_entities", *(a.format(tmp=tmp_path) for a in flags))
  vmsst_testing.assert_user_error(done, named.format(tmp=tmp_path))
  assert not (tmp_path / "out").exists()


@pytest.mark.integration  # vocabulary trains SentencePiece on Multi30k until it refuses (~1 s)
@pytest.mark.parametrize("args, named", [
    (("vmsst.vocabulary", "--vocab_size=300", "--sources=multi30k", "--output={tmp}/new/spm"),
     ["--vocab_size=300 is below the", "--character_coverage"]),
    (("vmsst.compile", "--topology=cpu", "--gin_file=gin/runs/vmsst_cpu.gin", "--mesh=data2"),
     ["--mesh=data2", "--mesh=data:16,model:4"]),
    (("vmsst.compile", "--topology=cpu", "--gin_file=gin/runs/vmsst_cpu.gin", "--variants=nonee"),
     ["--variants", "did you mean none?"]),
])
def test_vocabulary_and_compile_name_the_flag_to_change(here, tmp_path, args, named):
  done = here(*(a.format(tmp=tmp_path) for a in args))
  assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr[-2000:]
  for text in named:
    assert text in done.stderr.splitlines()[-1], done.stderr[-2000:]
  assert not (tmp_path / "new").exists()  # no empty directory left behind


@pytest.mark.slow  # the command imports JAX and gin before main
def test_distributed_off_a_pod_is_one_line_naming_the_three_flags(tmp_path):
  """A process: --distributed asks JAX to join a job (jax.distributed.initialize, and gloo set
  as the CPU collectives), which this process, whose backend is running, must not do."""
  done = _run("vmsst.train", "--gin_file=gin/runs/vmsst_cpu.gin", "--distributed",
              f"--gin.MODEL_DIR='{tmp_path}/run'")
  assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr[-2000:]
  last = done.stderr.splitlines()[-1]
  assert "--distributed found no multi-host job" in last and "--coordinator_address" in last
  assert not (tmp_path / "run").exists()
