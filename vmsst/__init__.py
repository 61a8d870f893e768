"""vmsst: multilingual sentence embeddings (VMSST and baselines) in JAX/Flax.

`vmsst.Encoder` (vmsst/encoding/api.py) embeds sentences with a trained or
exported model. It is imported on first use, so `import vmsst` stays cheap
and pulls in neither JAX nor TensorFlow; it only makes the commands' old
`python -m` names answer (vmsst/base/old_names.py).
"""

from vmsst.base import old_names as _old_names

__all__ = ["Encoder"]

_old_names.install()  # `python -m <a command's old name>` names its successor


def __getattr__(name: str):
  """Lazy attributes (PEP 562): `vmsst.Encoder` imports vmsst.encoding.api when first read."""
  if name == "Encoder":
    from vmsst.encoding.api import Encoder  # pylint: disable=import-outside-toplevel
    return Encoder
  raise AttributeError(f"module 'vmsst' has no attribute {name!r}")
