"""Small real models and batches shared by the model tests (no mocks).

Importable with JAX alone (no gin-config, seqio or TensorFlow), so the core's
tests run where an accelerator image has only JAX: the helpers that build
gin runs import those inside.
"""

import contextlib
import gzip
import importlib
import pathlib
import sys
import types
from typing import Callable, NamedTuple, Sequence

import flax.linen as nn
import jax
import numpy as np
from absl import flags
from absl.testing import flagsaver

from vmsst.base import cli
from vmsst.base import gin_utils
from vmsst.training import configurables
from vmsst.base.gin_utils import gin
from vmsst.model import models
from vmsst.model.config import NetworkConfig
from vmsst.base.languages import LANGUAGES

TINY = NetworkConfig(vocab_size=300, emb_dim=32, num_heads=2, head_dim=16, mlp_dim=64,
                     num_encoder_layers=1, num_language_encoder_layers=1,
                     num_decoder_layers=1, max_length=12)


def random_batch(batch_size: int = 4, length: int = 12, vocab_size: int = 300,
                 seed: int = 0) -> dict[str, np.ndarray]:
  """Pairs of random sentences of random lengths (EOS=1 last, 0-padded)."""
  rng = np.random.default_rng(seed)
  batch = {}
  for side in "ab":
    tokens = np.zeros((batch_size, length), np.int32)
    for row in range(batch_size):
      n = rng.integers(2, length)
      tokens[row, : n - 1] = rng.integers(3, vocab_size, n - 1)
      tokens[row, n - 1] = 1
    batch[f"tokens_{side}"] = tokens
    batch[f"mask_{side}"] = (tokens != 0).astype(np.int32)
    batch[f"lang_{side}"] = rng.integers(0, len(LANGUAGES), batch_size).astype(np.int32)
  batch["sem_side"] = (np.arange(batch_size) % 2).astype(np.int32)
  return batch


def init_params(model: models.EmbeddingModel, batch_size: int = 4, length: int = 12, seed=0):
  variables = model.get_initial_variables(jax.random.key(seed),
                                          models.batch_shapes(batch_size, length))
  return nn.unbox(variables["params"])


def param_shapes(model: models.EmbeddingModel, batch_size: int = 4, length: int = 12):
  """`init_params`'s tree as shapes only: for tests of names and shapes, no compile."""
  return jax.eval_shape(lambda: init_params(model, batch_size, length))


ROOT = pathlib.Path(__file__).resolve().parents[1]


def small_run_bindings(data_dir, vocab_path, model_dir, steps: int, extra=()) -> list[str]:
  """Gin bindings shrinking a gin/runs/*_cpu.gin run to seconds (real data and code)."""
  from vmsst.base import sentencepiece_vocabulary  # pylint: disable=import-outside-toplevel
  vocab_size = sentencepiece_vocabulary.get_vocabulary(str(vocab_path)).vocab_size
  return [
      f"DATA_DIR = '{data_dir}'", f"VOCAB_PATH = '{vocab_path}'", f"VOCAB_SIZE = {vocab_size}",
      f"MODEL_DIR = '{model_dir}'", f"TRAIN_STEPS = {steps}", "BATCH_SIZE = 32",
      "NetworkConfig.emb_dim = 64", "NetworkConfig.mlp_dim = 128", "NetworkConfig.head_dim = 16",
      "retrieval_sets.max_pairs = 200", "train.log_every = 5",
      "RetrievalEvaluator.batch_size = 64", *extra]


# A small run on one of the eight simulated devices (make_mesh.devices_per_process): it compiles
# and steps faster unsharded (docs/results/tests/).
ONE_DEVICE = "make_mesh.devices_per_process = 1"


def configure_small_run(data_dir, vocab_path, model_dir, steps: int, objective="vmsst",
                        extra=()) -> None:
  """Parses gin/runs/<objective>_cpu.gin with `small_run_bindings`, on one device.

  One device (ONE_DEVICE); a test of sharding builds its mesh itself, or passes
  `make_mesh.devices_per_process = -1` in `extra`.
  """
  from vmsst.base.gin_utils import gin  # pylint: disable=import-outside-toplevel
  configurables.register()
  gin.clear_config()
  gin.add_config_file_search_path(str(ROOT))
  gin.parse_config_files_and_bindings(
      [str(ROOT / f"gin/runs/{objective}_cpu.gin")],
      small_run_bindings(data_dir, vocab_path, model_dir, steps,
                         [ONE_DEVICE, *extra]),
      finalize_config=False)


