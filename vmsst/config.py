"""Static network configuration shared by every objective.

One frozen dataclass describes the whole encoder/decoder family, so that an
ablation of the paper (Table 4) is a gin binding on this object and never a new
module. It is hashable, which lets it be closed over by jitted step functions.
"""

import dataclasses
from typing import Any

import gin
import jax.numpy as jnp


@gin.configurable
@dataclasses.dataclass(frozen=True)
class NetworkConfig:
  """Sizes and switches of the VMSST network family.

  Attributes:
    vocab_size: SentencePiece vocabulary size V (language symbols included).
    emb_dim: model width d; μ_sem and μ_lang are d-dimensional too.
    num_heads: attention heads.
    head_dim: width of one head (num_heads * head_dim is usually d).
    mlp_dim: hidden width of the feed-forward blocks.
    num_encoder_layers: depth of the semantic encoder.
    num_language_encoder_layers: depth of each language encoder.
    num_decoder_layers: depth of the decoder (the paper ablates 1 and 12).
    max_length: longest sequence the learned positions cover.
    dropout_rate: dropout on residual branches (0.1 for Contrastive only).
    dtype: activation dtype; parameters are always float32.
    factorized_output: project concat(h, z) (3d) to d before the d × V
      matrix instead of one 3d × V matrix (saves 2dV - 3d² parameters).
    share_encoders: one encoder stack for the semantic and language paths
      (the paper's "1 encoder" ablation); the μ/log σ² heads stay separate.
    encoder_language_embedding: add the language symbol's embedding to every
      language-encoder input position.
    decoder_language_embedding: start the decoder with the target-language
      symbol; otherwise with the padding id 0 (the paper's ablation).
    num_language_encoders: separate language encoders; a language with symbol
      id s is routed to encoder s mod num_language_encoders.
  """

  vocab_size: int = 8000
  emb_dim: int = 256
  num_heads: int = 4
  head_dim: int = 64
  mlp_dim: int = 1024
  num_encoder_layers: int = 2
  num_language_encoder_layers: int = 1
  num_decoder_layers: int = 1
  max_length: int = 64
  dropout_rate: float = 0.0
  dtype: Any = jnp.float32
  factorized_output: bool = False
  share_encoders: bool = False
  encoder_language_embedding: bool = True
  decoder_language_embedding: bool = True
  num_language_encoders: int = 1
