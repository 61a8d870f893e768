"""Training on one's own OPUS-layout directory, as the README's "Train on your own data" says.

Any corpus names register (the paper's mixture only when a run trains on it);
bad input (an unknown language code, misaligned Moses sides, a directory
without OPUS files, a side that is not text) is one `error:` line from
`vocabulary` and `train` alike, before any long work (their `main`s typed in
this process: `vmsst_testing.command_here`). The last test runs the README
section's own commands, as written, on such a directory, as processes.
"""

import functools
import json
import pathlib
import re
import shlex
import subprocess
import sys

import pytest

import vmsst_testing
from vmsst_tasks import registry
from vmsst_tasks.registry import opus
from vmsst.base import cli
from vmsst.base.gin_utils import gin
from vmsst.base import languages
from vmsst.base import text_files
from vmsst_tasks.sources import vocabulary_training
import vmsst.training.loop  # pylint: disable=unused-import  # registers `train`: what a run trains on

RUN = "--gin_file=gin/runs/vmsst_cpu.gin"
SECTION = "Train on your own data"


def write_own_corpus(root: pathlib.Path, data_dir: pathlib.Path, lines: int) -> pathlib.Path:
  """NTREX translations under corpus names of one's own: a Moses de-en pair and a fr-en TSV."""
  ntrex = data_dir / "ntrex128"
  english = text_files.read_lines(ntrex / "newstest2019-src.eng.txt.gz")[:lines]
  german = text_files.read_lines(ntrex / "newstest2019-ref.deu.txt.gz")[:lines]
  french = text_files.read_lines(ntrex / "newstest2019-ref.fra.txt.gz")[:lines]
  root.mkdir(parents=True)
  (root / "NTREX.de-en.de").write_text("\n".join(german) + "\n", encoding="utf-8")
  (root / "NTREX.de-en.en").write_text("\n".join(english) + "\n", encoding="utf-8")
  (root / "MyNews.fr-en.tsv").write_text(
      "".join(f"{f.replace(chr(9), ' ')}\t{e.replace(chr(9), ' ')}\n"
              for f, e in zip(french, english)), encoding="utf-8")
  return root


@pytest.fixture
def own_dir(tmp_path, data_dir) -> pathlib.Path:
  return write_own_corpus(tmp_path / "mine", data_dir, lines=40)


@pytest.fixture
def run_trains_on():
  """Binds what a run trains on (`train.mixture_name`), as a run file does; cleared after."""
  def bind(mixture: str) -> None:
    gin.clear_config()
    gin.parse_config(["MIXTURE = %r" % mixture, "train.mixture_name = %MIXTURE"])
  yield bind
  gin.clear_config()


def _register(opus_dir, data_dir, vocab_path, **kwargs) -> list[str]:
  family = functools.partial(opus.opus_tasks, opus_dir=str(opus_dir), **kwargs)
  return registry.register_families([family], data_dir=str(data_dir), vocabulary_path=vocab_path)


# ------------------------------------------------------- registration (unit)

def test_any_corpus_names_register_without_the_paper_mixture(own_dir, data_dir, tiny_vocab_path,
                                                             run_trains_on):
  run_trains_on("vmsst_opus")
  names = _register(own_dir, data_dir, tiny_vocab_path)
  assert names == ["vmsst_opus.deu.eng", "vmsst_opus.fra.eng", "vmsst_opus"]


def test_the_paper_mixture_is_registered_when_the_run_trains_on_it(tmp_path, data_dir,
                                                                   tiny_vocab_path, run_trains_on):
  paper = tmp_path / "paper"
  paper.mkdir()
  (paper / "Europarl.de-en.de").write_text("Haus\nKatze\n")
  (paper / "Europarl.de-en.en").write_text("house\ncat\n")
  run_trains_on("vmsst_opus_paper")  # through a macro, as run files bind it
  assert _register(paper, data_dir, tiny_vocab_path)[-1] == "vmsst_opus_paper"
  run_trains_on("vmsst_opus")
  assert "vmsst_opus_paper" not in _register(paper, data_dir, tiny_vocab_path)


