"""Teacher embeddings for knowledge distillation, computed once and kept on disk.

Distillation (vmsst/objectives/distillation.py) regresses the student onto a
teacher's embedding of each source sentence. The teacher never runs in the
train step, nor while tasks are registered: registration (tasks/registry/distillation.py)
and the held-out MSE (DistillationEvaluator) only read the vectors. They are
encoded by one explicit step, `fill_stage`: ahead of time with

  python -m vmsst.teacher_cache --gin_file=gin/runs/distillation_cpu.gin

(the run's own gin files and bindings: it fills what that run reads), or by
`python -m vmsst.train` itself before it registers the tasks, logged as
"filling the teacher cache ...: N sentences to encode". A filled cache encodes
nothing and never loads the teacher.

A cache directory holds one teacher's vectors, keyed by a stable hash of the
sentence (blake2b-128 of its UTF-8 bytes, so the key is the same in every
process and on every machine):

  CACHE_DIR/manifest.json         {"format": 1, "teacher": "usem3", "dim": 512,
                                   "shards": ["00000", ...]}
  CACHE_DIR/keys-00000.npy        uint8 [n, 16]     sentence hashes
  CACHE_DIR/vectors-00000.npy     float32 [n, dim]  their embeddings

Each `fill` that meets new sentences appends one shard; the manifest is
rewritten last (atomically), so an interrupted fill leaves the listed shards
intact (the next fill overwrites the unlisted one; after an interrupted first
fill, .npy files without a manifest are reported as an error naming the fix).

`Teacher` names the encoder (usem3, one of our model directories, or a
SavedModel) and builds it on first use only, so a filled cache never loads it.

This package's import is light (no TensorFlow or JAX): `__main__.py`, the
command, quiets their start-up before loading them.
"""

import dataclasses
import hashlib
import json
import time
from typing import Callable, Iterable, Sequence

import numpy as np
import tqdm
from absl import logging

from vmsst.base import console
from vmsst.base import files
from vmsst.encoding import encoder_flags
from vmsst.encoding import protocol
from vmsst.encoding import saved_model as saved_model_lib
from vmsst.encoding import usem3 as usem3_lib
from vmsst.base.gin_utils import gin

FORMAT = 1
KEY_BYTES = 16
MANIFEST = "manifest.json"
FILL_COMMAND = "python -m vmsst.teacher_cache --gin_file=<the run's gin file>"


def sentence_key(sentence: str) -> bytes:
  """Stable 16-byte key of a sentence (unlike hash(), equal in every process)."""
  return hashlib.blake2b(sentence.encode("utf-8"), digest_size=KEY_BYTES).digest()


@gin.configurable
class Teacher:
  """An `Encoder` named by a flag-like choice and built on its first `encode`.

  Exactly one of encoder / model_dir / saved_model, as for `python -m
  vmsst.evaluate`: the offline usem3 reference (default), one of our
  `python -m vmsst.train` directories, or a SavedModel from `vmsst.export`.
  """

  def __init__(self, *, encoder: str | None = "usem3", model_dir: str | None = None,
               saved_model: str | None = None, batch_size: int = 64):
    """Args:
      encoder: "usem3", or None when a path below is given.
      model_dir: our checkpoint directory (its μ_sem, projected if it is a
        distilled model, teaches).
      saved_model: an exported SavedModel directory.
      batch_size: sentences per call of a checkpoint encoder.
    """
    if model_dir or saved_model:
      encoder = None
    encoder_flags.one_choice(model_dir=model_dir, saved_model=saved_model, encoder=encoder,
                             prefix="Teacher.")
    if encoder not in (None, "usem3"):
      raise ValueError(f"Teacher: unknown encoder {encoder!r}; the reference is 'usem3'.")
    self.model_dir, self.saved_model, self.batch_size = model_dir, saved_model, batch_size
    if model_dir:
      self.name = f"model_dir:{files.abspath(model_dir)}"
    elif saved_model:
      self.name = f"saved_model:{files.abspath(saved_model)}"
    else:
      self.name = "usem3"
    self._encoder: protocol.Encoder | None = None

  def build(self) -> protocol.Encoder:
    if self._encoder is None:
      logging.info("loading the teacher %s", self.name)
      if self.model_dir:
        from vmsst.encoding import checkpoint  # pylint: disable=import-outside-toplevel
        self._encoder = checkpoint.CheckpointEncoder.from_model_dir(
            self.model_dir, batch_size=self.batch_size)
      elif self.saved_model:
        self._encoder = saved_model_lib.SavedModelEncoder(self.saved_model)
      else:
        self._encoder = usem3_lib.Usem3Encoder()
    return self._encoder

  def encode(self, sentences: Sequence[str]) -> np.ndarray:
    """float32 [n, d_teacher]."""
    return self.build().encode(sentences)


