"""Static network configuration shared by every objective.

One frozen dataclass describes the whole encoder/decoder family, so that an
ablation of the paper (Table 4) is a gin binding on this object and never a new
module. It is hashable, which lets it be closed over by jitted step functions.

The T5 switches (relative_attention ... tie_output_embedding) let the same
layers *be* a T5/mT5 encoder and decoder, so that vmsst.mt5_import can start a
run from an mT5 checkpoint; their defaults keep the original architecture.
"""

import dataclasses
from typing import Any

from vmsst.base.gin_utils import gin
import jax.numpy as jnp

from vmsst.base import languages


@gin.configurable
@dataclasses.dataclass(frozen=True)
class NetworkConfig:
  """Sizes and switches of the VMSST network family.

  Attributes:
    vocab_size: SentencePiece vocabulary size V (any SentencePiece model,
      mT5's 250,112 included: language ids are not pieces of it).
    emb_dim: model width d; μ_sem and μ_lang are d-dimensional too.
    num_heads: attention heads.
    head_dim: width of one head (num_heads * head_dim is usually d).
    mlp_dim: hidden width of the feed-forward blocks.
    num_encoder_layers: depth of the semantic encoder.
    num_language_encoder_layers: depth of each language encoder.
    num_decoder_layers: depth of the decoder (the paper ablates 1 and 12).
    max_length: longest sequence the learned positions cover.
    dropout_rate: dropout on residual branches (0.1 for Contrastive only).
    dtype: activation and matmul dtype (jnp.float32, or 'bfloat16' from gin);
      parameters stay float32 and every loss, softmax over the vocabulary,
      KL and returned embedding is float32 (gin/models/precision/bf16.gin).
    factorized_output: project concat(h, z) (3d) to d before the d × V
      matrix instead of one 3d × V matrix (saves 2dV - 3d² parameters).
    share_encoders: one encoder stack for the semantic and language paths
      (the paper's "1 encoder" ablation); the μ/log σ² heads stay separate.
    num_languages: rows of the language table `language_embed` (language id
      = index in vmsst.base.languages.LANGUAGES, the default's length).
    encoder_language_embedding: add the language's row of `language_embed`
      to every language-encoder input position.
    decoder_language_embedding: the decoder's first input is the target
      language's row of `language_embed`; otherwise the embedding of the
      padding id 0, T5's start token (the paper's "no dec. l.e." ablation).
    num_language_encoders: separate language encoders; the language with id
      i is routed to encoder i mod num_language_encoders (an arbitrary split,
      as the paper's "languages allocated randomly", §7.1).
    relative_attention: T5's bucketed relative position bias on the attention
      logits instead of learned absolute positions; one [buckets, heads] table
      per stack (bidirectional in encoders, causal in the decoder), shared by
      all its layers. max_length then bounds nothing.
    relative_attention_num_buckets: T5's bucket count (32 in mT5).
    relative_attention_max_distance: distances beyond this share the last
      bucket (128 in mT5).
    rms_norm: T5LayerNorm (scale only, no mean subtraction, eps 1e-6)
      instead of LayerNorm, everywhere.
    gated_mlp: T5.1.1's gated-GELU feed-forward, gelu_tanh(x W_0) * (x W_1)
      then W_o, instead of GELU(x W_i + b) W_o + b.
    projection_bias: biases on the dense projections (MLP, latent injection,
      Gaussian heads, output); T5 has none.
    scale_attention_logits: divide q·k by sqrt(head_dim). T5 does not: it
      folds the factor into the query initialisation, which this switch does
      too when off.
    tie_output_embedding: the decoder-state part of the output projection is
      the token-embedding table (logits = h Eᵀ + W_z z + b, unscaled as in
      Hugging Face's tied MT5) instead of its own rows; excludes
      factorized_output. mT5 checkpoints are untied.
    remat: rematerialisation of every Transformer layer in the backward pass:
      "none" keeps all activations; "full" keeps only each layer's input and
      recomputes the rest (least memory, ~1/3 more compute);
      "dots_saveable" keeps matmul outputs and recomputes the cheap
      elementwise ops (see REMAT_POLICIES in vmsst/model/layer_stacks.py).
    scan_layers: run each stack's layers under nn.scan, the parameters of a
      stack stacked along a leading "layers" axis (`<stack>/layers/...`
      instead of `<stack>/layer_<i>/...`): one compiled layer body, so the
      24-layer step compiles in a fraction of the time. Same parameter
      count; convert an unscanned tree with layer_stacks.stack_layer_params.
    vocab_tile_tokens: the decoder's vocabulary head (output projection,
      softmax, NLL, argmax) runs over at most this many tokens per device at
      a time, forward and backward (vmsst/model/vocab_tiling.py): no
      [tokens, V] logits exist beyond one tile, the same loss and gradient.
      0 computes the whole batch's logits at once. The candidate softmax
      (softmax_candidates) always takes the whole-logit path: its K columns
      are small.
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
  num_languages: int = len(languages.LANGUAGES)
  encoder_language_embedding: bool = True
  decoder_language_embedding: bool = True
  num_language_encoders: int = 1
  relative_attention: bool = False
  relative_attention_num_buckets: int = 32
  relative_attention_max_distance: int = 128
  rms_norm: bool = False
  gated_mlp: bool = False
  projection_bias: bool = True
  scale_attention_logits: bool = True
  tie_output_embedding: bool = False
  remat: str = "none"
  scan_layers: bool = False
  vocab_tile_tokens: int = 1024

  def __post_init__(self):
    # One canonical np.dtype whether gin gave 'bfloat16' or code jnp.bfloat16:
    # equal configs must hash alike (jit caches on the config).
    object.__setattr__(self, "dtype", jnp.dtype(self.dtype))
    if self.remat not in REMAT_NAMES:
      raise ValueError(f"NetworkConfig.remat is {self.remat!r}; choose one of "
                       f"{REMAT_NAMES} in the gin file (gin/models/memory/remat.gin).")
    if self.vocab_tile_tokens < 0:
      raise ValueError(f"NetworkConfig.vocab_tile_tokens is {self.vocab_tile_tokens}; give "
                       "the tokens of one tile per device (> 0), or 0 for whole logits.")


REMAT_NAMES = ("none", "full", "dots_saveable")
