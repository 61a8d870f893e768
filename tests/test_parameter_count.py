"""The paper-size configurations, counted without allocating them."""

import dataclasses

import jax
import pytest

from vmsst import models
from vmsst.config import NetworkConfig
from vmsst.languages import LANGUAGES
from vmsst.objectives import VMSST

MT5_VOCAB = 250_112
PAPER_24L = NetworkConfig(vocab_size=MT5_VOCAB, emb_dim=1024, num_heads=16, head_dim=64,
                          mlp_dim=4096, num_encoder_layers=24, num_language_encoder_layers=24,
                          num_decoder_layers=24, max_length=32)


def count_parameters(cfg: NetworkConfig) -> int:
  shapes = jax.eval_shape(lambda: VMSST(cfg).get_initial_variables(
      jax.random.key(0), models.batch_shapes(2, 8)))
  return sum(x.size for x in jax.tree.leaves(shapes))


@pytest.mark.slow
def test_factorized_projection_saves_about_509m_parameters_at_24_layers():
  full = count_parameters(PAPER_24L)
  factorized = count_parameters(dataclasses.replace(PAPER_24L, factorized_output=True))
  d, v = 1024, MT5_VOCAB
  assert full - factorized == 2 * d * v - 3 * d * d  # 3dV → dV + 3d·d
  assert 508e6 < full - factorized < 510e6
  assert full == expected_count(PAPER_24L)
  assert 2.0e9 < full < 2.02e9  # 3 stacks of 24 layers, 256M embeddings, 768M projection


def expected_count(cfg: NetworkConfig) -> int:
  """The 24-layer VMSST counted by hand from the architecture."""
  d, m, v, n = cfg.emb_dim, cfg.mlp_dim, cfg.vocab_size, cfg.max_length
  attention = 4 * d * cfg.num_heads * cfg.head_dim
  mlp = d * m + m + m * d + d
  encoder_layer = attention + mlp + 2 * 2 * d              # two LayerNorms
  decoder_layer = encoder_layer + 2 * d + 3 * d * d + d    # latent LN + [h; z] → d
  stack = lambda layers, layer: layers * layer + 2 * d + n * d  # final LN, positions
  gaussian_head = 2 * (d * d + d)
  languages = len(LANGUAGES) * d  # language ids' own table, outside the vocabulary
  return (v * d + languages
          + stack(cfg.num_encoder_layers, encoder_layer) + gaussian_head
          + stack(cfg.num_language_encoder_layers, encoder_layer) + gaussian_head
          + stack(cfg.num_decoder_layers, decoder_layer)
          + 3 * d * v + v)
