r"""Fetching the paper's OPUS corpora in Moses format (`python -m vmsst_tasks.opus_download`).

For every (pivot, xx) pair of the paper's languages (tasks/sources/opus_paper.py) and
every paper corpus, this looks the Moses zip up in the OPUS catalog that ships
with opustools (so planning and `--dry_run` never touch the network), fetches
it with `opustools.OpusGet`, and extracts its two text files into `out_dir` as

    <corpus>.<pivot>-<code>.<pivot>    <corpus>.<pivot>-<code>.<code>

with the pivot first. OPUS itself names a pair alphabetically ("de-en",
"ar-es", but "en-fr"), so the extraction matches the zip's members under
OPUS's order and renames them; README, LICENSE, .xml and .ids members are
skipped. `out_dir/manifest.json` records every extracted file (bytes, lines),
every pair (URL, release, lines), line counts per language pair, and the pairs
OPUS does not have. A pair whose files exist with the sizes in the manifest is
complete and is not downloaded again, so an interrupted run can be restarted.
Zips go to `out_dir/zips/` and are deleted after extraction unless
`--keep_zips`.

Most (pivot, xx, corpus) combinations do not exist in OPUS (Europarl has only
EU languages, UN only the six UN languages); those are listed as "missing from
OPUS", not attempted. Languages with several OPUS spellings (zh: zh, zh_cn,
cmn) are fetched under each (tasks/sources/opus_paper.py, OPUS_CODE_ALIASES).
"""

import dataclasses
import gzip
import json
import os
import pathlib
import re
import shutil
import sys
import zipfile
from typing import Any, Mapping, Sequence, TextIO

import opustools

from vmsst_tasks.sources import opus_paper
from vmsst_tasks.sources import opus_readers

ZIP_SUBDIR = "zips"
DEFAULT_OPUS_DB = "~/.OpusTools/opusdata.db"  # opustools' own default location.
_BUNDLED_DB = "opusdata.db.gz"
# The OPUS catalog bundled with opustools files the OPUS-UN corpus under the
# name of its successor UNPC (same rows, URLs under OPUS-UN/).
_CATALOG_CORPUS = {"UN": "UNPC"}
_ZIP_MEMBER = r"^(?:.*/)?(?P<corpus>[^/]+)\.{pair}\.(?P<side>{sides})$"


@dataclasses.dataclass(frozen=True)
class Job:
  """One Moses zip to fetch: a corpus release and a (pivot, OPUS code) pair."""
  corpus: str
  release: str
  pivot: str
  code: str

  @property
  def stem(self) -> str:
    """Layout stem, pivot first: "Europarl.en-de"."""
    return f"{self.corpus}.{self.pivot}-{self.code}"

  @property
  def files(self) -> tuple[str, str]:
    """(pivot file, other file) names in out_dir."""
    return f"{self.stem}.{self.pivot}", f"{self.stem}.{self.code}"

  @property
  def opus_pair(self) -> str:
    """The pair as OPUS spells it in URLs and member names (alphabetical)."""
    return "-".join(sorted((self.pivot, self.code)))

  @property
  def label(self) -> str:
    return f"{self.corpus} {self.release} {self.pivot}-{self.code}"


# ------------------------------------------------------------------- planning


def parse_codes(value: str, allowed: Sequence[str], what: str) -> tuple[str, ...]:
  """"all" or a comma list checked against `allowed` (order kept, deduplicated)."""
  if value.strip() == "all":
    return tuple(allowed)
  codes = tuple(dict.fromkeys(c.strip() for c in value.split(",") if c.strip()))
  unknown = [c for c in codes if c not in allowed]
  if unknown or not codes:
    raise ValueError(f"Unknown {what} {unknown or value!r}; choose from: {', '.join(allowed)} (or 'all').")
  return codes


def parse_corpora(value: str) -> dict[str, str]:
  """"all" or "Name[@release],..." -> {corpus: release}; default release pinned."""
  if value.strip() == "all":
    return dict(opus_paper.CORPUS_RELEASES)
  corpora = {}
  for item in (i.strip() for i in value.split(",") if i.strip()):
    name, _, release = item.partition("@")
    if name not in opus_paper.CORPORA:
      raise ValueError(f"Unknown corpus {name!r}; choose from: {', '.join(opus_paper.CORPORA)} (or 'all').")
    corpora[name] = release or opus_paper.CORPUS_RELEASES[name]
  if not corpora:
    raise ValueError("--corpora is empty.")
  return corpora


