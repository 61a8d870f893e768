"""The test tiers (unit, integration, tpu, slow) and the session fixtures shared by the data
and model tests: the real data and a tiny vocabulary."""

import functools
import gzip
import inspect
import os
import pathlib
import re
import shutil
import subprocess
import tempfile

# Before anything imports jax: eight CPU devices, so sharding tests can build a
# (data 4 x model 2) mesh on a laptop (`make test` sets the same).
os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=8")
# With the TPU compiler installed (the `tpu` extra), JAX would probe for TPU chips
# at start-up and print libtpu's errors: the tests run on the CPU, and compile for
# TPU slices through compile-only devices (vmsst/training/slices.py) without the probe.
os.environ.setdefault("JAX_PLATFORMS", "cpu")
# XLA compiles the tests' programs without its optimisations (this process and every process
# a test starts): their models are tiny, so compiling is most of their time (test_train.py and
# test_trainer.py, one core each side by side: 262 CPU s against 322 s, docs/results/tests/).
# Compiled reports (vmsst.compiler.step.compile_step) keep the compiler's default: they
# describe the program a pod runs.
os.environ.setdefault("JAX_DISABLE_MOST_OPTIMIZATIONS", "true")
# OpenMP threads (PyTorch's, faiss's; this process's and every process a test starts) sleep at a
# barrier instead of spinning: the suite's two workers and their children share two cores, and a
# thread spinning for one that is not running burns the CPU the other needs (a batch-1 PyTorch
# encode took 400-800 ms a call instead of 2-6 ms). Only speeds change; no test checks a speed.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
# One persistent XLA compilation cache for the session, its xdist workers and every process a
# test starts (they inherit it): tests that train the same small run again (a resume, a rerun
# in a subprocess) load its programs instead of compiling them (docs/results/tests/). Made by
# the first process here, which removes it at the end (pytest_unconfigure).
_OWN_COMPILATION_CACHE = None
if "JAX_COMPILATION_CACHE_DIR" not in os.environ:
  _OWN_COMPILATION_CACHE = tempfile.mkdtemp(prefix="vmsst_tests_jax_cache_")
  os.environ["JAX_COMPILATION_CACHE_DIR"] = _OWN_COMPILATION_CACHE
from vmsst.training import slices as tpu_slices  # pylint: disable=g-import-not-at-top,wrong-import-position

tpu_slices.quiet_libtpu()

import pytest  # pylint: disable=g-import-not-at-top,wrong-import-position
from vmsst.base import text_files

REPO_ROOT = pathlib.Path(__file__).resolve().parents[1]
# The shared corpora live next to the repository, never inside it.
DATA_DIR = REPO_ROOT.parent / "shared" / "data"


TIERS = {
    "unit": "pure and quick (seconds): no training run, no subprocess; `make test-fast` runs "
            "only these. Assigned to every test that is in no other tier",
    "integration": "trains a model, or runs a command or several processes (a subprocess); "
                   "assigned from the test's fixtures and code, or marked",
    "tpu": "compiles with the TPU compiler (libtpu, the `tpu` extra) for a TPU slice's "
           "compile-only devices; skipped with the install command where libtpu is absent",
    "slow": "over ~7 s on 2 cores (training runs, subprocess resume/preemption, "
            "multi-process, bench): out of `make test-fast`, in `make test`",
}


def pytest_unconfigure(config):
  """Removes the session's compilation cache, where this process made it."""
  del config
  if _OWN_COMPILATION_CACHE:
    shutil.rmtree(_OWN_COMPILATION_CACHE, ignore_errors=True)


def pytest_configure(config):
  """Registers the tiers (`--strict-markers` makes a misspelt one an error).

  `make test-fast` runs `-m unit`; `make test` (what CI runs) every tier but the
  paper runs' compiles beyond a representative three (`tpu_all_runs`); `make
  test-tpu` the `tpu` tier. `python -m pytest tests --collect-only -q -m unit`
  lists what the edit loop runs.
  """
  for name, meaning in TIERS.items():
    config.addinivalue_line("markers", f"{name}: {meaning}")
  config.addinivalue_line(
      "markers", "tpu_all_runs: a paper run's compile beyond the representative three that "
      "`make test` (CI) compiles; `make test-tpu` runs them all")


# Fixtures that train, export or checkpoint a model (20-30 s each, once per
# xdist worker): every test that needs one is an integration test in the slow
# tier, so the edit loop pays for none of them (`make test` still runs them all).
SLOW_FIXTURES = frozenset({"tiny_model", "model_and_export", "two_states",
                           "separate_towers_run"})
# What in a test's code (or in a function of its module that it calls) starts another process.
STARTS_A_PROCESS = ("subprocess.", "sys.executable", "multiprocessing.")
# What in it trains a model (the whole loop, `vmsst.training.loop.train`).
TRAINS = ("loop.train(",)


