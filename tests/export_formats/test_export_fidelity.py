"""Every export format, loaded by every loader that accepts it, gives `Encoder.encode`'s vectors.

For each objective the project trains (each encoder shape an export meets: one
tower with μ_sem, a distillation student's teacher head after μ_sem, two towers
by language side, a tuned query tower beside its frozen document tower, the
T5-switched network as MT5EncoderModel) a 2-step model is trained on real data
and exported in every format, and loaded by every loader a user reaches for:

  sentence-transformers, huggingface  (one directory; the format picks the card's
      first loader) every code block of the export's README.md (its model card:
      sentence-transformers, and plain transformers with AutoProcessor, the
      encoder class, mean pooling and the Dense modules) run as written, only PATH
      and the example sentences replaced; `SentenceTransformer(PATH)` and mteb's
      loader on every tower. Each must give cosine >= 0.9999 to `Encoder.encode` on
      NTREX sentences of ten languages (many cut at the model's length);
  savedmodel  `import tensorflow_text; tf.saved_model.load(OUT)`, the
      signatures export_formats/saved_model.py's docstring names (serving_default,
      serving_b); SentenceTransformer, mteb and AutoModel refuse the directory
      naming --format=sentence-transformers.

A network no stock architecture computes is refused by the transformers formats
(tests/export_formats/test_hf_export.py, and the last test here).
"""

import json

import export_loading
import numpy as np
import pytest

import vmsst
from vmsst.export_formats import huggingface as hf_export
from vmsst.base.gin_utils import gin
from vmsst.base import text_files
from vmsst.encoding import restore
from vmsst.model import tokens as tokens_lib

pytestmark = [pytest.mark.integration, pytest.mark.slow]

T5_SWITCHES = ["NetworkConfig.relative_attention = True", "NetworkConfig.rms_norm = True",
               "NetworkConfig.gated_mlp = True", "NetworkConfig.projection_bias = False",
               "NetworkConfig.scale_attention_logits = False"]
# objective -> the gin/runs/<objective>_cpu.gin run file and what this test adds to it
OBJECTIVES = {
    "vmsst": ("vmsst", []),
    "contrastive_t5": ("contrastive", T5_SWITCHES),
    "vmsst_contrastive": ("vmsst_contrastive", []),
    "bitranslation": ("bitranslation", []),
    "momentum_contrast": ("momentum_contrast", ["MomentumContrast.separate_towers = True"]),
    "distillation": ("distillation", ["NetworkConfig.emb_dim = 32", "NetworkConfig.num_heads = 2",
                                      "TEACHER_DIM = 64", "Teacher.encoder = None"]),
    "query_tower": ("query_tower", []),
    "entity_contrastive": ("entity_contrastive", ["BATCH_SIZE = 16"]),
}
LANGUAGES = ("deu", "fra", "rus", "arb", "hin", "jpn", "ell", "swa", "tur", "eng")


@pytest.fixture(scope="module")
def sentences(data_dir) -> dict[str, list[str]]:
  """Eight NTREX sentences of each of ten languages, past the first documents."""
  from vmsst_tasks.sources import pair_readers  # pylint: disable=import-outside-toplevel
  paths = pair_readers.ntrex_files(data_dir)
  return {code: text_files.read_lines(paths[code])[300:308] for code in LANGUAGES}


def _objective_bindings(name, tiny_model, data_dir, tmp_path) -> list[str]:
  """What each objective needs beyond the pair data, made from local files."""
  if name == "distillation":  # the tiny VMSST run is the teacher: 64 dims; head 32 -> 64
    # Two steps read a few batches: the teacher encodes those sources, not every one.
    return [f"Teacher.model_dir = '{tiny_model[0]}'",
            f"TEACHER_CACHE_DIR = '{tmp_path / 'teacher_cache'}'",
            "distillation_tasks.max_sources = 64"]
  if name == "query_tower":
    return [f"INIT_MODEL_DIR = '{tiny_model[0]}'"]
  if name == "entity_contrastive":
    from vmsst_tasks.sources import wikipedia  # pylint: disable=import-outside-toplevel
    entity_dir = tmp_path / "entities"
    dump = data_dir / "wiki_entity_sample" / "enwiki-pages-articles-sample.xml.bz2"
    wikipedia.build(str(dump), str(entity_dir), heldout_fraction=0.5, min_links=0)
    return [f"ENTITY_DIR = '{entity_dir}'"]
  return []