def plan_jobs(languages: Sequence[str], pivots: Sequence[str],
              corpora: Mapping[str, str]) -> list[Job]:
  """Every (corpus, pivot, OPUS code) to fetch; each unordered pair once.

  en-es is one pair (pivot en); a language listed in `pivots` is fetched as the
  non-pivot side only against the pivots before it.
  """
  jobs, seen = [], set()
  for pivot in pivots:
    for language in languages:
      pair = frozenset((pivot, language))
      if language == pivot or pair in seen:
        continue
      seen.add(pair)
      for corpus, release in corpora.items():
        jobs.extend(Job(corpus, release, pivot, code) for code in opus_paper.opus_codes(language))
  return jobs


# -------------------------------------------------------------------- catalog


def ensure_catalog(db_path: str = DEFAULT_OPUS_DB) -> str:
  """Path of the OPUS catalog (sqlite), decompressed from opustools if absent.

  This is the same file opustools creates for `local_db=True`; reading it is
  what lets `--dry_run` list URLs and sizes offline.
  """
  path = os.path.expanduser(db_path)
  if not os.path.isfile(path):
    bundled = os.path.join(os.path.dirname(opustools.__file__), _BUNDLED_DB)
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    partial = path + ".partial"
    with gzip.open(bundled, "rb") as src, open(partial, "wb") as dst:
      shutil.copyfileobj(src, dst, 1 << 20)
    os.replace(partial, path)
  return path


class Catalog:
  """Moses zips listed in the OPUS catalog, looked up via opustools.DbOperations.

  Rows are read once per corpus release (one query each) rather than once per
  job, since every query scans the whole catalog.
  """

  def __init__(self, db_path: str):
    self.path = db_path
    self._rows: dict[tuple[str, str], dict[str, dict[str, Any]]] = {}

  def _release_rows(self, corpus: str, release: str) -> dict[str, dict[str, Any]]:
    if (corpus, release) not in self._rows:
      parameters = {"corpus": _CATALOG_CORPUS.get(corpus, corpus), "version": release,
                    "preprocessing": "moses"}
      rows = opustools.DbOperations(db_file=self.path).get_corpora(parameters)
      self._rows[(corpus, release)] = {row["url"]: row for row in rows}
    return self._rows[(corpus, release)]

  def row(self, job: Job) -> dict[str, Any] | None:
    """The catalog row (url, size in KB, ...) of the job's Moses zip, or None."""
    url = f"https://object.pouta.csc.fi/OPUS-{job.corpus}/{job.release}/moses/{job.opus_pair}.txt.zip"
    return self._release_rows(job.corpus, job.release).get(url)


# ----------------------------------------------------------------- extraction


def _zip_members(archive: zipfile.ZipFile, job: Job, zip_path: pathlib.Path) -> dict[str, str]:
  """{side code: member name} of the two Moses text files in an OPUS zip."""
  first, second = sorted((job.pivot, job.code))
  pattern = re.compile(_ZIP_MEMBER.format(pair=re.escape(f"{first}-{second}"),
                                          sides=f"{re.escape(first)}|{re.escape(second)}"))
  members: dict[str, list[str]] = {job.pivot: [], job.code: []}
  for name in archive.namelist():
    match = pattern.match(name)
    if match:
      members[match["side"]].append(name)
  if any(len(found) != 1 for found in members.values()):
    raise ValueError(
        f"{zip_path}: expected one '<corpus>.{first}-{second}.{first}' and one "
        f"'<corpus>.{first}-{second}.{second}' member, found {archive.namelist()}.")
  return {side: found[0] for side, found in members.items()}


def _copy_member(archive: zipfile.ZipFile, member: str, dest: pathlib.Path) -> None:
  with archive.open(member) as src, open(dest, "wb") as dst:
    shutil.copyfileobj(src, dst, 1 << 20)


def _extract_partials(zip_path: pathlib.Path, job: Job, partials: Sequence[pathlib.Path]) -> int:
  """Writes the pivot and other member to `partials`; returns their line count."""
  try:
    with zipfile.ZipFile(zip_path) as archive:
      members = _zip_members(archive, job, zip_path)
      for side, partial in zip((job.pivot, job.code), partials):
        _copy_member(archive, members[side], partial)
  except zipfile.BadZipFile as e:  # Also raised on a CRC mismatch while reading.
    raise ValueError(f"{zip_path} is not a valid zip archive (corrupt or partial download: {e}); "
                     "delete it and run again.") from None
  lines = [opus_readers.count_lines(p) for p in partials]
  if lines[0] != lines[1]:
    raise ValueError(f"{zip_path}: {members[job.pivot]} has {lines[0]} lines but "
                     f"{members[job.code]} has {lines[1]}; the pair is not aligned.")
  return lines[0]


