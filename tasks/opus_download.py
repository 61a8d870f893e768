r"""Downloads the paper's OPUS corpora (Moses format).

    python -m vmsst_tasks.opus_download --output=DIR [--languages=de,fr,...|all]
        [--corpora=Europarl,Tatoeba@v2022-03-03,...|all] [--pivots=en,es]
        [--dry_run] [--keep_zips] [--opus_db=PATH]

writes the (pivot, xx) pairs of the paper's languages and corpora into DIR as
Moses files with a manifest; a rerun skips what is complete (how, and the
file layout: tasks/sources/opus_fetch.py).
"""

from vmsst.base import cli  # pylint: disable=g-bad-import-order
from vmsst.base import path_checks  # pylint: disable=g-bad-import-order
from vmsst.base import console  # pylint: disable=g-bad-import-order

if __name__ == "__main__":  # the command, not an import: before TensorFlow and JAX load
  console.quiet_startup()

# pylint: disable=wrong-import-position
import sys
from typing import Sequence

from absl import flags

from vmsst_tasks.sources import opus_fetch
from vmsst_tasks.sources import opus_paper
from vmsst.base import files


def _define_flags() -> None:
  """Defined only when run as a command, so importing this module adds no flags."""
  flags.DEFINE_string("output", None, "Directory for the Moses files and manifest.json.", required=True)
  flags.DEFINE_string("languages", "all", "Comma-separated OPUS codes of paper languages, or 'all'.")
  flags.DEFINE_string("corpora", "all", "Comma-separated corpora (Name or Name@release), or 'all'.")
  flags.DEFINE_string("pivots", ",".join(opus_paper.PIVOTS), "Comma-separated pivot languages.")
  flags.DEFINE_bool("dry_run", False, "Print what would be fetched; no network, no writes to --output.")
  flags.DEFINE_bool("keep_zips", False, f"Keep the downloaded zips in OUTPUT/{opus_fetch.ZIP_SUBDIR}.")
  flags.DEFINE_string("opus_db", opus_fetch.DEFAULT_OPUS_DB, "Where to keep the OPUS catalog opustools ships.")


def main(argv: Sequence[str]) -> int:
  cli.check_no_arguments(argv)
  config = flags.FLAGS
  if files.is_remote(config.output):  # opustools and zipfile work on the local disk only
    raise cli.UserError(f"--output={config.output}: download into a local directory, then copy "
                        f"it to the bucket (gsutil -m cp -r DIR {config.output}); training "
                        "reads OPUS files from either.")
  if not config.dry_run:
    path_checks.check_output_path("output", config.output, directory=True)
  try:
    languages = opus_fetch.parse_codes(config.languages, opus_paper.LANGUAGES, "language")
    pivots = opus_fetch.parse_codes(config.pivots, opus_paper.PIVOTS, "pivot")
    corpora = opus_fetch.parse_corpora(config.corpora)
  except ValueError as e:
    raise cli.UserError(str(e)) from None
  jobs = opus_fetch.plan_jobs(languages, pivots, corpora)
  report = opus_fetch.fetch(config.output, jobs, opus_fetch.Catalog(opus_fetch.ensure_catalog(config.opus_db)),
                 dry_run=config.dry_run, keep_zips=config.keep_zips)
  print(f"{'Dry run' if config.dry_run else 'Done'}: {report.summary(config.dry_run)} ({len(jobs)} jobs, {len(languages)} languages, "
        f"pivots {','.join(pivots)}, corpora {', '.join(f'{c}@{r}' for c, r in corpora.items())}).")
  for failure in report.failed:
    print(f"FAILED {failure}", file=sys.stderr)
  return 1 if report.failed else 0


if __name__ == "__main__":
  _define_flags()
  cli.run(main)
