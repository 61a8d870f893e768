"""`gin` where gin-config is installed, else a stand-in with its decorators as no-ops.

Why: the core (network, objectives, optimizers, partitioning, trainer,
checkpointing) marks what the gin entrypoints may bind with
`@gin.configurable` and `gin.REQUIRED`, but it must import and train where
gin is absent (an accelerator image: issue 18). There nothing is bound, so
`configurable` returns its argument unchanged and `REQUIRED` is a sentinel
that fails loudly if a caller leaves such an argument out.
"""

import types

try:
  import gin  # pylint: disable=unused-import
  if not hasattr(gin, "configurable"):
    # Not gin-config but the repository's gin/ folder of .gin files, which Python
    # imports as an empty namespace package when the repository root is on sys.path
    # and gin-config is not installed (`python -m pytest` from the root on an
    # accelerator image).
    raise ImportError("gin resolves to a folder of .gin files, not gin-config")
except ImportError:

  class _Required:
    """Stands for gin.REQUIRED: an argument that must be passed explicitly without gin."""

    def __repr__(self):
      return "REQUIRED (pass this argument explicitly: gin-config is not installed)"

  def _configurable(name_or_fn=None, **_):
    """`gin.configurable` with nothing to bind: the object itself."""
    if callable(name_or_fn):
      return name_or_fn
    return lambda fn: fn

  gin = types.SimpleNamespace(configurable=_configurable, REQUIRED=_Required())

__all__ = ["gin"]
