"""The XLM-RoBERTa-XL tensor names of our semantic path, both ways.

Read forwards by the transformers export (`export_formats/huggingface.py`
writes an XLMRobertaXLModel) and backwards by `initial_weights` (such an
export as a run's starting point), as `t5_names` is for mT5.
"""


# ours (inside semantic_encoder/layer_<i>/) -> XLM-RoBERTa-XL (inside encoder.layer.<i>.)
_LAYER = {
    "pre_attention_norm/scale": "attention.self_attn_layer_norm.weight",
    "pre_attention_norm/bias": "attention.self_attn_layer_norm.bias",
    "attention/query/kernel": "attention.self.query.weight",
    "attention/key/kernel": "attention.self.key.weight",
    "attention/value/kernel": "attention.self.value.weight",
    "attention/out/kernel": "attention.output.dense.weight",
    "pre_mlp_norm/scale": "LayerNorm.weight",
    "pre_mlp_norm/bias": "LayerNorm.bias",
    "mlp/wi/kernel": "intermediate.dense.weight",
    "mlp/wi/bias": "intermediate.dense.bias",
    "mlp/wo/kernel": "output.dense.weight",
    "mlp/wo/bias": "output.dense.bias",
}
_TOP = {
    "token_embed/embedding": "embeddings.word_embeddings.weight",
    "semantic_encoder/final_norm/scale": "encoder.LayerNorm.weight",
    "semantic_encoder/final_norm/bias": "encoder.LayerNorm.bias",
}


def hf_source(name: str) -> str | None:
  """The XLM-RoBERTa-XL tensor our semantic-path parameter `name` is, or None."""
  if name in _TOP:
    return _TOP[name]
  head, _, inner = name.partition("/layer_")
  if head == "semantic_encoder" and inner:
    index, _, leaf = inner.partition("/")
    if leaf in _LAYER:
      return f"encoder.layer.{index}.{_LAYER[leaf]}"
  return None
