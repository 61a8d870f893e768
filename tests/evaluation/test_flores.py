"""FLORES layout and xsim: a folder built from NTREX, one-hot hand cases, codes, layouts."""

import logging

import numpy as np
import pytest

from vmsst_tasks.sources import pair_readers
from vmsst.encoding import protocol
from vmsst.evaluation import flores
from vmsst.base import text_files

N = 12  # lines per file
# FLORES file-name code -> the NTREX file whose first N lines it holds. ace_Arab
# (Acehnese in Arabic script) is unknown to vmsst.base.languages; NTREX's Arabic
# stands in for its text, so retrieval itself works.
CODES = {"eng_Latn": "eng", "deu_Latn": "deu", "zho_Hant": "zho-TW", "srp_Cyrl": "srp-Cyrl",
         "ace_Arab": "arb"}


def _ntrex_lines(data_dir, codes=CODES, n=N) -> dict[str, list[str]]:
  files = pair_readers.ntrex_files(data_dir)
  return {code: text_files.read_lines(files[ntrex])[:n] for code, ntrex in codes.items()}


def _write(folder, split, texts):
  folder.mkdir(parents=True, exist_ok=True)
  for code, lines in texts.items():
    (folder / f"{code}.{split}").write_text("".join(s + "\n" for s in lines), encoding="utf-8")


def _one_hot(texts) -> protocol.UniqueSentences:
  """Every sentence on NTREX line i embeds as e_i: the identity on the line index."""
  table = {}
  for lines in texts.values():
    for i, sentence in enumerate(lines):
      assert table.setdefault(sentence, i) == i, f"{sentence!r} is on two NTREX lines"
  size = max(table.values()) + 1
  return protocol.UniqueSentences(
      protocol.PrecomputedEncoder({s: np.eye(size)[i] for s, i in table.items()}),
      progress=False)


def test_identity_is_error_free_and_a_rotated_side_gives_its_error(data_dir, tmp_path, caplog):
  texts = _ntrex_lines(data_dir)
  encoder = _one_hot(texts)
  rotated = dict(texts)
  # German lines 0, 1, 2 hold NTREX lines 1, 2, 0: each of the three retrieves the
  # English line of its own content, a wrong index, both ways and under both
  # scorings (one-hot: cosine 1 to the match, 0 to the rest).
  rotated["deu_Latn"] = texts["deu_Latn"][1:3] + texts["deu_Latn"][:1] + texts["deu_Latn"][3:]
  _write(tmp_path / "flores200_dataset" / "devtest", "devtest", rotated)
  with caplog.at_level(logging.WARNING):
    results = flores.evaluate(encoder, tmp_path / "flores200_dataset")
  deu = results["deu_Latn"]
  for key in ("xx2en", "en2xx", "xx2en_margin", "en2xx_margin", "avg", "avg_margin"):
    assert deu[key] == pytest.approx(100 * 3 / N), key  # 25.0
    for code in ("zho_Hant", "srp_Cyrl", "ace_Arab"):
      assert results[code][key] == 0, (code, key)
  assert deu["n"] == N and deu["language"] == "deu"
  assert results["zho_Hant"]["language"] == "zho-TW"  # not zho-CN, which `zho` alone maps to
  assert results["srp_Cyrl"]["language"] == "srp-Cyrl"
  assert "eng_Latn" not in results and results["_english"] == "eng_Latn"
  assert results["_split"] == "devtest" and results["_k"] == 4
  assert results["_languages"] == 4 and results["_mean"] == pytest.approx(25 / 4)
  # Trained on (NTREX-128 + Multi30k by default): deu, zho-TW, srp-Cyrl; the rest: ace_Arab.
  assert results["_training"] == {"mean": pytest.approx(25 / 3),
                                   "mean_margin": pytest.approx(25 / 3),
                                   "languages": ["deu_Latn", "srp_Cyrl", "zho_Hant"]}
  assert results["_rest"] == {"mean": 0.0, "mean_margin": 0.0, "languages": ["ace_Arab"]}
  # The unknown code is evaluated, listed in the results, the log and the table.
  assert results["ace_Arab"]["language"] is None and results["_unknown"] == ["ace_Arab"]
  assert "ace_Arab" in caplog.text
  markdown = flores.table(results)
  assert "| ace_Arab | unknown | 0.0 | 0.0 | 0.0 | 0.0 | 12 |" in markdown
  assert "| deu_Latn | deu | 25.0 | 25.0 | 25.0 | 25.0 | 12 |" in markdown
  assert "| trained on | 3 | 8.3 | 8.3 |" in markdown
  assert "unknown to vmsst.base.languages" in markdown
  # Given training languages replace the default.
  results = flores.evaluate(encoder, tmp_path, training_languages=["de"])
  assert results["_training"]["languages"] == ["deu_Latn"]
  assert results["_rest"]["mean"] == 0.0


def test_codes_map_to_vmsst_languages():
  assert flores.canonical("eng_Latn") == flores.canonical("eng") == "eng"
  assert flores.canonical("zho_Hans") == "zho-CN" and flores.canonical("zho_Hant") == "zho-TW"
  assert flores.canonical("pes_Arab") == "fas" and flores.canonical("aze_Latn") == "aze-Latn"
  assert flores.canonical("ace_Arab") is None and flores.canonical("ace_Latn") is None


def test_flores101_codes_flat_folder_and_split(data_dir, tmp_path):
  # A flat folder of FLORES-101 files (plain ISO 639-3), dev of 5 lines, devtest of 12;
  # French dev is rotated by one line: every line wrong.
  codes = {"eng": "eng", "fra": "fra"}
  texts = _ntrex_lines(data_dir, codes)
  encoder = _one_hot(texts)
  _write(tmp_path, "devtest", texts)
  dev = {code: lines[:5] for code, lines in texts.items()}
  dev["fra"] = dev["fra"][1:] + dev["fra"][:1]
  _write(tmp_path, "dev", dev)
  assert flores.evaluate(encoder, tmp_path)["fra"]["xx2en"] == 0  # devtest first
  results = flores.evaluate(encoder, tmp_path, split="dev")
  assert results["_split"] == "dev" and results["fra"]["n"] == 5
  assert results["fra"]["xx2en"] == results["fra"]["en2xx_margin"] == 100


def test_layout_errors_name_files_and_fix(data_dir, tmp_path):
  texts = _ntrex_lines(data_dir, {"eng_Latn": "eng", "deu_Latn": "deu"})
  with pytest.raises(FileNotFoundError, match=r"no FLORES files <code>\.devtest or \.dev .*"
                                              r"flores200_dataset\.tar\.gz.*--split"):
    flores.evaluate(_one_hot(texts), tmp_path)
  _write(tmp_path / "devtest", "devtest", texts)
  with pytest.raises(FileNotFoundError, match=r"<code>\.dev under"):
    flores.evaluate(_one_hot(texts), tmp_path, split="dev")
  (tmp_path / "devtest" / "fra_Latn.devtest").write_text("one line\n")
  with pytest.raises(ValueError, match=r"fra_Latn\.devtest has 1 lines but .*deu_Latn\.devtest "
                                       r"has 12; FLORES files are line-aligned"):
    flores.evaluate(_one_hot(texts), tmp_path)
  (tmp_path / "devtest" / "fra_Latn.devtest").unlink()
  (tmp_path / "devtest" / "eng_Latn.devtest").rename(tmp_path / "devtest" / "ace_Latn.devtest")
  with pytest.raises(ValueError, match=r"exactly one English file .* found none"):
    flores.evaluate(_one_hot(texts), tmp_path)