@dataclasses.dataclass
class FillReport:
  """What one `fill` did: requested = cached + encoded (distinct sentences)."""
  requested: int
  cached: int
  encoded: int
  seconds: float

  def __str__(self) -> str:
    rate = self.encoded / self.seconds if self.seconds else 0.0
    return (f"{self.requested} distinct sentences: {self.cached} cached, {self.encoded} "
            f"encoded in {self.seconds:.1f} s ({rate:.0f}/s)")


@gin.configurable
class TeacherCache:
  """One teacher's sentence embeddings in a directory (layout: module docstring).

  Several instances may share a directory within a process (the task
  registry's and the evaluator's): `fill` rereads it first. Concurrent
  processes filling one directory are not supported.

  Attributes:
    directory: the cache directory.
    teacher: the Encoder filling it (only called for missing sentences).
    dim: embedding width, None until the first vector is stored.
  """

  def __init__(self, directory: str, teacher: protocol.Encoder, *, batch_size: int = 256):
    self.directory = files.as_path(directory)
    self.teacher = teacher
    self.batch_size = batch_size
    self._load()

  def _fix(self) -> str:
    return f"delete {self.directory} (it is recomputed) or point the cache elsewhere"

  def _load(self) -> None:
    """(Re)reads the directory: another TeacherCache may have appended shards."""
    self.dim: int | None = None
    self._shards: list[str] = []
    self._rows: dict[bytes, int] = {}
    self._vectors = np.zeros((0, 0), np.float32)
    path = self.directory / MANIFEST
    if not path.exists():
      strays = list(self.directory.glob("*.npy")) if self.directory.is_dir() else []
      if strays:
        raise ValueError(f"teacher cache {self.directory} has {len(strays)} .npy files but no "
                         f"{MANIFEST}: an unfinished or foreign cache; {self._fix()}.")
      return
    try:
      manifest = json.loads(path.read_text())
      teacher, dim, shards = manifest["teacher"], int(manifest["dim"]), list(manifest["shards"])
    except (ValueError, KeyError, TypeError) as e:
      raise ValueError(f"teacher cache manifest {path} is unreadable ({e}); {self._fix()}.") from e
    if manifest.get("format") != FORMAT:
      raise ValueError(f"teacher cache {self.directory} has format {manifest.get('format')}, "
                       f"this code reads {FORMAT}; {self._fix()}.")
    if teacher != self.teacher.name:
      raise ValueError(f"teacher cache {self.directory} holds embeddings of teacher {teacher!r}, "
                       f"not {self.teacher.name!r}: give each teacher its own cache directory.")
    keys, vectors = [], []
    for shard in shards:
      k, v = self._read_shard(shard, dim)
      keys.append(k)
      vectors.append(v)
    self.dim, self._shards = dim, shards
    self._vectors = np.concatenate(vectors) if vectors else np.zeros((0, dim), np.float32)
    for row, key in enumerate(np.concatenate(keys) if keys else []):
      self._rows[key.tobytes()] = row

  def _read_shard(self, shard: str, dim: int) -> tuple[np.ndarray, np.ndarray]:
    key_path = self.directory / f"keys-{shard}.npy"
    vector_path = self.directory / f"vectors-{shard}.npy"
    try:
      keys, vectors = files.load_npy(key_path), files.load_npy(vector_path)
    except (OSError, ValueError) as e:
      raise ValueError(f"teacher cache shard {shard} of {self.directory} is missing or corrupt "
                       f"({e}); {self._fix()}.") from e
    if (keys.ndim != 2 or keys.shape[1] != KEY_BYTES or vectors.shape != (len(keys), dim)
        or vectors.dtype != np.float32 or not np.all(np.isfinite(vectors))):
      raise ValueError(f"teacher cache shard {shard} of {self.directory} is inconsistent (keys "
                       f"{keys.shape}, vectors {vectors.shape} {vectors.dtype}, dim {dim}, or "
                       f"non-finite values); {self._fix()}.")
    return keys, vectors

  def __len__(self) -> int:
    return len(self._rows)

  def __contains__(self, sentence: str) -> bool:
    return sentence_key(sentence) in self._rows

  def fill(self, sentences: Sequence[str], *, desc: str = "sentences") -> FillReport:
    """Encodes the distinct sentences not yet cached (longest first) and stores them."""
    started = time.time()
    self._load()
    distinct = set(sentences)
    todo = sorted((s for s in distinct if s not in self), key=len, reverse=True)
    if todo:
      logging.info("filling the teacher cache %s: %d %s to encode with teacher %s (%d "
                   "already cached)", self.directory, len(todo), desc, self.teacher.name,
                   len(distinct) - len(todo))
      batches = [todo[i:i + self.batch_size] for i in range(0, len(todo), self.batch_size)]
      vectors = [np.asarray(self.teacher.encode(b), np.float32)
                 for b in tqdm.tqdm(batches, desc=f"{self.teacher.name}: {desc}", unit="batch",
                                  disable=console.hide_progress())]
      self._append(todo, np.concatenate(vectors))
    report = FillReport(len(distinct), len(distinct) - len(todo), len(todo), time.time() - started)
    logging.info("teacher cache %s: %s", self.directory, report)
    return report

  def _append(self, sentences: Sequence[str], vectors: np.ndarray) -> None:
    if vectors.ndim != 2 or len(vectors) != len(sentences) or not np.all(np.isfinite(vectors)):
      raise ValueError(f"teacher {self.teacher.name} returned {vectors.shape} (finite: "
                       f"{np.all(np.isfinite(vectors))}) for {len(sentences)} sentences.")
    if self.dim is not None and vectors.shape[1] != self.dim:
      raise ValueError(f"teacher {self.teacher.name} returned width {vectors.shape[1]} but "
                       f"the cache {self.directory} holds width {self.dim}; {self._fix()}.")
    self.directory.mkdir(parents=True, exist_ok=True)
    shard = f"{len(self._shards):05d}"
    keys = np.frombuffer(b"".join(sentence_key(s) for s in sentences), np.uint8)
    files.save_npy(self.directory / f"keys-{shard}.npy", keys.reshape(-1, KEY_BYTES))
    files.save_npy(self.directory / f"vectors-{shard}.npy", vectors)
    self.dim = vectors.shape[1]
    manifest = {"format": FORMAT, "teacher": self.teacher.name, "dim": self.dim,
                "shards": self._shards + [shard]}
    temporary = self.directory / (MANIFEST + ".tmp")
    temporary.write_text(json.dumps(manifest, indent=1))
    files.rename(temporary, self.directory / MANIFEST)  # atomic: the shard is complete first
    self._shards.append(shard)
    start = len(self._vectors)
    self._vectors = np.concatenate([self._vectors.reshape(-1, self.dim), vectors])
    for row, sentence in enumerate(sentences, start):
      self._rows[sentence_key(sentence)] = row

  def lookup(self, sentences: Sequence[str]) -> np.ndarray:
    """float32 [len(sentences), dim]; row i embeds sentences[i].

    Raises:
      KeyError: some sentence was never filled (naming how many, one, and
        the command that fills them).
    """
    missing = [s for s in sentences if s not in self]
    if missing:  # Another instance (the run's teacher stage) may have filled them since.
      self._load()
      missing = [s for s in sentences if s not in self]
    if missing:
      raise KeyError(f"{len(missing)} sentences are not in the teacher cache {self.directory}, "
                     f"e.g. {missing[0]!r}: fill it with `{FILL_COMMAND}` (python -m "
                     "vmsst.train does so itself before training).")
    rows = [self._rows[sentence_key(s)] for s in sentences]
    return self._vectors[rows] if rows else np.zeros((0, self.dim or 0), np.float32)


