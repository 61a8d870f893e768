"""The README.md (model card) of a transformers / sentence-transformers export.

Everything in it is read from the run's directory, so the card cannot drift
from the run: the objective, step and network from model.json, the data from
config.gin (its DATA_DIR and the task or mixture it trained on), the
held-out retrieval the training loop logged (TensorBoard events under
MODEL_DIR/tensorboard), and each data set's license line from its SOURCE.md
next to the data.
"""

import json
import re
from typing import Any, Mapping

from vmsst.base import files
from vmsst.base import run_directory

# Data folder -> the words of a task or mixture name that read it (tasks/registry/ names).
DATA_OF_TASK = {"ntrex128": ("ntrex",), "multi30k": ("multi30k",), "stsb": ("stsb",),
                "stsb-multi-mt": ("stsb",), "wiki_entity_sample": ("entit",),
                "xnli_de": ("nli",)}


def _bindings(config: str) -> dict[str, str]:
  """`NAME = value` lines of a gin config (macros and bindings), last one wins."""
  out = {}
  for line in config.splitlines():
    if m := re.match(r"^([A-Za-z_][\w.]*)\s*=\s*(.+)$", line.strip()):
      out[m.group(1)] = m.group(2).strip()
  return out


def training_data(model_dir: str) -> tuple[str, dict[str, str]]:
  """(the task or mixture trained on, {data folder: its SOURCE.md license line})."""
  path = run_directory.of(model_dir).config
  if not files.exists(path):
    return "unknown (no config.gin in the model directory)", {}
  bindings = _bindings(files.read_text(path))
  task = next((v.strip("'\"") for k, v in bindings.items()
               if k.endswith(("mixture_name", "mixture_or_task_name", "MIXTURE_OR_TASK",
                              "TASK"))), "unknown")
  data_dir = bindings.get("DATA_DIR", "").strip("'\"")
  licenses = {}
  for folder, words in DATA_OF_TASK.items():
    if any(w in task.lower() for w in words) or (folder == "ntrex128" and "mixture" in task):
      licenses[folder] = _license(files.join(data_dir, folder, "SOURCE.md"))
  return task, licenses


def _license(source_md: str) -> str:
  if not files.exists(source_md):
    return f"see {source_md} (not found when exporting)"
  for line in files.read_text(source_md).splitlines():
    if "License:" in line:
      return line.split("License:**", 1)[-1].strip()
  return f"no license line in {source_md}"


def heldout(model_dir: str) -> dict[str, float]:
  """Held-out retrieval at the last evaluation, by set (empty if none was logged)."""
  import logging  # pylint: disable=import-outside-toplevel
  logging.getLogger("tensorboard").setLevel(logging.WARNING)  # its reader narrates each file
  try:
    from vmsst.evaluation import logged_curves  # pylint: disable=import-outside-toplevel
    return logged_curves.final_values(logged_curves.read_curves(model_dir))
  except (FileNotFoundError, ImportError):
    return {}


def _transformers_note(metadata: Mapping[str, Any]) -> list[str]:
  """How each loader reads this directory: the same embedding through either."""
  if metadata["architecture"] == "mt5":
    auto = ("`AutoModel.from_pretrained` loads an `MT5Model` whose decoder has no layers "
            "(use `.encoder`), or load `MT5EncoderModel`; `AutoTokenizer` loads the "
            "SentencePiece tokenizer.")
  else:
    auto = ("`AutoModel.from_pretrained` loads an `XLMRobertaXLModel`; load the "
            "SentencePiece tokenizer with `AutoProcessor.from_pretrained` (as "
            "sentence-transformers does) or `SpeechT5Tokenizer`.")
  return ["`SentenceTransformer(PATH)` (and mteb, which loads through it) gives the "
          "embedding; so does plain transformers: the mean of `last_hidden_state` over the "
          "real tokens (EOS included), then each Dense module `modules.json` lists, as the "
          "second code block does. " + auto, ""]


SENTENCES = 'sentences = ["Ein Mann fährt Fahrrad.", "A man rides a bike."]'


