"""Tests of tasks/sources/opus_fetch.py (what `python -m vmsst_tasks.opus_download` runs) on hand-made OPUS-style zips; no network."""

import json
import os
import pathlib
import subprocess
import sys
import zipfile

import pytest

import vmsst_testing
from vmsst_tasks import opus_download
from vmsst_tasks.sources import opus_fetch
from vmsst_tasks.sources import opus_paper

REPO = pathlib.Path(__file__).resolve().parents[2]
# Any attempt to reach the network goes to a closed local port and fails.
NO_NETWORK = {"HTTP_PROXY": "http://127.0.0.1:9", "HTTPS_PROXY": "http://127.0.0.1:9",
              "http_proxy": "http://127.0.0.1:9", "https_proxy": "http://127.0.0.1:9",
              "NO_PROXY": "", "no_proxy": ""}


@pytest.fixture(scope="session")
def catalog_path(tmp_path_factory) -> str:
  """opustools' bundled OPUS catalog, decompressed once per session (local only)."""
  return opus_fetch.ensure_catalog(str(tmp_path_factory.getbasetemp() / "opusdata.db"))


@pytest.fixture(autouse=True)
def _no_network(monkeypatch):
  for key, value in NO_NETWORK.items():
    monkeypatch.setenv(key, value)


def make_opus_zip(path: pathlib.Path, corpus: str, l1: str, l2: str, lines1: list[str],
                  lines2: list[str], extra: bool = True) -> pathlib.Path:
  """A zip laid out like an OPUS Moses download (codes in alphabetical order)."""
  first, second = sorted((l1, l2))
  texts = {l1: lines1, l2: lines2}
  with zipfile.ZipFile(path, "w") as archive:
    for side in (first, second):
      archive.writestr(f"{corpus}.{first}-{second}.{side}", "".join(f"{t}\n" for t in texts[side]))
    if extra:
      archive.writestr("README", "OPUS readme\n")
      archive.writestr("LICENSE", "license\n")
      archive.writestr(f"{corpus}.{first}-{second}.xml", "<xml/>\n")
      archive.writestr(f"{corpus}.{first}-{second}.ids", "a\tb\n")
  return path


def read(path: pathlib.Path) -> list[str]:
  return path.read_text(encoding="utf-8").splitlines()


# -------------------------------------------------------------------- extract


@pytest.mark.parametrize("pivot,code,opus_pair", [
    ("en", "de", "de-en"),   # OPUS puts de first; the layout puts the pivot first.
    ("en", "fr", "en-fr"),   # Alphabetical order already pivot first.
    ("es", "ar", "ar-es"),
    ("en", "zh_cn", "en-zh_cn"),
])
def test_extract_renames_to_pivot_first_layout(tmp_path, pivot, code, opus_pair):
  job = opus_fetch.Job("Europarl", "v8", pivot, code)
  assert job.opus_pair == opus_pair
  zip_path = make_opus_zip(tmp_path / "in.zip", "Europarl", pivot, code,
                           [f"{pivot} {i}" for i in range(3)], [f"{code} {i}" for i in range(3)])
  out = tmp_path / "out"
  files = opus_fetch.extract_moses_zip(zip_path, out, job)
  pivot_file, other_file = f"Europarl.{pivot}-{code}.{pivot}", f"Europarl.{pivot}-{code}.{code}"
  assert sorted(p.name for p in out.iterdir()) == sorted([pivot_file, other_file])
  assert read(out / pivot_file) == [f"{pivot} {i}" for i in range(3)]
  assert read(out / other_file) == [f"{code} {i}" for i in range(3)]
  assert files[pivot_file]["lines"] == files[other_file]["lines"] == 3
  assert files[pivot_file]["bytes"] == (out / pivot_file).stat().st_size


def test_extract_counts_last_line_without_newline(tmp_path):
  zip_path = tmp_path / "in.zip"
  with zipfile.ZipFile(zip_path, "w") as archive:
    archive.writestr("Tatoeba.de-en.de", "a\nb\nc")
    archive.writestr("Tatoeba.de-en.en", "A\nB\nC\n")
  files = opus_fetch.extract_moses_zip(zip_path, tmp_path, opus_fetch.Job("Tatoeba", "v1", "en", "de"))
  assert {f["lines"] for f in files.values()} == {3}