def fill_stage(register_tasks: Callable[[], Sequence[str]] | None,
               evaluators: Iterable[object] = ()) -> tuple[list[str], dict[str, FillReport]]:
  """A run's teacher stage: encodes what its teacher caches lack, then registers its tasks.

  What a run reads from a teacher cache comes from two places:
  registration, which only reads it and, when the distillation tasks' source
  sentences are not all there, raises `distillation.MissingTeacherVectors`
  (naming them) before registering anything; and every evaluator holding a
  `teacher_cache`, whose `teacher_sentences` it looks up while training
  (DistillationEvaluator). Their sentences are gathered per cache directory
  and the missing ones encoded in one `fill` each (the teacher is loaded once,
  and not at all when nothing is missing); then registration runs again on
  the filled cache.

  Args:
    register_tasks: the run's `train.register_tasks` (None: no tasks to
      register, e.g. the data is registered by the caller).
    evaluators: the run's evaluators; those without a teacher cache are
      ignored.
  Returns:
    (the registered task and mixture names, {cache directory: its FillReport}).
  """
  from vmsst_tasks.registry import distillation  # pylint: disable=import-outside-toplevel  # TensorFlow: after the command's quiet_startup
  needs: dict[str, tuple[TeacherCache, set[str]]] = {}

  def need(cache: TeacherCache, sentences: Iterable[str]) -> None:
    key = files.resolve(cache.directory)
    needs.setdefault(key, (cache, set()))[1].update(sentences)

  for evaluator in evaluators:
    if getattr(evaluator, "teacher_cache", None) is not None:
      need(evaluator.teacher_cache, evaluator.teacher_sentences)
  names, lacking = [], False
  if register_tasks is not None:
    try:
      names = list(register_tasks())
    except distillation.MissingTeacherVectors as missing:
      need(missing.teacher_cache, missing.sentences)
      lacking = True
  reports = {str(cache.directory): cache.fill(sorted(sentences), desc="sentences of the run")
             for cache, sentences in needs.values()}
  if lacking:
    names = list(register_tasks())
  return names, reports
