"""The sentence-transformers export embeds like `vmsst.Encoder`, in stock PyTorch.

A tiny trained model of each architecture (the original one as XLM-RoBERTa-XL,
the T5-switched one as MT5EncoderModel) is exported; a fresh process with
HF_HUB_OFFLINE, CPU torch and no vmsst, JAX or flax importable loads it with
`SentenceTransformer(OUT)` and `AutoModel.from_pretrained(OUT)` (no
trust_remote_code) and embeds 1,000 NTREX sentences of 125 languages, many cut
at the model's length. Every sentence must have cosine >= 0.9999 with
`Encoder.encode` and the same token ids as training's truncation.
"""

import json
import os
import pathlib
import subprocess
import sys

import numpy as np
import pytest

import vmsst
from vmsst.export_formats import huggingface as hf_export
from vmsst.encoding import restore
from vmsst.base.gin_utils import gin
from vmsst.base import text_files
from vmsst.model import initial_weights
from vmsst.model import tokens as tokens_lib
from vmsst.model.config import NetworkConfig

# Every test exports a model trained by a module fixture, most load it in a fresh process.
pytestmark = [pytest.mark.integration, pytest.mark.slow]

T5_SWITCHES = ["NetworkConfig.relative_attention = True", "NetworkConfig.rms_norm = True",
               "NetworkConfig.gated_mlp = True", "NetworkConfig.projection_bias = False",
               "NetworkConfig.scale_attention_logits = False"]

# Runs in a fresh interpreter: torch, transformers, sentence-transformers; vmsst,
# JAX and flax blocked, so the export cannot lean on them.
_TORCH_ONLY = r"""
import json, sys
BLOCKED = ("jax", "jaxlib", "flax", "vmsst", "tensorflow")
sys.modules.update(dict.fromkeys(BLOCKED))
import numpy as np
import torch
import transformers
from sentence_transformers import SentenceTransformer
args = sys.argv[1:]  # (export, sentences file, output) per export, all in this process
for export, sentences_file, output in zip(args[0::3], args[1::3], args[2::3]):
  sentences = json.load(open(sentences_file, encoding="utf-8"))
  model = SentenceTransformer(export, device="cpu")
  embeddings = model.encode(sentences, batch_size=64, convert_to_numpy=True)
  tokenizer = model.tokenizer
  ids = tokenizer(sentences, truncation=True, max_length=model.max_seq_length)["input_ids"]
  auto, loading = transformers.AutoModel.from_pretrained(export, output_loading_info=True)
  leaked = sorted(k for k, m in sys.modules.items() if m and k.split(".")[0] in BLOCKED)
  assert not leaked, leaked
  json.dump({"ids": ids, "auto_class": type(auto).__name__,
             "missing": sorted(loading["missing_keys"]),
             "unexpected": sorted(loading["unexpected_keys"]),
             "max_seq_length": model.max_seq_length}, open(output + ".json", "w"))
  np.save(output + ".npy", embeddings)
"""


def ntrex_sample(data_dir: pathlib.Path, per_language: int = 8) -> list[str]:
  """1,000 NTREX sentences: `per_language` of each language, past the first documents."""
  from vmsst_tasks.sources import pair_readers  # pylint: disable=import-outside-toplevel
  sentences = []
  for _, path in sorted(pair_readers.ntrex_files(data_dir).items()):
    sentences += text_files.read_lines(path)[300:300 + per_language]
  return sentences[:1000]


def train_tiny(data_dir, vocab_path, model_dir, objective: str, extra=()) -> pathlib.Path:
  import vmsst.training.loop  # pylint: disable=import-outside-toplevel
  import vmsst_testing  # pylint: disable=import-outside-toplevel
  vmsst_testing.configure_small_run(data_dir, vocab_path, model_dir, steps=3,
                                    objective=objective,
                                    extra=["train.evaluator = None", *extra])
  vmsst.training.loop.train()
  gin.clear_config()
  return model_dir


@pytest.fixture(scope="module")
def t5_model(data_dir, tiny_vocab_path, tmp_path_factory):
  """A 3-step Contrastive run with every T5 switch on (an MT5EncoderModel export)."""
  return train_tiny(data_dir, tiny_vocab_path, tmp_path_factory.mktemp("t5") / "run",
                    "contrastive", T5_SWITCHES)