def assert_user_error(done, *named: str, status: int = 2) -> str:
  """A user's mistake as commands report it: exit `status`, no traceback, and a last stderr
  line `error: …` that names each of `named` (the flag, file or value at fault).

  The wording around them is the command's to change; what the user must find in the line
  (what is wrong, by name) and how the process ends are the behaviour. Returns the line.
  """
  assert done.returncode == status, (done.returncode, done.stderr[-2000:])
  assert "Traceback" not in done.stderr, done.stderr[-2000:]
  lines = done.stderr.splitlines()
  last = lines[-1] if lines else ""
  assert last.startswith("error: "), done.stderr[-2000:]
  for name in named:
    assert name in last, (name, last)
  return last


class Ended(NamedTuple):
  """How a command ended: the fields of a finished subprocess, so one check reads both."""
  returncode: int
  stdout: str
  stderr: str


def command_here(main: Callable, prog: str, args: Sequence[str], capfd) -> Ended:
  """`python -m PROG ARGS` past its imports, in this process: absl parses the command line
  (`cli.parse_flags`, as `cli.run` does) and `main` runs under `cli.user_errors`, so a
  mistake ends as the command's does (the `error:` line, exit 2). Output is read at the
  file descriptors (`capfd`), C++ and log lines included; absl's flags and gin's config
  are put back after, so calls stay independent. Run from the directory the command
  would be (relative paths in run files are the working directory's)."""
  argv = gin_utils.rewrite_gin_args([prog, *args])
  capfd.readouterr()
  status, parsed = 0, flags.FLAGS.is_parsed()
  gin.clear_config()
  try:
    with flagsaver.flagsaver():
      flags.FLAGS.unparse_flags()
      try:
        remaining = cli.parse_flags(argv)  # what main gets, as from app.run: no flags
        cli.user_errors(main)(remaining)
      finally:
        flags.FLAGS.unparse_flags()
        if parsed:
          flags.FLAGS.mark_as_parsed()
  except SystemExit as e:
    status = e.code
  finally:
    gin.clear_config()
  out, err = capfd.readouterr()
  return Ended(status, out, err)


@contextlib.contextmanager
def command_flags(define: Callable[[], None]):
  """The flags `define` adds (a command's `_define_flags`) for the `with` block, removed after.

  Commands define their flags under `__main__` only; two of them in one process would clash
  on a name they share (--output), so each call defines its own and takes them away again.
  """
  before = set(flags.FLAGS)
  define()
  try:
    yield
  finally:
    added = set(flags.FLAGS) - before
    for name in added:
      if name in flags.FLAGS:
        delattr(flags.FLAGS, name)
    if added & set(gin_utils.FLAG_NAMES):  # defined once per process: again for the next one
      gin_utils.define_flags.cache_clear()


def run_here(command: types.ModuleType, args: Sequence[str], capfd,
             define: Callable[[], None] | None = None) -> Ended:
  """`python -m <command> ARGS` in this process (`command_here`), with the command's own flags
  (`define`, by default `command._define_flags`) defined for this call only: how a test types
  a command line without the seconds a process spends importing JAX and TensorFlow."""
  with command_flags(define or command._define_flags):  # pylint: disable=protected-access
    return command_here(command.main, command.__name__, args, capfd)


@contextlib.contextmanager
def command_module(name: str, define: Callable[[], None] | None = None):
  """The command module `name` (e.g. "vmsst.embed") for the `with` block, its flags defined
  for the block only: by `define`, else by its `_define_flags` (`command_flags`), else by its
  import, where a command defines them at import (vmsst.compile, vmsst.learning_curves). Such a
  module imported here is forgotten after with its flags (from sys.modules and its package), so
  the next import, this helper's or a test module's, defines them again."""
  fresh = name not in sys.modules
  module = importlib.import_module(name)
  define = define or getattr(module, "_define_flags", None)
  try:
    if define is None:
      yield module
    else:
      with command_flags(define):
        yield module
  finally:
    own = [n for n in flags.FLAGS if flags.FLAGS.find_module_defining_flag(n) == name]
    if fresh and define is None and own:
      for flag in own:
        delattr(flags.FLAGS, flag)
      sys.modules.pop(name, None)
      package, _, child = name.rpartition(".")
      if getattr(sys.modules.get(package), child, None) is module:
        delattr(sys.modules[package], child)


