"""The sentence-transformers export is MTEB-ready: mteb reads its metadata and scores it
as the project's own suites do.

mteb (the `test` extra) evaluates a model through its loader and metadata. The
tiny VMSST run is exported; mteb's own ModelMeta is built from the loaded
directory the way `mteb.evaluate` builds it for a SentenceTransformer, and the
card's `language:` goes through mteb's own converter. Then mteb's evaluation
API runs a bitext-mining task (Tatoeba deu-eng) and an STS task (STSb test),
both built from the local files (no download), and its figures must equal
vmsst/evaluation's Tatoeba and STSb suites on the same data, run on the
checkpoint, to rounding.
"""

import json

import numpy as np
import pytest

from vmsst.export_formats import huggingface as hf_export
from vmsst.base import sts_files
from vmsst.encoding import checkpoint
from vmsst.encoding import protocol
from vmsst.encoding import restore
from vmsst.evaluation import sts
from vmsst.evaluation import tatoeba

pytestmark = [pytest.mark.integration, pytest.mark.slow]
mteb = pytest.importorskip("mteb", reason="pip install -e '.[test]' installs mteb")


@pytest.fixture(scope="module")
def exported(tiny_model, tmp_path_factory):
  """(model_dir, export dir, metadata) of the tiny VMSST run as sentence-transformers."""
  output = tmp_path_factory.mktemp("mteb") / "st"
  return tiny_model[0], output, hf_export.export(str(tiny_model[0]), str(output))


@pytest.fixture(scope="module")
def loaded(exported):
  from sentence_transformers import SentenceTransformer  # pylint: disable=import-outside-toplevel
  return SentenceTransformer(str(exported[1]), device="cpu")


@pytest.fixture(scope="module")
def project_encoder(exported):
  """The project's suites' encoder of the same run (float32, as the export)."""
  restored = restore.restore(str(exported[0]), dtype="float32")
  return protocol.UniqueSentences(checkpoint.CheckpointEncoder(restored, name="tiny"),
                                  progress=False)


def test_mteb_reads_the_exports_metadata(exported, loaded):
  """What mteb's loader reads: ModelMeta off the SentenceTransformer, languages off the card."""
  # pylint: disable=import-outside-toplevel
  from huggingface_hub import ModelCard
  from mteb.languages.iso_mappings import _hf_langs_to_iso_lang_scripts  # the card's reader
  from mteb.models.model_meta import ModelMeta, ScoringFunction
  _, export_dir, metadata = exported
  meta = ModelMeta.from_sentence_transformer_model(loaded)
  assert meta.embed_dim == metadata["dimension"] == loaded.get_embedding_dimension()
  assert meta.similarity_fn_name == ScoringFunction.COSINE
  assert meta.max_tokens == metadata["max_seq_length"]
  card = ModelCard.load(str(export_dir / "README.md")).data
  declared = metadata["mteb"]
  assert card.language == declared["languages"] and "deu" in card.language  # NTREX + Multi30k
  assert _hf_langs_to_iso_lang_scripts(card.language)  # codes mteb maps to code-script
  assert "deu-Latn" in _hf_langs_to_iso_lang_scripts(card.language)
  assert card.datasets == declared["training_datasets"] and "ntrex128" in card.datasets
  recorded = json.loads((export_dir / hf_export.METADATA_FILE).read_text(encoding="utf-8"))
  assert recorded["mteb"]["embed_dim"] == meta.embed_dim  # no nesting: the width
  # Every field is one mteb's ModelMeta accepts (its own validation).
  filled = meta.model_copy(update={"languages": _hf_langs_to_iso_lang_scripts(card.language),
                                   "training_datasets": set(card.datasets)})
  ModelMeta.model_validate(filled.model_dump())


def _task_args(name: str, lang: list[str]) -> dict:
  return {"name": name, "description": f"{name} from local files (vmsst's tests)",
          "reference": "https://github.com/embeddings-benchmark/mteb",
          "dataset": {"path": "local", "revision": "local"}, "category": "t2t",
          "eval_splits": ["test"], "eval_langs": lang, "date": ("2020-01-01", "2020-01-01"),
          "dialect": ["Written"], "domains": [], "task_subtypes": [], "license": "cc-by-4.0",
          "annotations_creators": "derived", "modalities": ["text"],
          "sample_creation": "found", "bibtex_citation": ""}


def local_tasks(data_dir):
  """mteb tasks over Tatoeba deu-eng and STSb test, read from `data_dir` (no download)."""
  # pylint: disable=import-outside-toplevel
  from datasets import Dataset, DatasetDict
  from mteb.abstasks.sts import AbsTaskSTS
  from mteb.abstasks.task_metadata import TaskMetadata
  from mteb.abstasks.text.bitext_mining import AbsTaskBitextMining
  german, english = tatoeba.read_pairs(data_dir / "tatoeba" / "v1", "deu")
  stsb = sts_files.read_stsb(data_dir / "stsb", "test")

  class LocalTatoeba(AbsTaskBitextMining):
    metadata = TaskMetadata(type="BitextMining", main_score="accuracy",
                            **_task_args("LocalTatoebaDeuEng", ["deu-Latn", "eng-Latn"]))

    def load_data(self, **_):
      self.dataset = DatasetDict({"test": Dataset.from_dict(
          {"sentence1": german, "sentence2": english})})
      self.data_loaded = True

  class LocalSTSb(AbsTaskSTS):
    metadata = TaskMetadata(type="STS", main_score="cosine_spearman",
                            **_task_args("LocalSTSbTest", ["eng-Latn"]))

    def load_data(self, **_):
      self.dataset = DatasetDict({"test": Dataset.from_dict(
          {"sentence1": stsb.sentences1, "sentence2": stsb.sentences2,
           "score": [float(g) for g in stsb.gold]})})
      self.data_loaded = True

  return LocalTatoeba(), LocalSTSb()


def test_mteb_scores_the_export_as_the_projects_suites(loaded, project_encoder, data_dir,
                                                       tmp_path):
  bitext, stsb = local_tasks(data_dir)
  result = mteb.evaluate(loaded, tasks=[bitext, stsb], cache=None, show_progress_bar=False)
  scores = {r.task_name: r.scores["test"][0] for r in result.task_results}
  ours_tatoeba = tatoeba.evaluate(project_encoder, data_dir / "tatoeba" / "v1",
                                  languages=["deu"])["deu"]
  ours_stsb = sts.evaluate_stsb(project_encoder, data_dir / "stsb", splits=("test",))["test"]
  mined, similar = scores["LocalTatoebaDeuEng"], scores["LocalSTSbTest"]
  print("mteb:", mined["accuracy"], similar["cosine_spearman"], similar["cosine_pearson"],
        "vmsst:", ours_tatoeba["xx2en"], ours_stsb["spearman"], ours_stsb["pearson"])
  # mteb mines sentence1 (German) against sentence2 (English): the suite's xx2en.
  assert 100 * mined["accuracy"] == pytest.approx(ours_tatoeba["xx2en"], abs=0.1)
  assert 100 * similar["cosine_spearman"] == pytest.approx(ours_stsb["spearman"], abs=0.01)
  assert 100 * similar["cosine_pearson"] == pytest.approx(ours_stsb["pearson"], abs=0.01)
  assert np.isfinite(ours_stsb["spearman"])