def test_the_paper_mixture_asked_of_a_directory_without_paper_corpora_is_one_error(
    own_dir, data_dir, tiny_vocab_path, run_trains_on):
  run_trains_on("vmsst_opus_paper")
  with pytest.raises(cli.UserError) as error:
    _register(own_dir, data_dir, tiny_vocab_path)
  assert str(own_dir) in str(error.value) and "train.mixture_name = 'vmsst_opus'" in str(
      error.value)


# ------------------------------------------------- vocabulary's input (unit)

def _sentences(data_dir, opus_dir) -> list[str]:
  return list(vocabulary_training.training_sentences(str(data_dir), [f"opus:{opus_dir}"]))


def test_vocabulary_refuses_a_directory_without_opus_files(tmp_path, data_dir):
  (tmp_path / "empty").mkdir()
  with pytest.raises(cli.UserError, match=re.escape(f"No OPUS files under {tmp_path / 'empty'}")):
    _sentences(data_dir, tmp_path / "empty")


def test_vocabulary_refuses_a_side_that_is_not_text(own_dir, data_dir):
  lines = len((own_dir / "NTREX.de-en.de").read_bytes().splitlines())
  (own_dir / "NTREX.de-en.de").write_bytes(b"\xff\xfe\x00binary\x81\n" * lines)  # same count
  with pytest.raises(cli.UserError) as error:
    _sentences(data_dir, own_dir)
  message = str(error.value)
  assert str(own_dir / "NTREX.de-en.de") in message and "invalid_utf8" in message, message
  assert "iconv" in message  # the fix


# ------------------------------------------------- the commands, in this process

@pytest.fixture
def command_here(monkeypatch, capfd):
  """`command_here(module, *args)`: `python -m MODULE ARGS` past its imports, in this process
  (`vmsst_testing.command_here`: absl's parsing, `main` under `cli.user_errors`), from the
  repository root: an `Ended`, with a finished process's fields."""
  monkeypatch.chdir(vmsst_testing.ROOT)

  def run(name: str, *args: str) -> vmsst_testing.Ended:
    return vmsst_testing.command_named(name, args, capfd)

  return run


def _train_args(opus_dir, vocab_path, model_dir, data_dir) -> list[str]:
  """The README's train command on `opus_dir`, at the tiny vocabulary's size."""
  return [RUN, "--gin.register_families.families=[@pair_tasks, @opus_tasks]",
          f"--gin.opus_tasks.opus_dir='{opus_dir}'",
          "--gin.train.mixture_name='vmsst_opus'", f"--gin.VOCAB_PATH='{vocab_path}'",
          "--gin.VOCAB_SIZE=2000",
          f"--gin.MODEL_DIR='{model_dir}'", f"--gin.DATA_DIR='{data_dir}'"]


def _misalign(opus_dir: pathlib.Path) -> list[str]:
  path = opus_dir / "NTREX.de-en.en"
  path.write_text("".join(path.read_text().splitlines(keepends=True)[:-1]))
  return [str(opus_dir / "NTREX.de-en.de"), "40 lines", str(path), "has 39"]


def _unknown_code(opus_dir: pathlib.Path) -> list[str]:
  for side in ("de", "en"):
    code = "xq" if side == "de" else side
    (opus_dir / f"NTREX.de-en.{side}").rename(opus_dir / f"NTREX.xq-en.{code}")
  return ["NTREX.xq-en", "'xq'"]


@pytest.mark.parametrize("spoil", [_misalign, _unknown_code], ids=["misaligned", "unknown_code"])
def test_train_refuses_bad_opus_files_in_one_line_before_the_model(
    command_here, caplog, own_dir, data_dir, tiny_vocab_path, tmp_path, spoil):
  named = spoil(own_dir)
  # --verbosity=0: the INFO lines the command logs (absl's app.run sets it when not given),
  # "mesh ..." among them once the mesh is made; they reach this process's log records.
  done = command_here("vmsst.train", *_train_args(own_dir, tiny_vocab_path, tmp_path / "run",
                                                  data_dir), "--verbosity=0")
  vmsst_testing.assert_user_error(done, *named)
  assert "mesh" not in done.stderr + caplog.text and not (tmp_path / "run").exists()  # no state