def test_extract_rejects_misaligned_sides_and_leaves_nothing(tmp_path):
  zip_path = make_opus_zip(tmp_path / "bad.zip", "Tanzil", "en", "de", ["a", "b", "c"], ["x", "y"])
  out = tmp_path / "out"
  with pytest.raises(ValueError, match=r"bad\.zip.*Tanzil\.de-en\.en has 3 lines.*Tanzil\.de-en\.de has 2"):
    opus_fetch.extract_moses_zip(zip_path, out, opus_fetch.Job("Tanzil", "v1", "en", "de"))
  assert list(out.iterdir()) == []  # No partial or misaligned file left behind.


def test_extract_names_a_corrupt_zip(tmp_path):
  job = opus_fetch.Job("Europarl", "v8", "en", "de")
  garbage = tmp_path / "garbage.zip"
  garbage.write_bytes(b"this is not a zip")
  with pytest.raises(ValueError, match=r"garbage\.zip is not a valid zip"):
    opus_fetch.extract_moses_zip(garbage, tmp_path / "out", job)
  good = make_opus_zip(tmp_path / "good.zip", "Europarl", "en", "de", ["a"] * 50, ["b"] * 50, extra=False)
  truncated = tmp_path / "truncated.zip"
  truncated.write_bytes(good.read_bytes()[:-40])  # An interrupted download.
  with pytest.raises(ValueError, match=r"truncated\.zip is not a valid zip"):
    opus_fetch.extract_moses_zip(truncated, tmp_path / "out", job)


def test_extract_names_missing_members(tmp_path):
  zip_path = tmp_path / "only_en.zip"
  with zipfile.ZipFile(zip_path, "w") as archive:
    archive.writestr("Europarl.de-en.en", "a\n")
    archive.writestr("README", "x\n")
  with pytest.raises(ValueError, match=r"only_en\.zip: expected one.*Europarl\.de-en\.en"):
    opus_fetch.extract_moses_zip(zip_path, tmp_path / "out", opus_fetch.Job("Europarl", "v8", "en", "de"))


# ------------------------------------------------------------------- planning


def test_plan_jobs_pairs_each_language_once_and_expands_aliases():
  jobs = opus_fetch.plan_jobs(["de", "es", "zh"], ["en", "es"], {"Tatoeba": "v2021-07-22"})
  pairs = [(j.pivot, j.code) for j in jobs]
  assert pairs == [("en", "de"), ("en", "es"), ("en", "zh"), ("en", "zh_cn"), ("en", "cmn"),
                   ("es", "de"), ("es", "zh"), ("es", "zh_cn"), ("es", "cmn")]
  assert jobs[0].files == ("Tatoeba.en-de.en", "Tatoeba.en-de.de")


def test_parse_flags():
  assert opus_fetch.parse_codes("all", opus_paper.LANGUAGES, "language") == opus_paper.LANGUAGES
  assert opus_fetch.parse_codes("de, fr,de", opus_paper.LANGUAGES, "language") == ("de", "fr")
  with pytest.raises(ValueError, match="Unknown language.*xx"):
    opus_fetch.parse_codes("de,xx", opus_paper.LANGUAGES, "language")
  assert opus_fetch.parse_corpora("Europarl,Tatoeba@v2022-03-03") == {
      "Europarl": "v8", "Tatoeba": "v2022-03-03"}
  assert opus_fetch.parse_corpora("all") == dict(opus_paper.CORPUS_RELEASES)
  with pytest.raises(ValueError, match="Unknown corpus 'MultiUN'"):
    opus_fetch.parse_corpora("MultiUN")


def test_catalog_resolves_urls_offline(catalog_path):
  catalog = opus_fetch.Catalog(catalog_path)
  row = catalog.row(opus_fetch.Job("Europarl", "v8", "en", "de"))
  assert row["url"] == "https://object.pouta.csc.fi/OPUS-Europarl/v8/moses/de-en.txt.zip"
  un = catalog.row(opus_fetch.Job("UN", "v20090831", "es", "zh"))  # Filed as UNPC in the catalog.
  assert un["url"] == "https://object.pouta.csc.fi/OPUS-UN/v20090831/moses/es-zh.txt.zip"
  assert catalog.row(opus_fetch.Job("Europarl", "v8", "en", "am")) is None