@functools.cache  # a module's helpers are read once, not once per test that calls them
def _code(function) -> str:
  try:
    return inspect.getsource(function)
  except (OSError, TypeError):
    return ""


def starts_a_process(function, signs=STARTS_A_PROCESS + TRAINS) -> bool:
  """Whether a test function, or a function of its module it calls by name, starts a process
  or trains (any of `signs` in its code)."""
  code = _code(function)
  if any(sign in code for sign in signs):
    return True
  module = inspect.getmodule(function)
  for name, helper in (vars(module).items() if module else ()):
    if (inspect.isfunction(helper) and helper is not function
        and helper.__module__ == module.__name__ and f"{name}(" in code
        and any(sign in _code(helper) for sign in signs)):
      return True
  return False


def tiers_of(item) -> set[str]:
  """The tiers a collected test is in, from its markers, fixtures and code."""
  marked = {mark.name for mark in item.iter_markers()} & {*TIERS, "tpu_all_runs"}
  tiers = (marked - {"tpu_all_runs"}) | ({"tpu"} if "tpu_all_runs" in marked else set())
  if SLOW_FIXTURES & set(getattr(item, "fixturenames", ())):
    tiers |= {"integration", "slow"}
  if "gcs" in getattr(item, "fixturenames", ()):  # the emulator is a process
    tiers.add("integration")
  if "tpu" not in tiers and starts_a_process(getattr(item, "function", None)):
    tiers.add("integration")
  return tiers or {"unit"}


# The longest test files, longest first (seconds of setup and call each: docs/results/tests/).
# `make test` hands whole files to its two workers (`--dist loadfile`, so a module's fixtures
# run once) in collection order: started first, a long file overlaps the short ones on the
# other worker instead of running alone at the end.
LONGEST_FIRST = (
    "tests/gcs/test_gcs_train.py",
    "tests/export_formats/test_export_fidelity.py",
    "tests/training/test_multihost.py",
    "tests/test_compare.py",
    "tests/gcs/test_gcs_multihost.py",
    "tests/objectives/test_momentum_contrast.py",
    "tests/gcs/test_gcs_caches.py",
    "tests/test_train.py",
    "tests/test_compile.py",
    "tests/model/test_network.py",
    "tests/training/test_preemption.py",
    "tests/bench/test_bench.py",
    "tests/gcs/test_gcs_commands.py",
    "tests/training/test_trainer.py",
    "tests/mining/test_beam_pipeline.py",
    "tests/evaluation/test_bucc.py",
    "tests/export_formats/test_hf_export.py",
    "tests/launch/test_launchers.py",
    "tests/tasks/test_own_corpus.py",
    "tests/commands/test_user_errors.py",
    "tests/bench/test_device_check.py",
    "tests/training/test_train_preflight.py",
    "tests/compiler/test_paper_slices.py",
)


def longest_first(items) -> list:
  """The files of LONGEST_FIRST first, in its order; each file's tests keep their order."""
  rank = {path: i for i, path in enumerate(LONGEST_FIRST)}
  return sorted(items, key=lambda item: rank.get(item.nodeid.split("::", 1)[0],
                                                 len(LONGEST_FIRST)))


# A module marker that puts every test of a file in another tier than `unit`.
_WHOLE_FILE_ELSEWHERE = re.compile(r"^pytestmark = .*pytest\.mark\.(slow|integration|tpu)\b", re.M)


def pytest_ignore_collect(collection_path, config):
  """`-m unit` (make test-fast) does not import the files whose module marker puts all their
  tests in another tier: each xdist worker would import them only to deselect every test."""
  if (config.option.markexpr != "unit" or collection_path.suffix != ".py"
      or not collection_path.name.startswith("test_")):
    return None
  return bool(_WHOLE_FILE_ELSEWHERE.search(collection_path.read_text(encoding="utf-8"))) or None


def pytest_collection_modifyitems(items):
  """Adds each test's tiers as markers, so `-m unit` / `-m integration` select them, and
  puts the longest files first."""
  for item in items:
    for tier in sorted(tiers_of(item) - {mark.name for mark in item.iter_markers()}):
      item.add_marker(getattr(pytest.mark, tier))
  items[:] = longest_first(items)


class _NoProcessInUnitTests:
  """subprocess.Popen while a unit test runs: the test belongs to the integration tier."""

  def __init__(self, *args, **kwargs):
    del args, kwargs
    raise AssertionError("a unit test started a process: mark it @pytest.mark.integration "
                         "(tests/conftest.py, TIERS)")


