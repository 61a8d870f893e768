"""The old name of `python -m vmsst.compile --topology=cpu`: says so and runs nothing."""
from vmsst import cli
cli.renamed("vmsst.memory_report", "vmsst.compile --topology=cpu")
