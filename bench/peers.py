"""The peer the benchmarks compare against: the same network in sentence-transformers.

`sentence_transformer(cfg, spm_path)` builds, offline, a SentenceTransformer
(PyTorch CPU) whose encoder has our semantic encoder's shape: BERT layers
with the same depth, width d, heads, feed-forward width, vocabulary size and
maximum length, then mean pooling, exactly what `EmbeddingModel.encode`
returns (mean of the masked token states). BERT differs in details that cost
next to nothing (post-norm instead of pre-norm, token-type embeddings, an
unused pooler). Weights are random: throughput does not depend on them.

The tokenizer is our SentencePiece model rebuilt as a Hugging Face fast
tokenizer (same pieces and scores, NFKC, "▁" word boundaries, EOS appended),
so both sides tokenize the same sentences into the same ids and pay for
tokenization alike.
"""

import os
import tempfile

from vmsst.model.config import NetworkConfig


def hf_tokenizer(spm_path: str):
  """transformers.PreTrainedTokenizerFast with the ids of our SentencePiece model."""
  import sentencepiece  # pylint: disable=import-outside-toplevel
  import tokenizers  # pylint: disable=import-outside-toplevel
  import transformers  # pylint: disable=import-outside-toplevel
  from tokenizers import decoders, models, normalizers, pre_tokenizers, processors  # pylint: disable=import-outside-toplevel
  sp = sentencepiece.SentencePieceProcessor(model_file=spm_path)
  vocab = [(sp.id_to_piece(i), sp.get_score(i)) for i in range(sp.get_piece_size())]
  tokenizer = tokenizers.Tokenizer(models.Unigram(vocab, unk_id=sp.unk_id(), byte_fallback=True))
  tokenizer.normalizer = normalizers.NFKC()
  tokenizer.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="always")
  tokenizer.decoder = decoders.Metaspace(replacement="▁", prepend_scheme="always")
  eos = sp.id_to_piece(sp.eos_id())
  tokenizer.post_processor = processors.TemplateProcessing(single=f"$A {eos}",
                                                           special_tokens=[(eos, sp.eos_id())])
  return transformers.PreTrainedTokenizerFast(
      tokenizer_object=tokenizer, pad_token=sp.id_to_piece(sp.pad_id()), eos_token=eos,
      unk_token=sp.id_to_piece(sp.unk_id()))


def bert_config(cfg: NetworkConfig, *, dropout: float = 0.0):
  import transformers  # pylint: disable=import-outside-toplevel
  return transformers.BertConfig(
      vocab_size=cfg.vocab_size, hidden_size=cfg.emb_dim, num_hidden_layers=cfg.num_encoder_layers,
      num_attention_heads=cfg.num_heads, intermediate_size=cfg.mlp_dim,
      max_position_embeddings=cfg.max_length, hidden_dropout_prob=dropout,
      attention_probs_dropout_prob=dropout, hidden_act="gelu")


def sentence_transformer(cfg: NetworkConfig, spm_path: str | None, *, max_length: int,
                         dropout: float = 0.0, threads: int | None = None,
                         device: str = "cpu"):
  """A random-weight SentenceTransformer of `cfg`'s encoder shape, mean pooling.

  Args:
    cfg: our network sizes (encoder depth, d, heads, mlp, vocabulary, max length).
    spm_path: our SentencePiece model for the tokenizer; None for a placeholder
      tokenizer (training feeds token ids, never text).
    max_length: the sequence length (tokens, EOS included) both sides use.
    dropout: BERT's dropout (0.1 to match a Contrastive run, 0 for encoding).
    threads: torch intra-op threads (default: all cores, as JAX uses).
    device: torch device ("cpu", or "cuda" on an accelerator: bench/accelerator.py).
  """
  import torch  # pylint: disable=import-outside-toplevel
  import transformers  # pylint: disable=import-outside-toplevel
  from sentence_transformers import SentenceTransformer  # pylint: disable=import-outside-toplevel
  from sentence_transformers.sentence_transformer import modules  # pylint: disable=import-outside-toplevel
  torch.set_num_threads(threads or os.cpu_count())
  torch.manual_seed(0)
  directory = tempfile.mkdtemp(prefix="st_peer_")
  transformers.BertModel(bert_config(cfg, dropout=dropout)).save_pretrained(directory)
  if spm_path:
    hf_tokenizer(spm_path).save_pretrained(directory)
  else:
    _placeholder_tokenizer(cfg.vocab_size).save_pretrained(directory)
  transformer = modules.Transformer(directory, max_seq_length=max_length)
  pooling = modules.Pooling(cfg.emb_dim, pooling_mode="mean")
  return SentenceTransformer(modules=[transformer, pooling], device=device)


def _placeholder_tokenizer(vocab_size: int):
  """A word-level tokenizer of `vocab_size` ids (the training peer never tokenizes)."""
  import tokenizers  # pylint: disable=import-outside-toplevel
  import transformers  # pylint: disable=import-outside-toplevel
  vocab = {"<pad>": 0, "</s>": 1, "<unk>": 2} | {f"w{i}": i for i in range(3, vocab_size)}
  tokenizer = tokenizers.Tokenizer(tokenizers.models.WordLevel(vocab, unk_token="<unk>"))
  tokenizer.pre_tokenizer = tokenizers.pre_tokenizers.Whitespace()
  return transformers.PreTrainedTokenizerFast(tokenizer_object=tokenizer, pad_token="<pad>",
                                              unk_token="<unk>", eos_token="</s>")
