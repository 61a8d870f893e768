r"""With nested dimensions off, every objective lowers to the same program as before they existed.

Prints, per objective, the sha256 of its loss's lowered StableHLO (source
locations stripped) and the loss's float32 bytes, for the tiny test network
and batch with nesting unset. Run it in a checkout of the commit before
nesting and in this one (each checkout on PYTHONPATH first, so its own vmsst
is imported) and compare the lines: docs/results/matryoshka/switch_off.md.

  git worktree add /tmp/before <commit>
  (cd /tmp/before && PYTHONPATH=/tmp/before:/tmp/before/tests \
      python /path/to/bench/matryoshka_switch_off.py)
  PYTHONPATH=.:tests python bench/matryoshka_switch_off.py
"""

import dataclasses
import hashlib
import pathlib
import re
import sys

import flax.linen as nn
import jax
import numpy as np

# tests/ after PYTHONPATH: a checkout named there first keeps its own vmsst_testing.
sys.path.append(str(pathlib.Path(__file__).resolve().parents[1] / "tests"))
from vmsst_testing import TINY, init_params, random_batch  # pylint: disable=wrong-import-position
from vmsst.objectives import MODELS

OBJECTIVES = {"contrastive": {}, "bitranslation": {}, "vmsst": {}, "vmsst_contrastive": {},
              "distillation": {"teacher_dim": 24}, "momentum_contrast": {"queue_size": 8},
              "query_tower": {},
              "entity_contrastive": {"num_entities": 6, "num_hard_negatives": 1}}


def batch():
  """The pair batch plus every objective's extra features."""
  out = random_batch()
  out["teacher"] = np.ones((4, 24), np.float32)
  out["tokens_negative"] = random_batch(seed=7)["tokens_a"]
  out["entities"] = np.asarray([[0, 3], [1, 4], [2, -1], [5, 3]], np.int32)
  return out


def program(model, params, features) -> tuple[str, bytes]:
  """(sha256 of the lowered loss without source locations, the loss's bytes)."""
  state = jax.device_get(nn.unbox(model.init_model_state(params, jax.random.key(3))))
  loss = lambda p, b: model.loss_fn_with_state(p, state, b, jax.random.key(0), 5)
  text = jax.jit(loss).lower(params, features).as_text()
  text = re.sub(r"\s*loc\([^\n]*?\)(?=\s*$)", "", text, flags=re.M)
  text = "\n".join(line for line in text.splitlines() if not line.startswith("#loc"))
  return hashlib.sha256(text.encode()).hexdigest()[:16], np.asarray(loss(params, features)[0]).tobytes()


def main():
  config = dataclasses.replace(TINY, dropout_rate=0.1)
  features = batch()
  for name, kwargs in OBJECTIVES.items():
    model = MODELS[name](config, **kwargs)
    digest, value = program(model, init_params(model), features)
    print(name, digest, value.hex())


if __name__ == "__main__":
  main()