def command_named(name: str, args: Sequence[str], capfd,
                  define: Callable[[], None] | None = None) -> Ended:
  """`python -m NAME ARGS` in this process (`command_here`), the module and its flags given by
  `command_module`: the tests that type many commands by name."""
  with command_module(name, define) as module:
    return command_here(module.main, name, args, capfd)


@contextlib.contextmanager
def typed_flags(command: types.ModuleType, args: Sequence[str]):
  """The command's flags defined and parsed from `python -m <command> ARGS` for the block: a
  test of what the command makes of its flags where running its `main` would train for
  minutes. Put back after, as `command_here` does."""
  parsed = flags.FLAGS.is_parsed()
  with command_flags(command._define_flags), flagsaver.flagsaver():  # pylint: disable=protected-access
    flags.FLAGS.unparse_flags()
    try:
      flags.FLAGS(gin_utils.rewrite_gin_args([command.__name__, *args]))
      yield flags.FLAGS
    finally:
      flags.FLAGS.unparse_flags()
      if parsed:
        flags.FLAGS.mark_as_parsed()


class HandEncoder:
  """A stand-in encoder: [characters, spaces, 1] per sentence; remembers every batch it was given."""

  name = "hand"

  def __init__(self):
    self.batches = []

  def encode(self, sentences):
    self.batches.append(list(sentences))
    return np.array([[len(s), s.count(" "), 1] for s in sentences], np.float32).reshape(-1, 3)


# Python source that makes TensorFlow, tensorflow_text and seqio absent, as on an
# accelerator image: `import` raises ModuleNotFoundError and importlib.util.find_spec
# answers None (etils.epath probes TensorFlow so). A child process runs it first
# (`python -c WITHOUT_TENSORFLOW + script`, or as its sitecustomize.py).
WITHOUT_TENSORFLOW = r"""
import importlib.machinery, sys
BLOCKED = ("tensorflow", "tensorflow_text", "seqio")

class Absent(importlib.machinery.PathFinder):
  @classmethod
  def find_spec(cls, name, path=None, target=None):
    if name.split(".")[0] in BLOCKED:
      return None
    return importlib.machinery.PathFinder.find_spec(name, path, target)

sys.meta_path[:] = [Absent if f is importlib.machinery.PathFinder else f for f in sys.meta_path]
"""


def clustered_embeddings(n: int = 3000, d: int = 32, seed: int = 0):
  """Sources in 30 clusters; the first 2/3 of the targets are noisy translations of sources
  (shuffled): a mining task whose exact answer IVF search should find (the mining tests)."""
  rng = np.random.default_rng(seed)
  centres = rng.standard_normal((30, d)).astype(np.float32) * 2
  source = centres[rng.integers(0, 30, n)] + rng.standard_normal((n, d)).astype(np.float32)
  target = source.copy()
  target[: 2 * n // 3] += 0.3 * rng.standard_normal((2 * n // 3, d)).astype(np.float32)
  target[2 * n // 3:] = (centres[rng.integers(0, 30, n - 2 * n // 3)]
                         + rng.standard_normal((n - 2 * n // 3, d)).astype(np.float32))
  return source, target[rng.permutation(n)]


def ntrex_translations(data_dir, n: int) -> tuple[list[str], list[str]]:
  """The first n German sentences of NTREX-128 and their English sources, line for line."""
  ntrex = pathlib.Path(data_dir) / "ntrex128"
  with gzip.open(ntrex / "newstest2019-ref.deu.txt.gz", "rt") as de, \
       gzip.open(ntrex / "newstest2019-src.eng.txt.gz", "rt") as en:
    return ([next(de).rstrip("\n") for _ in range(n)],
            [next(en).rstrip("\n") for _ in range(n)])