# ---------------------------------------------------------- fetch + manifest


def test_fetch_extracts_writes_manifest_and_is_idempotent(tmp_path, catalog_path):
  out = tmp_path / "opus"
  zip_dir = out / opus_fetch.ZIP_SUBDIR
  zip_dir.mkdir(parents=True)
  # Named as opustools' OpusGet names the download, so nothing is fetched.
  make_opus_zip(zip_dir / "Europarl_v8_moses_de-en.txt.zip", "Europarl", "en", "de",
                ["one", "two", "three"], ["eins", "zwei", "drei"])
  jobs = opus_fetch.plan_jobs(["de"], ["en"], {"Europarl": "v8", "UN": "v20090831"})
  catalog = opus_fetch.Catalog(catalog_path)

  report = opus_fetch.fetch(out, jobs, catalog, out=open(os.devnull, "w"))
  assert report.fetched == ["Europarl v8 en-de"] and report.failed == []
  assert report.missing_from_opus == ["UN v20090831 en-de"]
  assert sorted(p.name for p in out.iterdir()) == [
      "Europarl.en-de.de", "Europarl.en-de.en", opus_paper.MANIFEST_NAME, opus_fetch.ZIP_SUBDIR]
  assert list(zip_dir.iterdir()) == []  # Zip deleted after extraction.
  manifest = json.loads((out / opus_paper.MANIFEST_NAME).read_text())
  assert manifest["line_counts"] == {"en-de": 3}
  assert manifest["files"]["Europarl.en-de.de"] == {"bytes": len("eins\nzwei\ndrei\n"), "lines": 3}
  assert manifest["pairs"]["Europarl.en-de"]["url"].endswith("OPUS-Europarl/v8/moses/de-en.txt.zip")
  assert manifest["missing_from_opus"] == ["UN.en-de"]

  mtime = (out / "Europarl.en-de.en").stat().st_mtime_ns
  again = opus_fetch.fetch(out, jobs, catalog, out=open(os.devnull, "w"))
  assert again.present == ["Europarl v8 en-de"] and again.fetched == [] and again.failed == []
  assert (out / "Europarl.en-de.en").stat().st_mtime_ns == mtime


def test_fetch_adopts_files_missing_from_the_manifest(tmp_path, catalog_path):
  out = tmp_path / "opus"
  out.mkdir()
  (out / "Tanzil.en-de.en").write_text("a\nb\n")
  (out / "Tanzil.en-de.de").write_text("x\ny\n")
  jobs = opus_fetch.plan_jobs(["de"], ["en"], {"Tanzil": "v1"})
  report = opus_fetch.fetch(out, jobs, opus_fetch.Catalog(catalog_path), out=open(os.devnull, "w"))
  assert report.present == ["Tanzil v1 en-de"]
  assert json.loads((out / opus_paper.MANIFEST_NAME).read_text())["line_counts"] == {"en-de": 2}


def test_fetch_reports_a_corrupt_download_and_deletes_it(tmp_path, catalog_path):
  out = tmp_path / "opus"
  zip_dir = out / opus_fetch.ZIP_SUBDIR
  zip_dir.mkdir(parents=True)
  bad = make_opus_zip(zip_dir / "Tatoeba_v2021-07-22_moses_de-en.txt.zip", "Tatoeba", "en", "de",
                      ["a", "b"], ["c"])
  jobs = opus_fetch.plan_jobs(["de"], ["en"], {"Tatoeba": "v2021-07-22"})
  report = opus_fetch.fetch(out, jobs, opus_fetch.Catalog(catalog_path), out=open(os.devnull, "w"))
  assert len(report.failed) == 1 and str(bad) in report.failed[0]
  assert not bad.exists()
  assert not (out / "Tatoeba.en-de.en").exists()


