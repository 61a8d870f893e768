"""Tally: counts start at 0, add count by count, print as JSON, and refuse names not declared."""

import json

import pytest

from vmsst.base import tallies


class Fates(tallies.Tally):
  NAMES = ("read", "kept", "skipped")


class Other(tallies.Tally):
  NAMES = ("read", "kept", "skipped")


def test_counts_start_at_zero_and_count_by_attribute_or_by_name():
  counts = Fates(read=3)
  counts.kept += 1
  counts.add("skipped")
  counts.add("kept", 1)
  assert (counts.read, counts.kept, counts.skipped) == (3, 2, 1)
  assert json.loads(json.dumps(counts.as_dict())) == {"read": 3, "kept": 2, "skipped": 1}
  assert list(counts.as_dict()) == ["read", "kept", "skipped"]  # NAMES order


def test_tallies_add_count_by_count_and_compare_by_kind_and_counts():
  total = Fates()
  total += Fates(read=2, kept=1, skipped=1)
  total += Fates(read=5, kept=5)
  assert total == Fates(read=7, kept=6, skipped=1)
  assert repr(total) == "Fates(read=7, kept=6, skipped=1)"
  assert total != Other(read=7, kept=6, skipped=1)
  with pytest.raises(TypeError):
    total + Other()  # pylint: disable=expression-not-assigned


@pytest.mark.parametrize("count", [
    lambda c: setattr(c, "kep", 1),
    lambda c: c.add("kep"),
    lambda c: Fates(kep=1),
])
def test_a_misspelt_count_fails_naming_the_counts(count):
  with pytest.raises(AttributeError, match=r"Fates counts read, kept, skipped; not 'kep'"):
    count(Fates())