def usage(metadata: Mapping[str, Any]) -> list[str]:
  """The card's code blocks, one per loader, each ending with `vectors`; the format's
  own loader first.

  tests/export_formats/test_export_fidelity.py runs each as written (PATH replaced), so
  what the card shows is what is tested.
  """
  blocks = [_sentence_transformers_code(metadata), _transformers_code(metadata)]
  if metadata["format"] == "huggingface":
    blocks.reverse()
  return blocks[0] + [""] + blocks[1]


def _sentence_transformers_code(metadata: Mapping[str, Any]) -> list[str]:
  """SentenceTransformer(PATH); a nested model's truncate_dim, and a calibrated model's int8
  codes (`quantization.json`'s ranges: the codes `Encoder.encode(precision="int8")` gives)."""
  lines = ["```python", "from sentence_transformers import SentenceTransformer", SENTENCES,
           "model = SentenceTransformer(\"PATH\")", "vectors = model.encode(sentences)"]
  if metadata.get("nested_dims"):
    lines.append(f"# nested sizes {metadata['nested_dims']}: SentenceTransformer(\"PATH\", "
                 "truncate_dim=k) keeps the first k dimensions")
  if metadata.get("calibrated"):
    lines += ["# int8 codes with the model's calibrated ranges (the same buckets every call):",
              "import json", "import numpy as np",
              "from sentence_transformers import quantize_embeddings",
              "ranges = np.array(json.load(open(\"PATH/quantization.json\"))[\"ranges\"])",
              "codes = quantize_embeddings(vectors, precision=\"int8\", "
              "ranges=ranges[:, :vectors.shape[1]])"]
  return lines + ["```"]


def _transformers_code(metadata: Mapping[str, Any]) -> list[str]:
  """AutoProcessor and the encoder class, mean pooling, then the Dense modules in order.

  The tokenizer is read with AutoProcessor: it honours tokenizer_config's
  processor_class for both architectures, where AutoTokenizer insists on a
  tokenizers-library file for "xlm-roberta-xl".
  """
  model_class = "MT5EncoderModel" if metadata["architecture"] == "mt5" else "AutoModel"
  return [
      "```python", "import json", "import torch", "from safetensors.torch import load_file",
      f"from transformers import AutoProcessor, {model_class}", SENTENCES,
      "tokenizer = AutoProcessor.from_pretrained(\"PATH\")",
      f"model = {model_class}.from_pretrained(\"PATH\").eval()",
      "modules = json.load(open(\"PATH/modules.json\"))",
      "dense = [load_file(f\"PATH/{m['path']}/model.safetensors\") for m in modules",
      "         if m[\"type\"].endswith(\"Dense\")]",
      "batch = tokenizer(sentences, padding=True, truncation=True, return_tensors=\"pt\")",
      "with torch.no_grad():",
      "    states = model(input_ids=batch[\"input_ids\"],",
      "                   attention_mask=batch[\"attention_mask\"]).last_hidden_state",
      "mask = batch[\"attention_mask\"].unsqueeze(-1).to(states.dtype)",
      "vectors = (states * mask).sum(1) / mask.sum(1)",
      "for layer in dense:",
      "    vectors = torch.nn.functional.linear(vectors, layer[\"linear.weight\"],",
      "                                         layer.get(\"linear.bias\"))",
      "```"]


def training_languages(model_dir: str) -> list[str]:
  """The languages of the data the run read (NTREX-128, Multi30k), ISO 639-3, sorted.

  Empty when the run's data is another (an OPUS directory, TFDS): the card
  then declares none rather than guess.
  """
  from vmsst.base import languages  # pylint: disable=import-outside-toplevel
  path = run_directory.of(model_dir).config
  data_dir = (_bindings(files.read_text(path)).get("DATA_DIR", "").strip("'\"")
              if files.exists(path) else "")
  folders = training_data(model_dir)[1]
  codes = set()
  from vmsst_tasks.sources import pair_readers  # pylint: disable=import-outside-toplevel
  if "ntrex128" in folders and data_dir:
    try:
      codes |= set(pair_readers.ntrex_files(data_dir))
    except (FileNotFoundError, ValueError):
      pass  # the data moved since training: the card declares what it can read
  if "multi30k" in folders:
    codes |= set(pair_readers.MULTI30K_LANGUAGES.values())
  return sorted({languages.canonical_language(c).split("-")[0] for c in codes})


