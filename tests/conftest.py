"""Session fixtures shared by the data and model tests: the real data and a tiny vocabulary."""

import gzip
import os
import pathlib

# Before anything imports jax: eight CPU devices, so sharding tests can build a
# (data 4 x model 2) mesh on a laptop (`make test` sets the same).
os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=8")
# With the TPU compiler installed (the `tpu` extra), JAX would probe for TPU chips
# at start-up and print libtpu's errors: the tests run on the CPU, and compile for
# TPU slices through compile-only devices (vmsst/tpu_slices.py) without the probe.
os.environ.setdefault("JAX_PLATFORMS", "cpu")
from vmsst import tpu_slices  # pylint: disable=g-import-not-at-top,wrong-import-position

tpu_slices.quiet_libtpu()

import pytest  # pylint: disable=g-import-not-at-top,wrong-import-position
from vmsst import text_files

REPO_ROOT = pathlib.Path(__file__).resolve().parents[1]
# The shared corpora live next to the repository, never inside it.
DATA_DIR = REPO_ROOT.parent / "shared" / "data"


def pytest_configure(config):
  """Registers the `slow` tier: `make test-fast` runs `-m "not slow"` for the edit loop.

  Slow means a training run, a subprocess that trains or resumes, several
  processes, a benchmark, or anything else over about 7 s on 2 cores; `make
  test` (what CI runs) still runs every test.
  """
  config.addinivalue_line(
      "markers", "slow: training runs, subprocess resume/preemption, multi-process, bench, "
      "anything over ~7 s (deselect with -m 'not slow'; `make test-fast`)")
  config.addinivalue_line(
      "markers", "tpu: compiles with the TPU compiler (libtpu, the `tpu` extra) for a TPU "
      "slice's compile-only devices; skipped with the install command where libtpu is absent")
  config.addinivalue_line(
      "markers", "tpu_all_runs: a paper run's compile beyond the representative three that "
      "`make test` (CI) compiles; `make test-tpu` runs them all")


# Fixtures that train, export or checkpoint a model (20-30 s each, once per
# xdist worker): every test that needs one is in the slow tier, so the edit
# loop pays for none of them (`make test` still runs them all).
SLOW_FIXTURES = frozenset({"tiny_model", "model_and_export", "two_states",
                           "separate_towers_run"})


def pytest_collection_modifyitems(items):
  """Marks `slow` every test whose fixtures include one of SLOW_FIXTURES."""
  for item in items:
    if SLOW_FIXTURES & set(getattr(item, "fixturenames", ())):
      item.add_marker(pytest.mark.slow)


@pytest.fixture(scope="session")
def data_dir() -> pathlib.Path:
  """../shared/data from the repo root; skips the test when it is absent."""
  if not (DATA_DIR / "ntrex128").is_dir() or not (DATA_DIR / "multi30k").is_dir():
    pytest.skip(f"shared data not found at {DATA_DIR} (expected ../shared/data next to the repo)")
  return DATA_DIR


@pytest.fixture(scope="session")
def tiny_vocab_path(data_dir, tmp_path_factory) -> str:
  """A ~2000-piece SentencePiece model with every language symbol (about 2 s to train).

  Trained once per session from 16 lines of every NTREX language and 500 lines
  of each Multi30k language (4,000 real sentences); character_coverage is
  lowered because 2000 pieces cannot hold every character of 125 languages
  (byte fallback spells the rest).
  """
  from vmsst_tasks import sources  # pylint: disable=g-import-not-at-top
  from vmsst import vocabulary  # pylint: disable=g-import-not-at-top
  sentences = []
  for path in sources.ntrex_files(data_dir).values():
    sentences += text_files.read_lines(path)[:16]
  for short in sources.MULTI30K_LANGUAGES:
    sentences += text_files.read_lines(data_dir / "multi30k" / f"train.{short}.gz")[:500]
  prefix = tmp_path_factory.mktemp("tiny_vocab") / "spm"
  return vocabulary.train_vocabulary(sentences, str(prefix), 2000, character_coverage=0.995)


@pytest.fixture(scope="session")
def tiny_model(data_dir, tiny_vocab_path, tmp_path_factory):
  """(model_dir, final params): a 4-step tiny VMSST run on real data, trained once.

  Shared by the tests of everything that reads a trained directory (restore,
  export, the encoder API), so the suite trains it once.
  """
  import gin  # pylint: disable=g-import-not-at-top
  import jax  # pylint: disable=g-import-not-at-top
  import vmsst.train  # pylint: disable=g-import-not-at-top
  import vmsst_testing  # pylint: disable=g-import-not-at-top
  model_dir = tmp_path_factory.mktemp("tiny_model") / "vmsst"
  vmsst_testing.configure_small_run(data_dir, tiny_vocab_path, model_dir, steps=4,
                                    extra=["train.evaluator = None"])
  result = vmsst.train.train()
  gin.clear_config()
  return model_dir, jax.device_get(result["params"])


def _head_gz(src: pathlib.Path, dst: pathlib.Path, lines: int) -> None:
  with gzip.open(src, "rt", encoding="utf-8") as f_in, gzip.open(dst, "wt",
                                                                 encoding="utf-8") as f_out:
    for i, line in enumerate(f_in):
      if i == lines:
        break
      f_out.write(line)


@pytest.fixture(scope="session")
def small_data_dir(data_dir, tmp_path_factory) -> pathlib.Path:
  """The first lines of the real NTREX-128 and Multi30k files (tatoeba linked).

  Keeps every language and the file layout; only shortens the files so that
  each training process reads and shuffles its data in seconds.
  """
  root = tmp_path_factory.mktemp("small_data")
  (root / "tatoeba").symlink_to(data_dir / "tatoeba")
  (root / "multi30k").mkdir()
  for path in (data_dir / "multi30k").glob("*.gz"):
    _head_gz(path, root / "multi30k" / path.name, 100)
  (root / "ntrex128").mkdir()
  for path in (data_dir / "ntrex128").iterdir():
    if path.name.endswith(".txt.gz"):
      _head_gz(path, root / "ntrex128" / path.name, 16)
    elif path.name == "DOCUMENT_IDS.tsv":
      head = path.read_text(encoding="utf-8").splitlines(keepends=True)[:16]
      (root / "ntrex128" / path.name).write_text("".join(head), encoding="utf-8")
  return root
