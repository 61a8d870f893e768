"""The memory report: compiled train-step memory on forced CPU devices."""

import dataclasses

import jax
import optax
import pytest

from vmsst_testing import TINY
from vmsst import cli
from vmsst import memory_report
from vmsst import partitioning
from vmsst import trainer as trainer_lib
from vmsst.objectives import VMSST

# Small but layer-dominated: 4-layer stacks over 32 tokens, a small vocabulary,
# so the kept activations (not the logits) decide the temp memory.
SMALL = dataclasses.replace(TINY, vocab_size=256, emb_dim=64, num_heads=2, head_dim=32,
                            mlp_dim=256, num_encoder_layers=4, num_language_encoder_layers=4,
                            num_decoder_layers=4, max_length=32)


def _mesh(data, model):
  return partitioning.make_mesh(data, model, devices=jax.devices()[:data * model])


def _measure(cfg):
  return memory_report.step_memory(VMSST(cfg), optax.adam(1e-3), _mesh(2, 1), batch_size=32,
                                   sequence_length=32)


@pytest.mark.slow
def test_remat_reduces_temp_memory_and_not_the_state():
  """Measured on scanned layers, where the backward loop recomputes one layer per step.

  (On this 4-layer config XLA:CPU reports identical temp bytes for unscanned
  `none` and `remat`: its schedule recomputes unscanned layers early. At 24
  layers unscanned remat does save: 66.8 -> 40.3 GiB, see the report.)
  """
  scanned = dataclasses.replace(SMALL, scan_layers=True)
  plain = _measure(scanned)
  remat = _measure(dataclasses.replace(scanned, remat="full"))
  print(f"temp bytes per device: scan {plain.temp}, scan + remat {remat.temp}")
  assert remat.temp < 0.7 * plain.temp
  assert (remat.params, remat.optimizer_state) == (plain.params, plain.optimizer_state)
  assert plain.peak == plain.arguments + plain.outputs - plain.aliased + plain.temp
  table = memory_report.markdown_table({"scan": plain, "scan_remat": remat})
  assert table.splitlines()[2].startswith("| scan | ")


def test_factorized_projection_saves_its_parameter_bytes_per_device():
  """On data 2 × model 2 the vocabulary axis is split in two, the bottleneck replicated.

  Unfactorized: a 3d × V kernel, V/2 columns per device. Factorized: d × V
  (V/2 per device) plus a replicated 3d × d bottleneck. Saved float32 bytes
  per device: 4 (3dV/2 − dV/2 − 3d²) = 4 (dV − 3d²).
  """
  d, v = SMALL.emb_dim, SMALL.vocab_size
  state_bytes = lambda cfg: memory_report.bytes_per_device(trainer_lib.Trainer(
      VMSST(cfg), optax.sgd(0.1), _mesh(2, 2), VMSST(cfg).input_shapes(4, 8)).abstract_state.params)
  full = state_bytes(SMALL)
  factorized = state_bytes(dataclasses.replace(SMALL, factorized_output=True))
  assert full - factorized == 4 * (d * v - 3 * d * d)


def test_mesh_flag_names_both_axes():
  assert memory_report.parse_mesh("data:16,model:4") == (16, 4)
  assert memory_report.parse_mesh("model:2,data:1") == (1, 2)
  for wrong in ("data:8", "data2", "data:x,model:1"):
    with pytest.raises(cli.UserError, match="give both axes"):
      memory_report.parse_mesh(wrong)
