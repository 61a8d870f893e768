"""tasks/registry_stand_ins.py: the same gin names as the registry's, and a clear error when called."""

import pytest

from vmsst.base import cli
from vmsst.training import configurables
from vmsst.base.gin_utils import gin
from vmsst_tasks import registry_stand_ins

configurables.register()  # the real registry (seqio is installed here)


def test_the_stand_ins_are_the_registrys_configurables():
  real = {name.rsplit(".", 1)[-1]: name.rsplit(".", 1)[0]
          for name, selectable in gin.config._REGISTRY.items()  # pylint: disable=protected-access
          if selectable.wrapped.__module__.startswith(("vmsst_tasks.registry",
                                                       "vmsst_tasks.sources.tfds_readers"))}
  assert real == registry_stand_ins.NAMES


def test_a_called_stand_in_names_the_command_that_writes_the_stream():
  with pytest.raises(cli.UserError, match="python -m vmsst.pretokenize"):
    registry_stand_ins._stand_in("pair_tasks")(data_dir="x")  # pylint: disable=protected-access