def test_command_with_corpora_pivots_and_keep_zips_extracts_and_keeps_the_zip(tmp_path,
                                                                             catalog_path, capfd):
  """Typed (in this process), offline: the zip is already where the download would put it."""
  out = tmp_path / "opus"
  zip_dir = out / opus_fetch.ZIP_SUBDIR
  zip_dir.mkdir(parents=True)
  kept = make_opus_zip(zip_dir / "Europarl_v8_moses_de-en.txt.zip", "Europarl", "en", "de",
                       ["one", "two"], ["eins", "zwei"])
  done = vmsst_testing.run_here(opus_download, [
      f"--output={out}", "--languages=de", "--pivots=en", "--corpora=Europarl@v8", "--keep_zips",
      f"--opus_db={catalog_path}"], capfd)
  assert done.returncode == 0, done.stderr[-2000:]
  assert "(1 jobs, 1 languages, pivots en, corpora Europarl@v8)" in done.stdout
  assert (out / "Europarl.en-de.de").read_text() == "eins\nzwei\n"
  assert kept.exists()


# -------------------------------------------------------------------- dry run


def test_dry_run_command_lists_urls_without_network_or_writes(tmp_path, catalog_path):
  out = tmp_path / "never_created"
  result = subprocess.run(
      [sys.executable, "-m", "vmsst_tasks.opus_download", f"--output={out}", "--languages=de,am",
       "--dry_run", f"--opus_db={catalog_path}"],
      cwd=REPO, env={**os.environ, **NO_NETWORK}, capture_output=True, text=True, timeout=120,
      check=False)
  assert result.returncode == 0, result.stderr
  lines = result.stdout.splitlines()
  assert ("[fetch]   Europarl v8 en-de: https://object.pouta.csc.fi/OPUS-Europarl/v8/moses/"
          "de-en.txt.zip (206.8 MB) -> Europarl.en-de.{en,de}") in lines
  assert any(l.startswith("[fetch]   Tanzil v1 es-am: https://object.pouta.csc.fi/OPUS-Tanzil/v1/"
                          "moses/am-es.txt.zip") for l in lines)
  assert "[missing] Europarl v8 en-am: not in the OPUS catalog" in lines
  assert lines[-1].startswith("Dry run: 15 to fetch")
  assert "24 jobs, 2 languages" in lines[-1]
  assert not out.exists()


def test_dry_run_marks_complete_pairs_present(tmp_path, catalog_path):
  out = tmp_path / "opus"
  zip_dir = out / opus_fetch.ZIP_SUBDIR
  zip_dir.mkdir(parents=True)
  make_opus_zip(zip_dir / "Tanzil_v1_moses_de-en.txt.zip", "Tanzil", "en", "de", ["a"], ["b"])
  jobs = opus_fetch.plan_jobs(["de"], ["en"], {"Tanzil": "v1", "GlobalVoices": "v2018q4"})
  catalog = opus_fetch.Catalog(catalog_path)
  opus_fetch.fetch(out, jobs[:1], catalog, out=open(os.devnull, "w"))
  log = tmp_path / "log.txt"
  with open(log, "w") as f:
    report = opus_fetch.fetch(out, jobs, catalog, dry_run=True, out=f)
  assert report.present == ["Tanzil v1 en-de"] and report.fetched == ["GlobalVoices v2018q4 en-de"]
  assert "[present] Tanzil v1 en-de: Tanzil.en-de.en, Tanzil.en-de.de" in log.read_text()


def test_fetch_reports_a_failed_download(tmp_path, catalog_path, capsys):
  # The proxy variables point at a closed port, so opustools' urlretrieve fails.
  jobs = opus_fetch.plan_jobs(["am"], ["en"], {"Tatoeba": "v2021-07-22"})
  report = opus_fetch.fetch(tmp_path / "opus", jobs, opus_fetch.Catalog(catalog_path),
                               out=open(os.devnull, "w"))
  assert report.failed == ["Tatoeba v2021-07-22 en-am: Download of https://object.pouta.csc.fi/"
                           "OPUS-Tatoeba/v2021-07-22/moses/am-en.txt.zip failed (see the message "
                           "above); run again."]
  assert "Unable to retrieve" in capsys.readouterr().out  # opustools' own message.
  assert list((tmp_path / "opus" / opus_fetch.ZIP_SUBDIR).iterdir()) == []