@pytest.fixture(scope="module")
def run_data(data_dir, small_data_dir, tmp_path_factory):
  """What the 2-step runs read: the first lines of NTREX-128 and Multi30k (`small_data_dir`),
  STS-B (the query tower's triplets) beside them.

  Two steps take two batches: reading and pairing the whole corpora (4 of a run's 19 s of
  CPU) changes nothing an export sees; the loaders' sentences are `sentences`, from the
  whole files.
  """
  root = tmp_path_factory.mktemp("run_data")
  for path in small_data_dir.iterdir():
    (root / path.name).symlink_to(path)
  (root / "stsb").symlink_to(data_dir / "stsb")
  return root


@pytest.fixture(scope="module", params=sorted(OBJECTIVES))
def trained(request, data_dir, run_data, tiny_vocab_path, tiny_model, tmp_path_factory):
  """(objective, model_dir, tmp dir, towers) of a 2-step run of each objective."""
  import vmsst.training.loop  # pylint: disable=import-outside-toplevel
  import vmsst_testing  # pylint: disable=import-outside-toplevel
  name = request.param
  run_file, extra = OBJECTIVES[name]
  work = tmp_path_factory.mktemp(name)
  if name == "vmsst":  # the session's tiny VMSST run is this run (4 steps, not 2): no retraining
    return name, tiny_model[0], work, _towers(tiny_model[0], tiny_model[0])
  vmsst_testing.configure_small_run(
      run_data, tiny_vocab_path, work / "run", steps=2, objective=run_file,
      extra=["train.evaluator = None", *extra,
             *_objective_bindings(name, tiny_model, data_dir, work)])
  vmsst.training.loop.train()
  gin.clear_config()
  return name, work / "run", work, _towers(work / "run", tiny_model[0])


def _towers(model_dir, init_dir) -> list[tuple[str, str, str, tuple[str, ...]]]:
  """(subdirectory, SavedModel signature, model dir of the reference, languages) per tower.

  A query-tower run's document tower is its INIT_MODEL_DIR (`init_dir`), frozen.
  """
  model = restore.restore(str(model_dir)).model
  if "b" in model.sides:
    side_a = tuple(c for c in LANGUAGES if model.side_of_language(c) == "a")
    side_b = tuple(c for c in LANGUAGES if c not in side_a)
    return [("", "serving_default", str(model_dir), side_a),
            (hf_export.TOWER_B_DIR, "serving_b", str(model_dir), side_b)]
  out = [("", "serving_default", str(model_dir), LANGUAGES)]
  if type(model).__name__ == "QueryTower":
    out.append((hf_export.DOCUMENT_TOWER_DIR, "", str(init_dir), LANGUAGES))
  return out


_REFERENCES: dict[tuple, np.ndarray] = {}


def _reference(model_dir: str, texts: dict[str, list[str]]) -> np.ndarray:
  """`Encoder.encode`'s vectors, computed once per model and sentences (every format of a
  run compares with the same reference; each new encoder compiles its length buckets)."""
  key = (model_dir, json.dumps(texts))
  if key not in _REFERENCES:
    encoder = vmsst.Encoder.from_checkpoint(model_dir, dtype="float32")
    _REFERENCES[key] = np.concatenate([encoder.encode(texts[c], language=c) for c in texts])
  return _REFERENCES[key]


