"""Tests of vmsst/base/languages.py: canonical codes, their errors and the symbol list."""

import re

import pytest

from vmsst.base import languages


@pytest.mark.parametrize("code, expected", [
    ("de", "deu"), ("en", "eng"), ("deu", "deu"), ("DEU", "deu"),       # ISO 639-1 / -3, any case
    ("zh_cn", "zho-CN"), ("zh_TW", "zho-TW"), ("zh", "zho-CN"),         # OPUS Chinese
    ("pt_br", "por-BR"), ("pt", "por"), ("es_MX", "spa-MX"),             # OPUS regional variants
    ("aze-latn", "aze-Latn"), ("az", "aze-Latn"), ("ar", "arb"),        # NTREX scripted codes
    ("lvs", "lav"), ("swh", "swa"), ("zsm", "msa"), ("cmn", "zho-CN"),  # Tatoeba individual codes
    ("pes", "fas"), ("tgl", "fil"), ("tl", "fil"), ("srp", "srp"), ("sr", "srp"),
    ("eng-GB", "eng"), ("no", "nob"), ("iw", "heb"), (" fr ", "fra"),
])
def test_canonical_language(code, expected):
  assert languages.canonical_language(code) == expected


@pytest.mark.parametrize("code", ["xx", "klingon", "", "de-xx"])
def test_unknown_code_error_names_code_and_fix(code):
  with pytest.raises(ValueError) as error:
    languages.canonical_language(code)
  assert repr(code) in str(error.value)
  assert "_EXTRA_LANGUAGES" in str(error.value) and "language id" in str(error.value)


def test_language_index_is_the_position_in_languages_for_any_spelling():
  assert languages.language_index("deu") == languages.language_index("de") == 43
  assert languages.LANGUAGES[languages.language_index("zh_cn")] == "zho-CN"
  assert sorted(languages.LANGUAGE_INDEX.values()) == list(range(len(languages.LANGUAGES)))
  with pytest.raises(ValueError, match="Unknown language code 'xx'"):
    languages.language_index("xx")


def test_language_token():
  assert languages.language_token("deu") == "<2deu>"
  assert languages.language_token("de") == "<2deu>"
  assert languages.language_token("zh_cn") == "<2zho-CN>"
  with pytest.raises(ValueError, match="'xx'"):
    languages.language_token("xx")


def test_languages_is_sorted_unique_and_canonical():
  assert list(languages.LANGUAGES) == sorted(set(languages.LANGUAGES))
  assert all(languages.canonical_language(code) == code for code in languages.LANGUAGES)
  assert len(languages.LANGUAGES) == 224  # Hand-counted when written; update when adding one.


def test_languages_cover_ntrex_files_except_english_rewrites(data_dir):
  names = [p.name for p in (data_dir / "ntrex128").glob("newstest2019-ref.*.txt.gz")]
  codes = {re.fullmatch(r"newstest2019-ref\.(.+)\.txt\.gz", n)[1] for n in names}
  assert len(codes) == 127 and {"eng-GB", "eng-IN", "eng-US"} <= codes
  assert codes - set(languages.LANGUAGES) == {"eng-GB", "eng-IN", "eng-US"}
  assert "eng" in languages.LANGUAGES


def test_languages_cover_tatoeba_and_multi30k(data_dir):
  on_disk = {p.name.split(".")[1].split("-")[0] for p in (data_dir / "tatoeba" / "v1").glob("tatoeba.*-eng.*")}
  assert len(on_disk) == 56
  for code in on_disk | set(languages.TATOEBA_CODES) | {"en", "de", "fr", "cs"}:
    assert languages.canonical_language(code) in languages.LANGUAGES, code


def test_every_iso_639_1_code_has_a_symbol():
  assert len(languages._ISO_639_1) == 189  # 183 current + 6 deprecated OPUS spellings.
  for code in languages._ISO_639_1:
    assert languages.canonical_language(code) in languages.LANGUAGES
