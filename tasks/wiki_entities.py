r"""Extracts linked entities from a MediaWiki dump (EASE).

  python -m vmsst_tasks.wiki_entities \
      --dump=../shared/data/wiki_entity_sample/enwiki-pages-articles-sample.xml.bz2 \
      --output=runs/wiki_entities

writes OUTPUT/examples.jsonl, OUTPUT/entities.tsv and OUTPUT/meta.json (the
formats, the parsing and every count: tasks/sources/wikipedia.py).
"""

from vmsst.base import cli  # pylint: disable=g-bad-import-order
from vmsst.base import path_checks  # pylint: disable=g-bad-import-order
from vmsst.base import console  # pylint: disable=g-bad-import-order

if __name__ == "__main__":  # the command, not an import: before TensorFlow and JAX load
  console.quiet_startup()

# pylint: disable=wrong-import-position
import xml.etree.ElementTree as ET
from typing import Sequence

from absl import flags

from vmsst_tasks.sources import wikipedia


def _define_flags() -> None:
  """Defined only when run as a command (absl, like every other command)."""
  flags.DEFINE_string("dump", None, "MediaWiki XML dump (.xml or .xml.bz2).", required=True)
  flags.DEFINE_string("output", None, "Directory for examples.jsonl, entities.tsv, meta.json.",
                      required=True)
  flags.DEFINE_integer("min_links", wikipedia.PAPER_MIN_LINKS,
                       "Keep entities linked more than this many times (EASE §3.1: 10).")
  flags.DEFINE_string("interlanguage", None, "Optional title -> id table (TSV).")
  flags.DEFINE_string("types", None, "Optional entity -> type table (TSV); enables hard "
                      "negatives.")
  flags.DEFINE_integer("num_hard_negatives", 1, "Hard negatives per example (with --types).")
  flags.DEFINE_float("heldout_fraction", 0.2, "Fraction of pages held out for validation.")
  flags.DEFINE_integer("seed", 0, "Seed of the held-out split and hard-negative draws.")
  flags.DEFINE_string("lang", "eng", "Language code written on every example.")


def main(argv: Sequence[str]) -> None:
  cli.check_no_arguments(argv)
  f = flags.FLAGS
  dump = "a MediaWiki XML dump (.xml or .xml.bz2, e.g. enwiki-...-pages-articles.xml.bz2)"
  path_checks.check_input_file("dump", f.dump, dump)
  for flag, what in (("interlanguage", "a title<TAB>id TSV"), ("types", "an entity<TAB>type TSV")):
    if f[flag].value:
      path_checks.check_input_file(flag, f[flag].value, what)
  path_checks.check_output_path("output", f.output, directory=True)
  try:
    summary = wikipedia.build(f.dump, f.output, min_links=f.min_links, interlanguage=f.interlanguage,
                    types=f.types, num_hard_negatives=f.num_hard_negatives,
                    heldout_fraction=f.heldout_fraction, seed=f.seed, lang=f.lang)
  except (ET.ParseError, EOFError, OSError) as e:  # not XML, or a broken .bz2
    raise cli.UserError(f"--dump={f.dump} does not read as {dump}: {e}") from e
  print(summary)


if __name__ == "__main__":
  _define_flags()
  cli.run(main)