@pytest.fixture(autouse=True)
def _unit_tests_start_no_process(request, monkeypatch):
  """Keeps the unit tier honest: a subprocess there fails the test, naming the marker."""
  if request.node.get_closest_marker("unit") is not None:
    monkeypatch.setattr(subprocess, "Popen", _NoProcessInUnitTests)


def one_device_flags(flags: str) -> str:
  """XLA_FLAGS with one forced host device instead of the tests' eight."""
  kept = [f for f in flags.split() if not f.startswith("--xla_force_host_platform_device_count")]
  return " ".join([*kept, "--xla_force_host_platform_device_count=1"])


@pytest.fixture(scope="session", autouse=True)
def _processes_started_by_tests_use_one_device():
  """A process a test starts simulates one CPU device, not eight, unless the test says so.

  This process keeps its eight (its backend is made here, before the variable changes;
  XLA reads it once): the sharding tests build their meshes in it. A command started on
  eight simulated devices compiles and steps a sharded program over two cores, about a
  fifth slower than unsharded (docs/results/tests/); a test that needs a sharded child sets
  XLA_FLAGS in the child's environment (tests/training/test_multihost.py does). Set by a
  fixture, not at import: xdist starts its workers from the controller's environment.
  """
  import jax  # pylint: disable=g-import-not-at-top
  jax.devices()
  with pytest.MonkeyPatch.context() as patch:
    patch.setenv("XLA_FLAGS", one_device_flags(os.environ.get("XLA_FLAGS", "")))
    yield


@pytest.fixture
def optimized_compiles(monkeypatch):
  """XLA's optimising compile for one test (and the processes it starts): for the runs of
  hundreds of steps that check learning, where the suite's unoptimised programs
  (JAX_DISABLE_MOST_OPTIMIZATIONS above) lose more in steps than they save in compiling
  (the 300-step VMSST run, alone on one core: 89 CPU s optimised, 109 s not). XLA reads the
  option per compile, and the persistent cache keys programs by their compile options."""
  import jax  # pylint: disable=g-import-not-at-top
  before = jax.config.read("jax_disable_most_optimizations")
  jax.config.update("jax_disable_most_optimizations", False)
  monkeypatch.setenv("JAX_DISABLE_MOST_OPTIMIZATIONS", "false")
  yield
  jax.config.update("jax_disable_most_optimizations", before)


@pytest.fixture(scope="session")
def gcs(tmp_path_factory):
  """A Cloud Storage bucket on 127.0.0.1 (`gcs.path(...)` → `gs://…`), for the session.

  fake-gcs-server and a TLS proxy for TensorFlow's GCS client (tests/gcs_emulator.py);
  their variables are in os.environ while it lives, so commands run by a test reach the
  bucket too and nothing leaves the machine. Skips with the install command without it.
  """
  import gcs_emulator  # pylint: disable=g-import-not-at-top
  if gcs_emulator.binary_path() is None:
    pytest.skip(f"the GCS emulator is not installed: {gcs_emulator.INSTALL}")
  emulator = gcs_emulator.Emulator(tmp_path_factory.mktemp("gcs_emulator"))
  try:
    with pytest.MonkeyPatch.context() as patch:
      for key, value in emulator.env().items():
        patch.setenv(key, value)
      yield emulator
  finally:
    emulator.stop()


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
  from vmsst_tasks.sources import pair_readers  # pylint: disable=g-import-not-at-top
  from vmsst_tasks.sources import vocabulary_training  # pylint: disable=g-import-not-at-top
  sentences = []
  for path in pair_readers.ntrex_files(data_dir).values():
    sentences += text_files.read_lines(path)[:16]
  for short in pair_readers.MULTI30K_LANGUAGES:
    sentences += text_files.read_lines(data_dir / "multi30k" / f"train.{short}.gz")[:500]
  prefix = tmp_path_factory.mktemp("tiny_vocab") / "spm"
  return vocabulary_training.train_vocabulary(sentences, str(prefix), 2000,
                                              character_coverage=0.995)


@pytest.fixture(scope="session")
def tiny_model(data_dir, tiny_vocab_path, tmp_path_factory):
  """(model_dir, final params): a 4-step tiny VMSST run on real data, trained once.

  Shared by the tests of everything that reads a trained directory (restore,
  export, the encoder API), so the suite trains it once.
  """
  import gin  # pylint: disable=g-import-not-at-top
  import jax  # pylint: disable=g-import-not-at-top
  import vmsst.training.loop  # pylint: disable=g-import-not-at-top
  import vmsst_testing  # pylint: disable=g-import-not-at-top
  model_dir = tmp_path_factory.mktemp("tiny_model") / "vmsst"
  vmsst_testing.configure_small_run(data_dir, tiny_vocab_path, model_dir, steps=4,
                                    extra=["train.evaluator = None"])
  result = vmsst.training.loop.train()
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
