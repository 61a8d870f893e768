"""Named groups of network parameters, and an optimizer that freezes some of them.

A group is resolved on the "/"-joined flax paths of the parameter tree (as
`param_files.flatten` writes them), e.g.

  token_embed/embedding                          (the token table)
  language_embed/embedding                       (the language table)
  semantic_positions/positions                   (learned absolute positions)
  semantic_encoder/relative_position_bias/...    (T5 relative bias, if used)
  semantic_encoder/layer_3/pre_attention_norm/{scale,bias}
  semantic_encoder/layer_3/attention/{query,key,value,out}/kernel
  semantic_encoder/layer_3/pre_mlp_norm/{scale,bias}
  semantic_encoder/layer_3/mlp/wi/{kernel,bias}  (the "intermediate" dense)
  semantic_encoder/layer_3/mlp/wo/{kernel,bias}  (the "output" dense)
  semantic_encoder/final_norm/{scale,bias}
  semantic_head/{mu,logvar}/{kernel,bias}        (the pooling head)

Group names (GROUPS; a block range `:i` or `:i-j` is inclusive, block i is
`layer_i` of every stack the tree has):
  embeddings              token and language tables, position tables and relative
                          position biases
  norms                   every layer norm (pre-attention, pre-MLP, final)
  attention[:range]       a block's pre-attention norm and attention weights
  intermediate[:range]    a block's pre-MLP norm and MLP input dense (wi)
  output[:range]          a block's MLP output dense (wo)
  blocks[:range]          whole blocks, e.g. blocks:0-3 = the first four
  final_norm              each stack's final layer norm
  head                    the μ / log σ² heads after pooling
  re:<regex>              any path the regular expression matches (re.search)

The network is pre-LN, so there is no norm inside the embedding block (BERT's
embedding LayerNorm has no counterpart): "embeddings" plus "norms" freezes
what BERT's embedding block plus every LayerNorm would. A pre-attention norm
belongs to the attention sub-block and a pre-MLP norm to the intermediate one
because each only feeds that sub-block.

`frozen_groups` wraps an optimizer with optax.multi_transform: frozen leaves
go to optax.set_to_zero (no state at all: multi_transform masks them out of
the inner optimizer, whose state holds an empty optax.MaskedNode there), so a
frozen parameter is bit-identical after any number of steps and costs no
optimizer memory.
"""

import re
from typing import Any, Sequence

from vmsst.base.gin_utils import gin
import jax
import optax

TRAINABLE, FROZEN = "trainable", "frozen"
_EMBEDDINGS = (r"(^|/)(token_embed|language_embed|[a-z_]*positions(_\d+)?"
               r"|relative_position_bias)/")
_NORM = r"(^|/)[a-z_]*norm/"
# Per-block groups: (pattern inside layer_i/) for each name.
_BLOCK_PARTS = {
    "attention": r"(pre_attention_norm|attention)/",
    "intermediate": r"(pre_mlp_norm|mlp/wi)/",
    "output": r"mlp/wo/",
    "blocks": r"",
}
_WHOLE = {"embeddings": _EMBEDDINGS, "norms": _NORM, "final_norm": r"(^|/)final_norm/",
          "head": r"(^|/)[a-z_]*_head/"}
GROUPS = (*_WHOLE, *_BLOCK_PARTS, "re:<regex>")


def group_pattern(group: str) -> re.Pattern:
  """The compiled regular expression a group name stands for.

  "attention:0-2" -> layers 0, 1, 2 of any stack, attention sub-block only.

  Raises:
    ValueError: an unknown name or a malformed range.
  """
  if group.startswith("re:"):
    return re.compile(group[3:])
  if group in _WHOLE:
    return re.compile(_WHOLE[group])
  name, _, blocks = group.partition(":")
  if name not in _BLOCK_PARTS:
    raise ValueError(f"unknown parameter group {group!r}; groups: {', '.join(GROUPS)} "
                     "(block groups take :i or :i-j).")
  if not blocks:
    layers = r"\d+"
  else:
    m = re.fullmatch(r"(\d+)(?:-(\d+))?", blocks)
    if not m or (m.group(2) and int(m.group(2)) < int(m.group(1))):
      raise ValueError(f"parameter group {group!r}: the block range must be i or i-j "
                       "with i <= j, e.g. blocks:0-3.")
    first, last = int(m.group(1)), int(m.group(2) or m.group(1))
    layers = "(" + "|".join(str(i) for i in range(first, last + 1)) + ")"
  return re.compile(rf"(^|/)layer_{layers}/{_BLOCK_PARTS[name]}")


def path_name(path: Sequence[Any]) -> str:
  """A jax key path -> "a/b/c" (the names param_files uses)."""
  return "/".join(str(getattr(k, "key", getattr(k, "name", getattr(k, "idx", k)))) for k in path)


def names(params: Any) -> list[str]:
  """Every leaf's "/"-joined name, in tree order."""
  return [path_name(p) for p, _ in jax.tree_util.tree_flatten_with_path(params)[0]]


def members(params: Any, group: str) -> list[str]:
  """The parameter names a group covers in `params`."""
  pattern = group_pattern(group)
  return [n for n in names(params) if pattern.search(n)]


def labels(params: Any, groups: Sequence[str]) -> Any:
  """A tree like `params` of FROZEN / TRAINABLE labels.

  Raises:
    ValueError: a group that covers no parameter (a typo or a range past the
      network's depth would otherwise silently train everything).
  """
  patterns = {g: group_pattern(g) for g in groups}
  every = names(params)
  scanned = [n for n in every if "/layers/" in n]
  if scanned and any(g.split(":")[0] in _BLOCK_PARTS for g in groups):
    raise ValueError(f"block groups ({', '.join(groups)}) name layer_i, but this network "
                     f"stacks its layers ({scanned[0]}): set NetworkConfig.scan_layers = "
                     "False to freeze blocks.")
  for group, pattern in patterns.items():
    if not any(pattern.search(n) for n in every):
      raise ValueError(f"parameter group {group!r} matches no parameter of this model "
                       f"(e.g. {', '.join(every[:4])}, ...); fix frozen_groups.groups.")
  return jax.tree_util.tree_map_with_path(
      lambda p, _: FROZEN if any(q.search(path_name(p)) for q in patterns.values())
      else TRAINABLE, params)


@gin.configurable
def frozen_groups(*, optimizer: optax.GradientTransformation = gin.REQUIRED,
                  groups: Sequence[str] = ()) -> optax.GradientTransformation:
  """`optimizer` on every parameter outside `groups`; the groups get no update, no state.

  Args:
    optimizer: the transformation of the trainable parameters (gin:
      @adamw(), or @compensated() for tiny learning rates).
    groups: names from GROUPS, e.g. ["embeddings", "blocks:0-1"].
  """
  groups = tuple(groups)
  if not groups:
    return optimizer
  return optax.multi_transform({TRAINABLE: optimizer, FROZEN: optax.set_to_zero()},
                               lambda params: labels(params, groups))