@pytest.fixture(scope="module")
def sentences(data_dir):
  return ntrex_sample(data_dir)


@pytest.fixture(scope="module")
def original_export(tiny_model, tmp_path_factory):
  """(model_dir, export dir, metadata) of the tiny VMSST run (original architecture)."""
  output = tmp_path_factory.mktemp("original_export") / "st"
  return tiny_model[0], output, hf_export.export(str(tiny_model[0]), str(output))


@pytest.fixture(scope="module")
def t5_export(t5_model, tmp_path_factory):
  output = tmp_path_factory.mktemp("t5_export") / "st"
  return t5_model, output, hf_export.export(str(t5_model), str(output))


def load_all_in_torch(exports, work: pathlib.Path) -> list:
  """(embeddings, {token ids, AutoModel class, max_seq_length, ...}) of each (export_dir,
  sentences), from one fresh PyTorch process: each export is loaded from its own directory,
  so exports and towers need no process each."""
  args = []
  for i, (export_dir, sentences) in enumerate(exports):
    (work / f"sentences_{i}.json").write_text(json.dumps(sentences), encoding="utf-8")
    args += [str(export_dir), str(work / f"sentences_{i}.json"), str(work / f"out_{i}")]
  env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
         "CUDA_VISIBLE_DEVICES": ""}
  run = subprocess.run([sys.executable, "-c", _TORCH_ONLY, *args], cwd=work, env=env,
                       capture_output=True, text=True, timeout=600, check=False)
  assert run.returncode == 0, run.stderr[-3000:]
  return [(np.load(work / f"out_{i}.npy"),
           json.loads((work / f"out_{i}.json").read_text(encoding="utf-8")))
          for i in range(len(exports))]


@pytest.fixture(scope="module")
def torch_loaded(original_export, t5_export, sentences, tmp_path_factory):
  """{fixture name: what `load_all_in_torch` gives} for both architectures' exports, loaded
  in one fresh PyTorch process."""
  names = ("original_export", "t5_export")
  loaded = load_all_in_torch([(original_export[1], sentences), (t5_export[1], sentences)],
                             tmp_path_factory.mktemp("torch"))
  return dict(zip(names, loaded))


def assert_same_embeddings(model_dir, loaded, sentences, architecture):
  """Per-sentence cosine >= 0.9999 with Encoder.encode, and identical truncated ids;
  `loaded` is `load_all_in_torch`'s (embeddings, info) of the export, `architecture` the
  class AutoModel loads."""
  embeddings, info = loaded
  assert info["auto_class"] == architecture
  assert not info["missing"] and not info["unexpected"], info  # every weight, nothing fresh
  reference = vmsst.Encoder.from_checkpoint(str(model_dir), dtype="float32").encode(sentences)
  cosine = np.sum(embeddings * reference, -1) / (
      np.linalg.norm(embeddings, axis=-1) * np.linalg.norm(reference, axis=-1))
  print(f"{architecture}: min cosine {cosine.min():.7f} over {len(sentences)} sentences")
  assert cosine.min() >= 0.9999, np.argsort(cosine)[:5]
  restored = restore.restore(str(model_dir))
  length = restored.sequence_length
  assert info["max_seq_length"] == length
  tokens, mask = tokens_lib.tokenize_batch(restored.vocabulary, sentences, length)
  expected = [list(row[:n]) for row, n in zip(tokens, mask.sum(1))]
  assert info["ids"] == expected
  cut = tokens_lib.count_truncated(restored.vocabulary, sentences, length)
  assert cut > 50, cut  # the test covers truncation: many sentences exceed the length
  return cosine


def test_original_architecture_exports_as_xlm_roberta_xl(original_export, torch_loaded,
                                                         sentences):
  model_dir, export_dir, metadata = original_export
  assert metadata["architecture"] == "xlm-roberta-xl"
  assert not list(export_dir.rglob("*.bin"))  # safetensors only
  assert_same_embeddings(model_dir, torch_loaded["original_export"], sentences,
                         "XLMRobertaXLModel")
  card = (export_dir / "README.md").read_text(encoding="utf-8")
  assert f"objective **VMSST**, {metadata['step']} steps" in card
  assert "CC BY-SA 4.0" in card  # NTREX's license, read from its SOURCE.md


