"""A SavedModel of `python -m vmsst.export` (or any keeping its contract) as an encoder.

Needs TensorFlow only (imported when one is loaded), not JAX: the graph holds
the tokenizer and the length buckets. What the export wrote beside the graph
(`assets.extra/`: its sequence length, a two-tower model's side-a languages,
the vocabulary) lets it count truncated sentences and pick a tower as a
checkpoint does.
"""

import json
from typing import Sequence

import numpy as np

from vmsst.base import files
from vmsst.base import run_directory
from vmsst.base import languages as languages_lib

# Where `python -m vmsst.export` leaves its metadata and vocabulary
# (export_formats.saved_model's EXTRA_DIR and METADATA_FILE; a test holds them equal;
# the vocabulary keeps its run-directory name, run_directory.VOCABULARY).
EXPORT_EXTRA_DIR = "assets.extra"
EXPORT_METADATA = "vmsst_export.json"
# A two-tower export's signature of tower b (export_formats.saved_model.SIDE_B_SIGNATURE), and
# side a's languages when its metadata predates `side_a_languages` (MomentumContrast's default).
EXPORT_SIDE_B, DEFAULT_SIDE_A = "serving_b", ("eng",)


class SavedModelEncoder:
  """A TF SavedModel whose `serving_default` maps strings to embeddings.

  The contract `python -m vmsst.export` writes: input a 1-D tf.string tensor
  named `text`, output `{"embeddings": float32 [n, d]}`; tokenization is
  inside the graph, so any SavedModel keeping this contract evaluates alike.
  An export of a two-tower model also has `serving_b` (tower b) and names
  side a's languages in its metadata; then `tower_of(language)` picks the
  signature, as `checkpoint.CheckpointEncoder` picks the tower.
  """

  def __init__(self, path: str, name: str | None = None):
    import tensorflow as tf  # pylint: disable=import-outside-toplevel
    import tensorflow_text  # pylint: disable=import-outside-toplevel,unused-import  # SentencepieceOp
    self._tf = tf
    loaded = tf.saved_model.load(path)
    if "serving_default" not in loaded.signatures:
      raise ValueError(f"{path} has no serving_default signature; export it with "
                       "`python -m vmsst.export` (strings in, {'embeddings': ...} out).")
    self._loaded = loaded  # keeps the signature's variables alive
    self._serve = {"a": loaded.signatures["serving_default"]}
    if EXPORT_SIDE_B in loaded.signatures:
      self._serve["b"] = loaded.signatures[EXPORT_SIDE_B]
    self.name = name or path.rstrip("/").split("/")[-1]
    metadata, self._pieces = _export_metadata(path)
    self.max_seq_length = metadata.get("sequence_length")
    self.normalized = bool(metadata.get("normalized", False))  # unit vectors: their int8 ranges
    self._side_a = frozenset(metadata.get("side_a_languages", DEFAULT_SIDE_A))

  def tower_of(self, language: str | None) -> str | None:
    """"a"/"b" for a two-tower export (language None: "a"); None for one tower."""
    if len(self._serve) == 1:
      return None
    return "a" if language is None else languages_lib.pair_side(language, self._side_a)

  def count_truncated(self, sentences: Sequence[str]) -> int | None:
    """Sentences longer than max_seq_length - 1 pieces plus EOS (None: not our export)."""
    if self._pieces is None:
      return None
    return sum(len(self._pieces.encode(s)) > self.max_seq_length - 1 for s in sentences)

  def encode(self, sentences: Sequence[str], side: str = "a") -> np.ndarray:
    """float32 [n, d]; `side` "b" through tower b's signature (two-tower exports only)."""
    if side not in self._serve:
      raise ValueError(f"{self.name} has no tower {side!r}: its signatures serve "
                       f"{sorted(self._serve)}.")
    outputs = self._serve[side](text=self._tf.constant(list(sentences), self._tf.string))
    if "embeddings" not in outputs:
      raise ValueError(f"the side-{side} signature of {self.name} returns {sorted(outputs)}, "
                       "not 'embeddings'.")
    return outputs["embeddings"].numpy().astype(np.float32)


def _export_metadata(path: str) -> tuple[dict, object | None]:
  """(metadata, SentencePiece processor) from what `python -m vmsst.export` wrote.

  Why: the graph cuts long sentences silently; knowing the length the
  export was traced with lets Encoder.max_seq_length and the truncation counts
  work for SavedModels as they do for checkpoints; a two-tower export's
  metadata names side a's languages. ({}, None) for a SavedModel written by
  something else.
  """
  extra = files.join(path, EXPORT_EXTRA_DIR)
  metadata, vocabulary = (files.join(extra, n) for n in (EXPORT_METADATA, run_directory.VOCABULARY))
  if not files.exists(metadata):
    return {}, None
  values = json.loads(files.read_text(metadata))
  values["sequence_length"] = int(values["sequence_length"])
  if not files.exists(vocabulary):
    return values, None
  import sentencepiece  # pylint: disable=import-outside-toplevel
  return values, sentencepiece.SentencePieceProcessor(model_proto=files.read_bytes(vocabulary))