def extract_moses_zip(zip_path: str | os.PathLike, out_dir: str | os.PathLike,
                      job: Job) -> dict[str, dict[str, int]]:
  """Extracts the job's two Moses files from an OPUS zip under layout names.

  Both files are written under temporary names and renamed only once their
  line counts agree, so out_dir never holds a misaligned pair.

  Returns:
    {file name: {"bytes": ..., "lines": ...}} for the two files.

  Raises:
    ValueError: corrupt zip, unexpected members, or sides of unequal length;
      the message names the zip.
  """
  zip_path, out_dir = pathlib.Path(zip_path), pathlib.Path(out_dir)
  out_dir.mkdir(parents=True, exist_ok=True)
  partials = [out_dir / f".{name}.partial" for name in job.files]
  try:
    lines = _extract_partials(zip_path, job, partials)
  except BaseException:
    for partial in partials:
      partial.unlink(missing_ok=True)
    raise
  for partial, name in zip(partials, job.files):
    os.replace(partial, out_dir / name)
  return {name: {"bytes": (out_dir / name).stat().st_size, "lines": lines} for name in job.files}


# ------------------------------------------------------------------- manifest


def load_manifest(out_dir: str | os.PathLike) -> dict[str, Any]:
  """The manifest in out_dir, or an empty one."""
  path = pathlib.Path(out_dir, opus_paper.MANIFEST_NAME)
  if path.exists():
    manifest = json.loads(path.read_text(encoding="utf-8"))
  else:
    manifest = {}
  for key in ("files", "pairs"):
    manifest.setdefault(key, {})
  manifest.setdefault("missing_from_opus", [])
  return manifest


def write_manifest(out_dir: str | os.PathLike, manifest: dict[str, Any]) -> None:
  """Writes the manifest atomically, recomputing per-language-pair line totals."""
  totals: dict[str, int] = {}
  for pair in manifest["pairs"].values():
    key = f"{pair['pivot']}-{pair['language']}"
    totals[key] = totals.get(key, 0) + pair["lines"]
  manifest["line_counts"] = dict(sorted(totals.items()))
  manifest["missing_from_opus"] = sorted(set(manifest["missing_from_opus"]))
  path = pathlib.Path(out_dir, opus_paper.MANIFEST_NAME)
  partial = path.with_name(path.name + ".partial")
  partial.write_text(json.dumps(manifest, indent=1, sort_keys=True, ensure_ascii=False) + "\n",
                     encoding="utf-8")
  os.replace(partial, path)


def is_complete(out_dir: str | os.PathLike, manifest: Mapping[str, Any], job: Job) -> bool:
  """Both files exist with the byte sizes the manifest recorded for them."""
  if job.stem not in manifest["pairs"]:
    return False
  for name in job.files:
    path, entry = pathlib.Path(out_dir, name), manifest["files"].get(name)
    if entry is None or not path.is_file() or path.stat().st_size != entry["bytes"]:
      return False
  return True


def record(manifest: dict[str, Any], job: Job, files: Mapping[str, Mapping[str, int]],
           url: str) -> None:
  """Adds an extracted pair to the manifest (in memory)."""
  manifest["files"].update({name: dict(entry) for name, entry in files.items()})
  manifest["pairs"][job.stem] = {
      "corpus": job.corpus, "release": job.release, "pivot": job.pivot, "opus_code": job.code,
      "language": opus_paper.paper_language(job.code), "url": url,
      "files": list(job.files), "lines": next(iter(files.values()))["lines"]}
  if job.stem in manifest["missing_from_opus"]:
    manifest["missing_from_opus"].remove(job.stem)


# ------------------------------------------------------------------- fetching


