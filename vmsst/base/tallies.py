"""Tallies: the named counts a builder or a miner reports of what it did with what it read.

A pass over input counts each item once by its fate (kept, skipped for a
reason, short of a target); a run adds its parts' tallies, and the command
prints them or writes them as JSON. A kind of tally is a subclass that lists
its counts in `NAMES` (each documented in its docstring); the adding, the
JSON form and the checks live here once. A base module: the data side
(vmsst_tasks) and the libraries above it both count with it.

  class Counts(Tally):
    NAMES = ("read", "kept")

  counts = Counts(read=3); counts.add("kept"); counts.kept += 1
  counts + Counts(read=1)  ->  Counts(read=4, kept=2)
"""

from typing import ClassVar


class Tally:
  """Integer counts named by the subclass's NAMES, each 0 until counted.

  Raises:
    AttributeError: a count the subclass does not name is set, read by
      `add` or given to the constructor (a misspelt count fails where it is
      written, not in a report that silently lacks it).
  """

  NAMES: ClassVar[tuple[str, ...]] = ()

  def __init__(self, **counts: int):
    for name in self.NAMES:
      setattr(self, name, 0)
    for name, value in counts.items():
      setattr(self, name, value)

  def __setattr__(self, name: str, value: int) -> None:
    if name not in self.NAMES:
      raise AttributeError(f"{type(self).__name__} counts {', '.join(self.NAMES)}; "
                           f"not {name!r}.")
    super().__setattr__(name, value)

  def add(self, name: str, count: int = 1) -> None:
    """Counts `count` more under `name` (a name chosen at run time)."""
    setattr(self, name, getattr(self, name, 0) + count)

  def as_dict(self) -> dict[str, int]:
    """Plain JSON, in NAMES order: {name: count}."""
    return {name: getattr(self, name) for name in self.NAMES}

  def __add__(self, other: "Tally") -> "Tally":
    """Count by count: a run's tally from its parts'."""
    if type(other) is not type(self):
      return NotImplemented
    return type(self)(**{name: getattr(self, name) + getattr(other, name)
                         for name in self.NAMES})

  def __eq__(self, other) -> bool:
    return type(other) is type(self) and self.as_dict() == other.as_dict()

  def __repr__(self) -> str:
    counts = ", ".join(f"{name}={count}" for name, count in self.as_dict().items())
    return f"{type(self).__name__}({counts})"