def test_t5_switched_network_exports_as_mt5_encoder(t5_export, torch_loaded, sentences):
  model_dir, _, metadata = t5_export
  assert metadata["architecture"] == "mt5"
  # AutoModel gives MT5Model (its decoder has no layers); sentence-transformers MT5EncoderModel.
  assert_same_embeddings(model_dir, torch_loaded["t5_export"], sentences, "MT5Model")


@pytest.mark.parametrize("which", ["original_export", "t5_export"])
def test_an_export_is_init_params_giving_back_the_trained_encoder(which, request):
  """`train.init_params = OUT`: the semantic path comes back exactly (fine-tuning here)."""
  import jax  # pylint: disable=import-outside-toplevel
  import vmsst_testing  # pylint: disable=import-outside-toplevel
  from vmsst.model import param_files  # pylint: disable=import-outside-toplevel
  model_dir, export_dir, _ = request.getfixturevalue(which)
  restored = restore.restore(str(model_dir))
  fresh = vmsst_testing.init_params(restored.model, seed=7)
  loaded = param_files.flatten(initial_weights.load(str(export_dir), fresh))
  trained = param_files.flatten(jax.device_get(restored.params))
  semantic = [k for k in trained if k.startswith(("semantic_", "token_embed/"))]
  assert "semantic_head/mu/kernel" in semantic
  for name in semantic:
    if name.startswith("semantic_head/logvar"):
      continue  # not exported: μ_sem never reads it
    np.testing.assert_array_equal(np.asarray(loaded[name]), trained[name], err_msg=name)
  untouched = param_files.flatten(fresh)["semantic_head/logvar/kernel"]
  np.testing.assert_array_equal(np.asarray(loaded["semantic_head/logvar/kernel"]), untouched)


def test_a_network_no_stock_architecture_computes_is_refused_naming_the_publishable_size():
  with pytest.raises(hf_export.Unsupported, match="mt5_base.gin"):
    hf_export.architecture(NetworkConfig(rms_norm=True))
  with pytest.raises(hf_export.Unsupported, match="projection_bias"):
    hf_export.architecture(NetworkConfig(relative_attention=True, rms_norm=True,
                                         gated_mlp=True, scale_attention_logits=False))
  assert hf_export.architecture(NetworkConfig()) == "xlm-roberta-xl"


@pytest.fixture(scope="module")
def two_tower_export(data_dir, tiny_vocab_path, tmp_path_factory):
  """A 3-step dual momentum contrast run with a tower per side, exported."""
  model_dir = train_tiny(data_dir, tiny_vocab_path, tmp_path_factory.mktemp("moco") / "run",
                         "momentum_contrast", ["MomentumContrast.separate_towers = True"])
  output = tmp_path_factory.mktemp("moco_export") / "st"
  return model_dir, output, hf_export.export(str(model_dir), str(output))


def test_momentum_contrast_exports_each_tower_for_its_languages(two_tower_export, data_dir,
                                                                tmp_path):
  from vmsst_tasks.sources import pair_readers  # pylint: disable=import-outside-toplevel
  model_dir, export_dir, metadata = two_tower_export
  assert sorted(metadata["towers"]) == [".", hf_export.TOWER_B_DIR]
  encoder = vmsst.Encoder.from_checkpoint(str(model_dir), dtype="float32")
  files = pair_readers.ntrex_files(data_dir)
  towers = (("", "eng"), (hf_export.TOWER_B_DIR, "deu"))
  texts = {language: text_files.read_lines(files[language])[:100] for _, language in towers}
  loaded = load_all_in_torch([(export_dir / subdir, texts[language])
                              for subdir, language in towers], tmp_path)
  for (_, language), (embeddings, _) in zip(towers, loaded):
    reference = encoder.encode(texts[language], language=language)
    cosine = np.sum(embeddings * reference, -1) / (
        np.linalg.norm(embeddings, axis=-1) * np.linalg.norm(reference, axis=-1))
    assert cosine.min() >= 0.9999, (language, cosine.min())


