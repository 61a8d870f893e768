"""The paper-size configurations, counted without allocating them."""

import dataclasses

import jax
import pytest

from vmsst_testing import ROOT
from vmsst.training import configurables
from vmsst.base.gin_utils import gin
from vmsst.model import models
from vmsst.model.config import NetworkConfig
from vmsst.base.languages import LANGUAGES
from vmsst.objectives import VMSST

configurables.register()  # what the run files name (imports TensorFlow: at collection)

MT5_VOCAB = 250_112


def paper_size(size_file: str) -> NetworkConfig:
  """The NetworkConfig a gin/models/sizes file binds (the paper runs' own)."""
  gin.clear_config()
  gin.add_config_file_search_path(str(ROOT))
  try:
    gin.parse_config_files_and_bindings([str(ROOT / size_file)], [f"VOCAB_SIZE = {MT5_VOCAB}"],
                                        finalize_config=False)
    return NetworkConfig()
  finally:
    gin.clear_config()


def count_parameters(cfg: NetworkConfig) -> int:
  shapes = jax.eval_shape(lambda: VMSST(cfg).get_initial_variables(
      jax.random.key(0), models.batch_shapes(2, 8)))
  return sum(x.size for x in jax.tree.leaves(shapes))


@pytest.mark.slow
def test_factorized_projection_saves_about_509m_parameters_at_24_layers():
  paper_24l = paper_size("gin/models/sizes/24l.gin")
  full = count_parameters(paper_24l)
  factorized = count_parameters(dataclasses.replace(paper_24l, factorized_output=True))
  d, v = 1024, MT5_VOCAB
  assert full - factorized == 2 * d * v - 3 * d * d  # 3dV → dV + 3d·d
  assert 508e6 < full - factorized < 510e6
  assert full == expected_count(paper_24l)
  # 3 stacks of 24 layers (mT5-large's, ~25M each), 256M embeddings, 768M projection.
  assert 2.0e9 < full < 2.05e9


@pytest.mark.slow
def test_the_random_and_pretrained_24_layer_models_are_one_architecture():
  """§6.4: the same architecture in every setting; mT5-large's initialises one of them."""
  assert paper_size("gin/models/sizes/24l.gin") == paper_size("gin/models/sizes/mt5_large.gin")
  six = paper_size("gin/models/sizes/6l.gin")
  assert (six.num_encoder_layers, six.num_language_encoder_layers,
          six.num_decoder_layers) == (6, 6, 6)
  assert dataclasses.replace(six, num_encoder_layers=24, num_language_encoder_layers=24,
                             num_decoder_layers=24) == paper_size("gin/models/sizes/24l.gin")


def expected_count(cfg: NetworkConfig) -> int:
  """The VMSST network counted by hand from the architecture (either layer type)."""
  d, m, v = cfg.emb_dim, cfg.mlp_dim, cfg.vocab_size
  bias = cfg.projection_bias
  norm = d if cfg.rms_norm else 2 * d                       # scale (and offset)
  attention = 4 * d * cfg.num_heads * cfg.head_dim
  mlp = (2 * d * m + m * d) if cfg.gated_mlp else (d * m + m * d)
  mlp += (m + d) * bias
  encoder_layer = attention + mlp + 2 * norm
  decoder_layer = encoder_layer + norm + 3 * d * d + d * bias  # latent norm + [h; z] → d
  positions = (cfg.relative_attention_num_buckets * cfg.num_heads if cfg.relative_attention
               else cfg.max_length * d)                      # per stack
  stack = lambda layers, layer: layers * layer + norm + positions  # final norm
  gaussian_head = 2 * (d * d + d * bias)
  languages = len(LANGUAGES) * d  # language ids' own table, outside the vocabulary
  return (v * d + languages
          + stack(cfg.num_encoder_layers, encoder_layer) + gaussian_head
          + stack(cfg.num_language_encoder_layers, encoder_layer) + gaussian_head
          + stack(cfg.num_decoder_layers, decoder_layer)
          + 3 * d * v + v * bias)


@pytest.mark.slow
@pytest.mark.parametrize("t5", [False, True], ids=["original", "t5_1_1"])
def test_the_hand_count_holds_for_both_layer_types(t5):
  switches = dict(relative_attention=t5, rms_norm=t5, gated_mlp=t5, projection_bias=not t5,
                  scale_attention_logits=not t5)
  cfg = NetworkConfig(vocab_size=300, emb_dim=16, num_heads=2, head_dim=8, mlp_dim=24,
                      num_encoder_layers=2, num_language_encoder_layers=1,
                      num_decoder_layers=2, max_length=12, **switches)
  assert count_parameters(cfg) == expected_count(cfg)