def _download(job: Job, row: Mapping[str, Any], zip_dir: pathlib.Path, catalog: str) -> pathlib.Path:
  """The job's zip in zip_dir, fetched with opustools unless a valid copy is there."""
  getter = opustools.OpusGet(
      source=job.pivot, target=job.code, release=job.release, preprocess="moses",
      directory=_CATALOG_CORPUS.get(job.corpus, job.corpus), download_dir=str(zip_dir),
      local_db=True, suppress_prompts=True, database=catalog)
  zip_path = pathlib.Path(getter.make_file_name(dict(row)))
  if zip_path.exists() and not zipfile.is_zipfile(zip_path):
    zip_path.unlink()  # A partial download from an earlier run.
  if not zip_path.exists():
    getter.get_files()  # Prints progress; reports (does not raise) network errors.
  if not zip_path.exists():
    raise RuntimeError(f"Download of {row['url']} failed (see the message above); run again.")
  return zip_path


@dataclasses.dataclass
class Report:
  """What one run did, per job label."""
  fetched: list[str] = dataclasses.field(default_factory=list)
  present: list[str] = dataclasses.field(default_factory=list)
  missing_from_opus: list[str] = dataclasses.field(default_factory=list)
  failed: list[str] = dataclasses.field(default_factory=list)
  fetch_kb: int = 0  # Catalog size of the zips fetched (or to fetch).

  def summary(self, dry_run: bool = False) -> str:
    return (f"{len(self.fetched)} {'to fetch' if dry_run else 'fetched'} "
            f"({self.fetch_kb / 1e6:.1f} GB of zips), "
            f"{len(self.present)} already present, "
            f"{len(self.missing_from_opus)} missing from OPUS, {len(self.failed)} failed")


def _adopt(out_dir: pathlib.Path, manifest: dict[str, Any], job: Job, url: str) -> bool:
  """Records files extracted earlier but absent from the manifest, if aligned."""
  paths = [out_dir / name for name in job.files]
  if not all(p.is_file() for p in paths):
    return False
  lines = [opus_readers.count_lines(p) for p in paths]
  if lines[0] != lines[1]:
    return False
  record(manifest, job, {p.name: {"bytes": p.stat().st_size, "lines": lines[0]} for p in paths}, url)
  return True


def fetch(out_dir: str | os.PathLike, jobs: Sequence[Job], catalog: Catalog, *, dry_run: bool = False,
          keep_zips: bool = False, out: TextIO = sys.stdout) -> Report:
  """Fetches and extracts every job; with dry_run only prints the plan.

  A failing job (network, corrupt zip, misaligned sides) is reported and the
  others continue; the manifest is written after every extracted pair.
  """
  out_dir = pathlib.Path(out_dir)
  manifest, report = load_manifest(out_dir), Report()
  for job in jobs:
    row = catalog.row(job)
    if row is None:
      report.missing_from_opus.append(job.label)
      print(f"[missing] {job.label}: not in the OPUS catalog", file=out)
      if not dry_run:
        manifest["missing_from_opus"].append(job.stem)
      continue
    if is_complete(out_dir, manifest, job) or (not dry_run and _adopt(out_dir, manifest, job, row["url"])):
      report.present.append(job.label)
      print(f"[present] {job.label}: {', '.join(job.files)}", file=out)
      continue
    print(f"[fetch]   {job.label}: {row['url']} ({row['size'] / 1000:.1f} MB) -> "
          f"{job.stem}.{{{job.pivot},{job.code}}}", file=out, flush=True)
    if dry_run:
      report.fetched.append(job.label)
      report.fetch_kb += row["size"]
      continue
    try:
      _fetch_one(out_dir, manifest, job, row, catalog.path, keep_zips)
      report.fetched.append(job.label)
      report.fetch_kb += row["size"]
    except (OSError, RuntimeError, ValueError) as e:
      report.failed.append(f"{job.label}: {e}")
      print(f"[failed]  {job.label}: {e}", file=out)
  if not dry_run:
    out_dir.mkdir(parents=True, exist_ok=True)
    write_manifest(out_dir, manifest)
  return report


def _fetch_one(out_dir: pathlib.Path, manifest: dict[str, Any], job: Job, row: Mapping[str, Any],
               catalog: str, keep_zips: bool) -> None:
  zip_dir = out_dir / ZIP_SUBDIR
  zip_dir.mkdir(parents=True, exist_ok=True)
  zip_path = _download(job, row, zip_dir, catalog)
  try:
    files = extract_moses_zip(zip_path, out_dir, job)
  except ValueError:
    zip_path.unlink(missing_ok=True)  # Corrupt or unusable: fetch afresh next run.
    raise
  record(manifest, job, files, row["url"])
  write_manifest(out_dir, manifest)
  if not keep_zips:
    zip_path.unlink()


# ------------------------------------------------------------------------ CLI