def test_a_distillation_student_exports_its_teacher_head_after_mu():
  import vmsst_testing  # pylint: disable=import-outside-toplevel
  from vmsst.objectives import distillation  # pylint: disable=import-outside-toplevel
  model = distillation.Distillation(vmsst_testing.TINY, teacher_dim=48)
  params = vmsst_testing.init_params(model)
  (mu, mu_bias), (head, head_bias) = hf_export.heads(model, params, "a")
  assert mu.shape == (32, 32) and mu_bias.shape == (32,)
  assert head.shape == (48, 32) and head_bias is None


def test_huggingface_format_is_the_same_directory_with_a_transformers_card(
    original_export, tmp_path):
  """One export serves every loader: --format=huggingface writes the sentence-transformers
  modules too (SentenceTransformer(PATH) on it used to mean-pool without μ_sem), and differs
  only in the card's first code block and library_name."""
  model_dir, st_dir, _ = original_export
  metadata = hf_export.export(str(model_dir), str(tmp_path / "hf"), fmt="huggingface")
  assert metadata["format"] == "huggingface"
  listing = {d: sorted(str(p.relative_to(d)) for p in d.rglob("*") if p.is_file())
             for d in (st_dir, tmp_path / "hf")}
  assert listing[st_dir] == listing[tmp_path / "hf"] and "modules.json" in listing[st_dir]
  for name in listing[st_dir]:
    if name not in ("README.md", hf_export.METADATA_FILE):
      assert (st_dir / name).read_bytes() == (tmp_path / "hf" / name).read_bytes(), name
  card = (tmp_path / "hf" / "README.md").read_text(encoding="utf-8")
  assert "library_name: transformers" in card
  assert card.index("AutoProcessor") < card.index("SentenceTransformer(\"PATH\")")


def test_query_tower_exports_the_tuned_tower_and_the_frozen_document_tower(
    data_dir, tiny_vocab_path, tiny_model, sentences, tmp_path):
  init_dir = tiny_model[0]
  model_dir = train_tiny(data_dir, tiny_vocab_path, tmp_path / "query_tower", "query_tower",
                         [f"INIT_MODEL_DIR = '{init_dir}'"])
  metadata = hf_export.export(str(model_dir), str(tmp_path / "st"))
  assert sorted(metadata["towers"]) == [".", hf_export.DOCUMENT_TOWER_DIR]
  texts = sentences[::10]
  # The document tower is the starting model, frozen; the root is the tuned query tower.
  towers = (("", model_dir), (hf_export.DOCUMENT_TOWER_DIR, init_dir))
  loaded = load_all_in_torch([(tmp_path / "st" / subdir, texts) for subdir, _ in towers],
                             tmp_path)
  for (subdir, reference_dir), (embeddings, _) in zip(towers, loaded):
    reference = vmsst.Encoder.from_checkpoint(str(reference_dir), dtype="float32").encode(texts)
    cosine = np.sum(embeddings * reference, -1) / (
        np.linalg.norm(embeddings, axis=-1) * np.linalg.norm(reference, axis=-1))
    assert cosine.min() >= 0.9999, (subdir, cosine.min())


def test_a_published_export_fine_tunes_here(t5_export, data_dir, tiny_vocab_path, tmp_path):
  """`train.init_params = OUT` (an export, no checkpoint): the run starts from its encoder."""
  import vmsst.training.loop  # pylint: disable=import-outside-toplevel
  import vmsst_testing  # pylint: disable=import-outside-toplevel
  _, export_dir, _ = t5_export
  vmsst_testing.configure_small_run(
      data_dir, tiny_vocab_path, tmp_path / "tuned", steps=2, objective="contrastive",
      extra=["train.evaluator = None", f"train.init_params = '{export_dir}'", *T5_SWITCHES])
  result = vmsst.training.loop.train()
  gin.clear_config()
  assert len(result["loss_history"]) >= 1
  assert all(np.isfinite(loss) for _, loss in result["loss_history"])