@pytest.mark.parametrize("fmt", hf_export.FORMATS)
def test_every_loader_of_either_format_gives_the_embedding(trained, fmt, sentences):
  """The card's code blocks, SentenceTransformer(PATH) and mteb's loader, on every tower."""
  name, model_dir, work, towers = trained
  output = work / fmt
  hf_export.export(str(model_dir), str(output), fmt=fmt)
  card = (output / "README.md").read_text(encoding="utf-8")
  assert len(export_loading.card_blocks(card)) == 2, card  # sentence-transformers, transformers
  for subdir, _, reference_dir, codes in towers:
    texts = {c: sentences[c] for c in codes}
    flat = sum(texts.values(), [])
    reference = _reference(reference_dir, texts)
    if subdir:  # another tower: the card's code on the subdirectory its Towers section names
      assert f"`{subdir}`" in card, card
    where = f"{name} {fmt} {subdir or '.'}"
    for i, scope in enumerate(export_loading.run_card(output / subdir, flat, card)):
      if "batch" in scope:  # the card tokenizes itself: through the entry point it names
        assert_training_ids(model_dir, flat, scope["batch"])
      export_loading.assert_close(scope["vectors"], reference, f"{where} card block {i}")
    export_loading.assert_close(export_loading.sentence_transformer(output / subdir).encode(flat),
                                reference, f"{where} SentenceTransformer")
    mteb_model = export_loading.mteb_model(output / subdir)
    export_loading.assert_close(mteb_model.model.encode(flat), reference, f"{where} mteb")


def assert_training_ids(model_dir, texts: list[str], batch) -> None:
  """The card's tokenizer entry point reads the ids training's truncation gives."""
  restored = restore.restore(str(model_dir))
  tokens, mask = tokens_lib.tokenize_batch(restored.vocabulary, texts, restored.sequence_length)
  got, got_mask = batch["input_ids"].numpy(), batch["attention_mask"].numpy()
  assert [list(r[:n]) for r, n in zip(got, got_mask.sum(1))] == [
      list(r[:n]) for r, n in zip(tokens, mask.sum(1))]


def test_the_saved_model_gives_the_embedding(trained, sentences):
  """`import tensorflow_text; tf.saved_model.load(OUT)`: each signature, its tower."""
  import tensorflow as tf  # pylint: disable=import-outside-toplevel
  import tensorflow_text  # pylint: disable=import-outside-toplevel,unused-import
  from vmsst.export_formats import saved_model as export  # pylint: disable=import-outside-toplevel
  name, model_dir, work, towers = trained
  output = work / "savedmodel"
  export.export(str(model_dir), str(output))
  loaded = tf.saved_model.load(str(output))
  for _, signature, reference_dir, codes in towers:
    if not signature:
      continue  # the query tower's document tower is its own SavedModel, exported from its run
    texts = {c: sentences[c] for c in codes}
    got = loaded.signatures[signature](text=tf.constant(sum(texts.values(), [])))["embeddings"]
    export_loading.assert_close(got.numpy(), _reference(reference_dir, texts),
                                f"{name} savedmodel {signature}")
  if name == "vmsst":  # the transformers-side loaders refuse it, naming the format they read
    for loader, message in export_loading.refusals(output).items():
      assert "--format=sentence-transformers" in message, (loader, message)


@pytest.mark.parametrize("config", [{"rms_norm": True}, {"num_heads": 3, "head_dim": 16}])
def test_a_network_no_stock_architecture_computes_is_refused_naming_the_savedmodel(config):
  """The transformers formats refuse (one line: export.py makes it a `UserError`) and
  name the format that gives this network's embedding."""
  from vmsst.model.config import NetworkConfig  # pylint: disable=import-outside-toplevel
  with pytest.raises(hf_export.Unsupported) as refused:
    hf_export.architecture(NetworkConfig(**config))
  assert "--format=savedmodel" in str(refused.value) and "\n" not in str(refused.value)