def mteb_fields(model_dir: str, metadata: Mapping[str, Any]) -> dict[str, Any]:
  """What mteb's ModelMeta holds about this export, under ModelMeta's field names.

  mteb reads embed_dim, max_tokens and similarity_fn_name off the loaded
  SentenceTransformer (`ModelMeta.from_sentence_transformer_model`; the
  similarity is config_sentence_transformers.json's), and languages from
  the card's `language:` (ISO 639-3 here, which mteb maps to code-script).
  `embed_dim` is the list of nested sizes for a Matryoshka model (mteb's
  convention), else the width; training_datasets are the data folders the
  run read (the card's `datasets:`).
  """
  nested = metadata.get("nested_dims")
  return {"languages": training_languages(model_dir),
          "training_datasets": sorted(training_data(model_dir)[1]),
          "similarity_fn_name": "cosine",
          "embed_dim": list(nested) if nested else metadata["dimension"],
          "max_tokens": metadata["max_seq_length"]}


def _front_matter(model_dir: str, metadata: Mapping[str, Any]) -> list[str]:
  """The card's YAML header: what the Hub, sentence-transformers and mteb read."""
  mteb = mteb_fields(model_dir, metadata)
  lines = ["---", f"library_name: {_library(metadata)}", "pipeline_tag: sentence-similarity",
           "tags: [sentence-transformers, feature-extraction, sentence-similarity, vmsst]"]
  if mteb["languages"]:
    lines.append(f"language: [{', '.join(mteb['languages'])}]")
  if mteb["training_datasets"]:
    lines.append(f"datasets: [{', '.join(mteb['training_datasets'])}]")
  return lines + ["---"]


def _library(metadata: Mapping[str, Any]) -> str:
  """The card's library_name: the library its code loads the directory with."""
  return "transformers" if metadata["format"] == "huggingface" else "sentence-transformers"


def render(model_dir: str, metadata: Mapping[str, Any]) -> str:
  """The card's markdown."""
  spec = json.loads(files.read_text(run_directory.of(model_dir).model_spec))
  task, licenses = training_data(model_dir)
  figures = heldout(model_dir)
  network = spec["network"]
  lines = [
      *_front_matter(model_dir, metadata), "", f"# {files.name(model_dir)}", "",
      "A multilingual sentence embedder trained with vmsst: "
      f"objective **{metadata['objective']}**, "
      f"{metadata['step']} steps, exported as a stock `{metadata['architecture']}` encoder "
      f"(no custom code), mean pooling and the μ_sem projection "
      f"({metadata['dimension']} dimensions). Sentences longer than "
      f"{metadata['max_seq_length']} pieces (the EOS included) are cut, as in training.", "",
      *_transformers_note(metadata), *usage(metadata), "",
      "## Towers", ""]
  lines += [f"- `{path}`: {role}" for path, role in metadata["towers"].items()]
  lines += ["", "## Training", "",
            f"- objective: {spec['objective']} {json.dumps(spec.get('objective_args', {}))}",
            f"- steps: {metadata['step']}; sequence length {spec['sequence_length']}",
            f"- network: d={network['emb_dim']}, {network['num_encoder_layers']} encoder "
            f"layers, {network['num_heads']} heads, vocabulary {network['vocab_size']}",
            f"- data (task or mixture): `{task}`",
            "- command: `python -m vmsst.train --gin_file=config.gin --gin.MODEL_DIR=DIR`, "
            "config.gin being the run's operative config (copied here with model.json)", "",
            "## Held-out evaluation (from the run)", ""]
  if figures:
    lines += ["| set | retrieval accuracy |", "|---|---|"]
    lines += [f"| {name} | {value:.4g} |" for name, value in sorted(figures.items())]
  else:
    lines.append("The run logged no held-out evaluation (train.evaluator was off).")
  lines += ["", "## Data licenses", ""]
  lines += [f"- {folder}: {text}" for folder, text in sorted(licenses.items())] or [
      "- not recorded: see the SOURCE.md of each data set the run read"]
  lines.append("")
  return "\n".join(lines)
