"""`vmsst.Encoder`: embed sentences with a trained or exported model, in a few lines.

  encoder = vmsst.Encoder.from_checkpoint("runs/vmsst_cpu")      # needs JAX
  encoder = vmsst.Encoder.from_saved_model("runs/vmsst_cpu/export")  # TensorFlow only
  vectors = encoder.encode(["Ein Mann fährt Fahrrad.", "A man rides a bike."])
  matrix = encoder.similarity(["Hallo Welt", "Hund"], ["Hello world"])  # [2, 1] cosines
  scores = encoder.pairwise_similarity(["Hallo Welt"], ["Hello world"])  # one per pair
  vectors = encoder.encode(["你好"], language="zho")  # a two-tower model: tower b

In the spirit of sentence-transformers' `encode`: a list in, float32 [n, d]
out, row i for sentence i. The work is done by the package's encoders
(`checkpoint.CheckpointEncoder`, `saved_model.SavedModelEncoder`), wrapped in
`protocol.UniqueSentences`, which encodes each distinct sentence once, in
batches sorted longest first (so a batch holds sentences of similar length
and little padding), behind an optional progress bar, and puts rows back in
the caller's order.

A dual momentum contrast model with a tower per language side embeds a
sentence with its language's tower, as it trained (`language=`: English and
the other side-a languages through tower a, every other language through
tower b; without it, tower a). One-tower models ignore the language.
"""

import os
from typing import Sequence

from vmsst.base import console

console.quiet_imports()  # the API as quiet as the commands: CPU JAX without an accelerator

# pylint: disable=wrong-import-position
import numpy as np
from absl import logging

from vmsst.base import files
from vmsst.encoding import nested
from vmsst.encoding import protocol
from vmsst.encoding import quantize as quantize_lib
from vmsst.encoding import saved_model as saved_model_lib
from vmsst.encoding import similarity as similarity_lib

Sentences = str | Sequence[str]