@pytest.mark.parametrize("case", ["empty", "binary_side"])
def test_vocabulary_command_refuses_bad_input_in_one_line(command_here, own_dir, data_dir,
                                                          tmp_path, case):
  if case == "empty":
    source, named = tmp_path / "nothing", [str(tmp_path / "nothing")]
    source.mkdir()
  else:
    source, named = own_dir, [str(own_dir / "NTREX.de-en.de")]
    (own_dir / "NTREX.de-en.de").write_bytes(b"\x00\xff\xfe\x81\n" * 40)
  done = command_here("vmsst.vocabulary", f"--sources=opus:{source}", f"--data_dir={data_dir}",
                  f"--output={tmp_path / 'vocab/spm'}", "--vocab_size=1000")
  vmsst_testing.assert_user_error(done, *named)
  assert not (tmp_path / "vocab").exists()


# ------------------------------------------------------------ the README (doc test)

def readme_section(title: str) -> str:
  """The README's `## <title>` section, up to the next `## ` heading."""
  text = (vmsst_testing.ROOT / "README.md").read_text(encoding="utf-8")
  return text.split(f"\n## {title}\n", 1)[1].split("\n## ", 1)[0]


def readme_commands(title: str) -> list[list[str]]:
  """Each command of the section's ```bash blocks as argv (continuation lines joined)."""
  blocks = re.findall(r"```bash\n(.*?)```", readme_section(title), re.S)
  joined = "\n".join(blocks).replace("\\\n", " ")
  return [shlex.split(line) for line in joined.splitlines() if line.strip()]


def test_the_readme_names_the_number_of_language_codes():
  assert f"one of the {len(languages.LANGUAGES)} codes" in readme_section(SECTION)


@pytest.mark.slow  # a vocabulary and a 2-step training run (~1-3 min on 2 cores)
def test_the_readme_own_data_commands_run_as_written(data_dir, tmp_path):
  mine = write_own_corpus(tmp_path / "mine", data_dir, lines=1997)  # enough for 8000 pieces
  vocabulary_command, train_command = readme_commands(SECTION)

  def as_here(argv: list[str]) -> list[str]:
    """The README's paths, here: /data/mine and runs/ under tmp_path; the venv's python."""
    assert argv[0] == ".venv/bin/python", argv
    return [sys.executable] + [re.sub(r"(?<=[='\"])runs/", f"{tmp_path}/runs/",
                                      a.replace("/data/mine", str(mine))) for a in argv[1:]]

  vocab = subprocess.run(as_here(vocabulary_command) + [f"--data_dir={data_dir}"],
                         cwd=vmsst_testing.ROOT, capture_output=True, text=True, timeout=600,
                         check=False)
  assert vocab.returncode == 0, vocab.stderr[-3000:]
  # A user's overrides for a first try, appended to the command as written: two small steps.
  small = ["--gin.TRAIN_STEPS=2", "--gin.BATCH_SIZE=8", "--gin.NetworkConfig.emb_dim=64",
           "--gin.NetworkConfig.mlp_dim=128", "--gin.NetworkConfig.head_dim=16",
           "--gin.retrieval_sets.max_pairs=20", f"--gin.DATA_DIR='{data_dir}'"]
  train = subprocess.run(as_here(train_command) + small, cwd=vmsst_testing.ROOT,
                         capture_output=True, text=True, timeout=900, check=False)
  assert train.returncode == 0, train.stderr[-3000:]
  counts = json.loads((tmp_path / "runs/mine/data_counts.json").read_text())
  assert counts["mixture"] == "vmsst_opus"
  assert sorted(counts["tasks"]) == ["vmsst_opus.deu.eng", "vmsst_opus.fra.eng"]
  assert "vmsst_opus_paper" not in train.stderr and "OPUS paper data" not in train.stderr
  assert (tmp_path / "runs/mine/checkpoints/2").is_dir()
