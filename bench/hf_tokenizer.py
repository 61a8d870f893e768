r"""How exactly each transformers tokenizer reproduces our SentencePiece ids, on all of NTREX.

  .venv/bin/python bench/hf_tokenizer.py --data_dir=../shared/data \
      --output=docs/results/hf_tokenizer

The export (vmsst/export_formats/huggingface.py) ships the run's SentencePiece model read by
transformers' SpeechT5Tokenizer, which calls the SentencePiece library. This
counts, over every NTREX-128 line (all languages), the sentences whose ids
(EOS appended, no truncation) differ from training's (`model.tokens`), for
that tokenizer and for the two tokenizers-library (Rust) alternatives: the
Unigram model with byte fallback behind spm's own Precompiled normaliser (what
transformers' converters build), and behind NFKC. The vocabulary is the test
suite's (tests/conftest.py: 2,000 pieces from 16 lines per NTREX language and
500 per Multi30k language) unless --spm_model names another.
"""

import json
import os
import pathlib
import sys
import tempfile
import time

from absl import app
from absl import flags

FLAGS = flags.FLAGS


def _define_flags() -> None:
  flags.DEFINE_string("data_dir", "../shared/data", "Holds ntrex128/ and multi30k/.")
  flags.DEFINE_string("spm_model", None, "SentencePiece model (default: the tests' vocabulary).")
  flags.DEFINE_string("output", "docs/results/hf_tokenizer", "Where results.json goes.")


def test_vocabulary(data_dir: pathlib.Path, folder: str) -> str:
  """The 2,000-piece vocabulary tests/conftest.py trains (same lines, same settings)."""
  from vmsst.base import text_files  # pylint: disable=import-outside-toplevel
  from vmsst_tasks.sources import pair_readers, vocabulary_training  # pylint: disable=import-outside-toplevel
  sentences = []
  for path in pair_readers.ntrex_files(data_dir).values():
    sentences += text_files.read_lines(path)[:16]
  for short in pair_readers.MULTI30K_LANGUAGES:
    sentences += text_files.read_lines(data_dir / "multi30k" / f"train.{short}.gz")[:500]
  return vocabulary_training.train_vocabulary(sentences, os.path.join(folder, "spm"), 2000,
                                              character_coverage=0.995)


def rust_unigram(sp_model: bytes, normalizer):
  """The tokenizers-library Unigram of the model (byte fallback on), EOS appended."""
  # pylint: disable=import-outside-toplevel
  from sentencepiece import sentencepiece_model_pb2 as pb
  from tokenizers import Tokenizer, pre_tokenizers, processors
  from tokenizers.models import Unigram
  proto = pb.ModelProto()
  proto.ParseFromString(sp_model)
  normal = pb.ModelProto.SentencePiece.NORMAL
  floor = min(p.score for p in proto.pieces if p.type == normal) - 1000.0
  tokenizer = Tokenizer(Unigram([(p.piece, p.score if p.type == normal else floor)
                                 for p in proto.pieces], unk_id=proto.trainer_spec.unk_id,
                                byte_fallback=True))
  tokenizer.normalizer = normalizer(proto)
  tokenizer.pre_tokenizer = pre_tokenizers.Sequence([
      pre_tokenizers.WhitespaceSplit(),
      pre_tokenizers.Metaspace(replacement="\u2581", prepend_scheme="always", split=True)])
  eos = proto.pieces[proto.trainer_spec.eos_id].piece
  tokenizer.post_processor = processors.TemplateProcessing(
      single=["$A", eos], special_tokens=[(eos, proto.trainer_spec.eos_id)])
  return lambda sentences: [e.ids for e in tokenizer.encode_batch(sentences)]


def main(argv) -> None:
  del argv
  # pylint: disable=import-outside-toplevel
  from tokenizers import normalizers
  from vmsst.export_formats import huggingface as hf_export
  from vmsst.base import sentencepiece_vocabulary, text_files
  from vmsst_tasks.sources import pair_readers
  from transformers import AutoTokenizer
  data_dir = pathlib.Path(FLAGS.data_dir)
  with tempfile.TemporaryDirectory() as work:
    spm_path = FLAGS.spm_model or test_vocabulary(data_dir, work)
    vocab = sentencepiece_vocabulary.get_vocabulary(spm_path)
    sentences = [line for path in pair_readers.ntrex_files(data_dir).values()
                 for line in text_files.read_lines(path)]
    reference = [list(vocab.encode(s)) + [vocab.eos_id] for s in sentences]
    hf_export.write_tokenizer(work, vocab.sp_model, 1 << 20)
    exported = AutoTokenizer.from_pretrained(work)
    candidates = {
        "export: SpeechT5Tokenizer (SentencePiece library)":
            lambda batch: exported(batch)["input_ids"],
        "tokenizers Unigram + Precompiled (spm's charsmap)": rust_unigram(
            vocab.sp_model,
            lambda p: normalizers.Precompiled(p.normalizer_spec.precompiled_charsmap)),
        "tokenizers Unigram + NFKC": rust_unigram(vocab.sp_model, lambda p: normalizers.NFKC()),
    }
    results = {"sentences": len(sentences), "vocabulary": FLAGS.spm_model or "tests' 2000 pieces",
               "command": " ".join(["bench/hf_tokenizer.py"] + sys.argv[1:]), "tokenizers": {}}
    for name, tokenize in candidates.items():
      start = time.time()
      ids = tokenize(sentences)
      differ = sum(a != b for a, b in zip(ids, reference))
      results["tokenizers"][name] = {"sentences_differing": differ,
                                     "seconds": round(time.time() - start, 1)}
      print(f"{name}: {differ} of {len(sentences)} differ")
  os.makedirs(FLAGS.output, exist_ok=True)
  with open(os.path.join(FLAGS.output, "results.json"), "w", encoding="utf-8") as f:
    json.dump(results, f, indent=1)


if __name__ == "__main__":
  _define_flags()
  app.run(main)