class Encoder:
  """Sentence embeddings μ_sem from any `protocol.Encoder` backend.

  Attributes:
    backend: the encoder doing the work (strings -> float32 [n, d]).
    name: the backend's name (the model directory's or SavedModel's basename).
  """

  def __init__(self, backend: protocol.Encoder, *, dimension: int | None = None,
               calibration_dir: str | None = None):
    """Wraps `backend`; `dimension` is probed with one empty sentence when not given;
    `calibration_dir` holds the int8 calibration (`run_directory.CALIBRATION`), if any."""
    self.backend = backend
    self.name = backend.name
    self._dimension = dimension
    self._calibration_dir = calibration_dir
    self._warned_truncation = False

  def __repr__(self) -> str:
    parts = [f"name={self.name!r}", f"backend={type(self.backend).__name__}"]
    if self._dimension is not None:
      parts.append(f"dimension={self._dimension}")
    if self.max_seq_length is not None:
      parts.append(f"max_seq_length={self.max_seq_length}")
    return f"Encoder({', '.join(parts)})"

  @classmethod
  def from_checkpoint(cls, model_dir: str, step: int | None = None, *,
                      batch_size: int = 64, dtype: str | None = None,
                      max_seq_length: int | None = None) -> "Encoder":
    """A `python -m vmsst.train` directory, restored on all local devices (JAX).

    Args:
      model_dir: holds config.gin, spm.model and checkpoints/.
      step: checkpoint step (default: the latest).
      batch_size: the most rows one compiled call takes (rounded up to a
        multiple of the data-parallel devices); a smaller call is padded only
        to the next power of two, so `encode(..., batch_size=1)` computes one
        row, not `batch_size`.
      dtype: "bfloat16" or "float32" activations (default: as trained); see
        vmsst.encoding.restore.restore.
      max_seq_length: pieces per sentence, EOS included; longer sentences
        are cut (default: the training length, 32 for gin/runs).
    """
    import jax  # pylint: disable=import-outside-toplevel  # only this path needs JAX
    from vmsst.encoding import checkpoint  # pylint: disable=import-outside-toplevel
    from vmsst.encoding import restore  # pylint: disable=import-outside-toplevel
    console.quiet_logs()  # orbax's per-restore lines, as in the commands
    restored = restore.restore(model_dir, step=step, dtype=dtype)
    backend = checkpoint.CheckpointEncoder(
        restored, batch_size=batch_size, name=os.path.basename(os.path.normpath(model_dir)),
        max_seq_length=max_seq_length)
    spec = jax.ShapeDtypeStruct((1, 1), np.int32)
    dimension = jax.eval_shape(restored.model.encode, restored.params, spec, spec).shape[-1]
    return cls(backend, dimension=int(dimension), calibration_dir=model_dir)

  @classmethod
  def from_saved_model(cls, path: str) -> "Encoder":
    """A SavedModel written by `python -m vmsst.export` (or any with its contract)."""
    if not files.isdir(path):
      raise FileNotFoundError(f"No SavedModel directory at {path}; write one with "
                              "`python -m vmsst.export --model_dir=... --output=...`.")
    # Registers the SentencePiece ops the exported graph uses; without it,
    # loading fails with "Op type not registered 'SentencepieceOp'".
    import tensorflow_text  # pylint: disable=import-outside-toplevel,unused-import
    return cls(saved_model_lib.SavedModelEncoder(path),
               calibration_dir=files.join(path, saved_model_lib.EXPORT_EXTRA_DIR))

  @property
  def max_seq_length(self) -> int | None:
    """Pieces per sentence the model sees, EOS included (None: the backend does not say)."""
    return getattr(self.backend, "max_seq_length", None)

  def count_truncated(self, sentences: Sequence[str]) -> int | None:
    """How many sentences are longer than `max_seq_length` and get cut (None: unknown)."""
    count = getattr(self.backend, "count_truncated", None)
    return None if count is None else count(list(sentences))

  def tower_of(self, language: str | None) -> str | None:
    """The tower ("a"/"b") that embeds `language`; None for a one-tower model."""
    return protocol.tower_of(self.backend, language)

  @property
  def dimension(self) -> int:
    """d, the width of an embedding."""
    if self._dimension is None:
      self._dimension = int(self.backend.encode([""]).shape[-1])
    return self._dimension

  def encode(self, sentences: Sentences, batch_size: int = 64, show_progress_bar: bool = False,
             normalize: bool = False, language: str | None = None,
             truncate_dim: int | None = None, precision: str = "float32") -> np.ndarray:
    """Embeds sentences, keeping their order.

    Args:
      sentences: a list of strings (or one string).
      batch_size: sentences per backend call; calls are made longest first.
      show_progress_bar: a tqdm bar over the batches (on stderr).
      normalize: scale rows to unit L2 norm (then dot product = cosine).
      language: the sentences' language ("de", "zho", ...): picks a two-tower
        model's tower (`tower_of`); None: tower a. One-tower models ignore it.
      truncate_dim: keep the first k dimensions (a nested size the model was
        trained with, vmsst/objectives/nested.py), renormalised when
        `normalize`; None: all d.
      precision: "float32", "int8", "uint8", "binary" or "ubinary",
        sentence-transformers' layouts (vmsst/encoding/quantize.py); int8 and
        uint8 use the calibration saved beside the model (`python -m vmsst.calibrate`).
    Returns:
      float32 [len(sentences), d]; float32 [d] for a single string (k for d
      with truncate_dim).
    """
    quantize_lib.check_precision(precision)
    single = isinstance(sentences, str)
    sentences = [sentences] if single else list(sentences)
    wrong = [type(s).__name__ for s in sentences if not isinstance(s, str)]
    if wrong:
      raise TypeError(f"encode takes strings; got {len(wrong)} items of type {wrong[0]}.")
    if batch_size < 1:
      raise ValueError(f"batch_size must be positive, got {batch_size}.")
    if sentences:
      embeddings = protocol.UniqueSentences(
          self.backend, batch_size=batch_size, progress=show_progress_bar).encode(
              sentences, language=language)
      self._warn_truncated(sentences)
    else:  # no rows, in the layout `precision` gives
      embeddings = np.zeros((0, self.dimension), np.float32)
    embeddings = nested.truncate(embeddings, truncate_dim)
    if normalize:
      embeddings = similarity_lib.normalize(embeddings)
    if precision != "float32":
      embeddings = self.quantized(embeddings, precision, normalized=normalize)
    return embeddings[0] if single else embeddings

  def quantized(self, embeddings: np.ndarray, precision: str, *,
                normalized: bool = False) -> np.ndarray:
    """This model's float [n, d] embeddings at `precision`, by its saved calibration.

    An export with --normalize serves unit vectors, so its normalized ranges apply.
    """
    normalized = normalized or bool(getattr(self.backend, "normalized", False))
    if precision in quantize_lib.CALIBRATED and not hasattr(self, "_calibration"):
      self._calibration = (quantize_lib.load(self._calibration_dir)
                           if self._calibration_dir else None)
    return quantize_lib.quantize_with(embeddings, precision, getattr(self, "_calibration", None),
                                      normalized=normalized,
                                      where=self._calibration_dir or self.name)

  def _warn_truncated(self, sentences: list[str]) -> None:
    """Once per encoder: how many sentences were cut, and how to change the length."""
    if self._warned_truncation:
      return
    cut = self.count_truncated(sorted(set(sentences)))
    if cut:
      self._warned_truncation = True
      fix = ("Encoder.from_checkpoint(max_seq_length=) changes the length"
             if hasattr(self.backend, "restored") else
             "a SavedModel's length is fixed when exported (export a model trained with a "
             "longer SEQUENCE_LENGTH, or use Encoder.from_checkpoint(max_seq_length=))")
      logging.warning("%d of %d distinct sentences are longer than %d pieces (EOS included) "
                      "and were cut; %s (said once per encoder)",
                      cut, len(set(sentences)), self.max_seq_length, fix)

  def similarity(self, a: Sentences | np.ndarray, b: Sentences | np.ndarray, *,
                 batch_size: int = 64, show_progress_bar: bool = False,
                 languages: tuple[str | None, str | None] = (None, None)) -> np.ndarray:
    """Cosine of every a[i] with every b[j]: float32 [n, m], as sentence-transformers'.

    Args:
      a, b: lists of sentences (or one string each), or their embeddings
        float [n, d] and [m, d]; the sentences of both sides are encoded in
        one pass (each distinct one once).
      batch_size, show_progress_bar: as in `encode`.
      languages: the languages of a and of b (`encode`'s `language`).
    Returns:
      float32 [n, m]; for the cosine of each pair (a[i], b[i]) only, use
      `pairwise_similarity`.
    """
    a, b = ([x] if isinstance(x, str) else x for x in (a, b))
    a, b = self._embedded(a, b, languages, batch_size=batch_size,
                          show_progress_bar=show_progress_bar)
    if a.ndim != 2 or b.ndim != 2 or a.shape[1] != b.shape[1]:
      raise ValueError(f"similarity needs [n, d] and [m, d] embedding arrays, got {a.shape} "
                       f"and {b.shape}.")
    return similarity_lib.cosine_matrix(a, b).astype(np.float32)

  def pairwise_similarity(self, a: Sentences | np.ndarray, b: Sentences | np.ndarray, *,
                          batch_size: int = 64, show_progress_bar: bool = False,
                          languages: tuple[str | None, str | None] = (None, None)
                          ) -> np.ndarray:
    """Cosine of each pair (a[i], b[i]): float32 [n], the diagonal of `similarity`.

    Args:
      a, b: equally long lists of sentences, or their embeddings float [n, d];
        sentences of both sides are encoded in one pass (each distinct one once).
      batch_size, show_progress_bar: as in `encode`.
      languages: the languages of a and of b (`encode`'s `language`).
    Returns:
      float32 [n]; entry i depends on a[i] and b[i] only.
    """
    a, b = ([x] if isinstance(x, str) else x for x in (a, b))
    if len(a) != len(b):
      raise ValueError(f"pairwise_similarity compares pairs: a has {len(a)} items, b has "
                       f"{len(b)}.")
    a, b = self._embedded(a, b, languages, batch_size=batch_size,
                          show_progress_bar=show_progress_bar)
    if a.ndim != 2 or a.shape != b.shape:
      raise ValueError(f"pairwise_similarity needs two [n, d] embedding arrays, got {a.shape} "
                       f"and {b.shape}.")
    return similarity_lib.paired_cosine(a, b)

  def _embedded(self, a, b, languages, **options) -> tuple[np.ndarray, np.ndarray]:
    """Both sides as float32 [n, d]; sentences of the two sides share one encode pass
    unless their languages go through different towers."""
    if (isinstance(a, np.ndarray) or isinstance(b, np.ndarray)
        or self.tower_of(languages[0]) != self.tower_of(languages[1])):
      return tuple(np.asarray(x if isinstance(x, np.ndarray) else
                              self.encode(x, language=language, **options), np.float32)
                   for x, language in zip((a, b), languages))
    both = self.encode(list(a) + list(b), language=languages[0], **options)
    return both[:len(a)], both[len(a):]
