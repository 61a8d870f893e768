"""Loading an export the ways its users do: the model card's code blocks, sentence-transformers,
mteb's loader, transformers' AutoModel; and checking what each one gives.

Shared by the export tests (tests/export_formats/): each runs a loader as written, in this
process, and compares its vectors with `Encoder.encode`'s.
"""

import json
import pathlib
import re

import numpy as np

from vmsst.export_formats import model_card


def card_blocks(card: str) -> list[str]:
  """The model card's python code blocks, in order."""
  return re.findall(r"```python\n(.*?)```", card, re.S)


def run_card(export_dir: pathlib.Path, texts: list[str], card: str | None = None) -> list[dict]:
  """Runs every python block of the card as written, PATH being `export_dir` and the example
  sentences `texts`. Returns each block's variables (`vectors`; `batch` where it tokenizes)."""
  card = card or (export_dir / "README.md").read_text(encoding="utf-8")
  scopes = []
  for code in card_blocks(card):
    assert model_card.SENTENCES in code, code
    code = code.replace(model_card.SENTENCES, f"sentences = {json.dumps(texts)}")
    scope: dict = {}
    exec(compile(code.replace("PATH", str(export_dir)), "README.md", "exec"), scope)  # pylint: disable=exec-used
    scopes.append(scope)
  return scopes


def as_numpy(vectors) -> np.ndarray:
  return np.asarray(vectors.numpy() if hasattr(vectors, "numpy") else vectors, np.float32)


def assert_close(vectors, reference: np.ndarray, what: str) -> None:
  """Every row's cosine with the reference's is >= 0.9999, at the reference's shape."""
  vectors = as_numpy(vectors)
  assert vectors.shape == reference.shape, (what, vectors.shape, reference.shape)
  cosine = np.sum(vectors * reference, -1) / (
      np.linalg.norm(vectors, axis=-1) * np.linalg.norm(reference, axis=-1))
  print(f"{what}: min cosine {cosine.min():.7f} over {len(cosine)} sentences")
  assert cosine.min() >= 0.9999, (what, cosine.min(), np.argsort(cosine)[:5])


def sentence_transformer(export_dir: pathlib.Path, **kwargs):
  from sentence_transformers import SentenceTransformer  # pylint: disable=import-outside-toplevel
  return SentenceTransformer(str(export_dir), device="cpu", **kwargs)


def mteb_model(export_dir: pathlib.Path, **kwargs):
  """The model mteb evaluates, loaded as mteb's own loader loads a sentence-transformers
  directory (`SentenceTransformerEncoderWrapper`; `embed_dim` is its truncate_dim)."""
  # pylint: disable=import-outside-toplevel
  from mteb.models.sentence_transformer_wrapper import SentenceTransformerEncoderWrapper
  return SentenceTransformerEncoderWrapper(str(export_dir), device="cpu", **kwargs)


def refusals(directory: pathlib.Path) -> dict[str, str]:
  """Each transformers-side loader's error on `directory` (a loader that loads it fails here)."""
  import transformers  # pylint: disable=import-outside-toplevel
  loaders = {"SentenceTransformer": sentence_transformer, "mteb": mteb_model,
             "AutoModel": lambda d: transformers.AutoModel.from_pretrained(str(d))}
  out = {}
  for name, load in loaders.items():
    try:
      load(directory)
    except (ValueError, OSError) as e:
      out[name] = str(e)
    else:
      raise AssertionError(f"{name} loaded {directory}")
  return out


def int8_agreement(theirs: np.ndarray, ours: np.ndarray) -> float:
  """The share of equal int8 codes, after checking none differs by more than one bucket
  (PyTorch's and XLA's float32 round differently near a bucket's edge)."""
  assert theirs.dtype == ours.dtype == np.int8 and theirs.shape == ours.shape
  assert np.abs(theirs.astype(np.int16) - ours.astype(np.int16)).max() <= 1
  return float(np.mean(theirs == ours))
