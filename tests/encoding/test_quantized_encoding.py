"""--precision end to end on a trained directory: calibrate, Encoder.encode, embed, mine, export.

A copy of the session's tiny model (4 steps: parity, not quality, is tested) is
calibrated once; the SavedModel's serving_<precision> signatures must give the
codes `Encoder.encode(precision=)` gives from the same export's float vectors.
"""

import json
import pathlib
import shutil

import numpy as np
import pytest
import tensorflow as tf

import vmsst
import vmsst_testing
from vmsst import calibrate
from vmsst import embed
from vmsst import export as export_command
from vmsst import mine
from vmsst.base import run_directory
from vmsst.encoding import calibration as calibration_lib
from vmsst.encoding import embed_files
from vmsst.export_formats import export_flags
from vmsst.export_formats import saved_model as export
from vmsst.encoding import encoder_flags
from vmsst.encoding import protocol
from vmsst.encoding import quantize

pytestmark = pytest.mark.slow  # an export and a calibration of a trained model

SENTENCES = ["A man rides a bicycle.", "Ein Mann fährt mit dem Fahrrad über die Brücke.",
             "Мужчина едет на велосипеде.", "一个男人骑着自行车过桥。", "", "x" * 300,
             "रजल", "Der Hund schläft.", "The dog sleeps.", "Le chien dort."]


def _calibration_set(folder) -> str:
  """calibration.txt in `folder`: SENTENCES twice and 50 more (59 distinct, 60 with "")."""
  path = folder / "calibration.txt"
  path.write_text("\n".join(SENTENCES * 2 + [f"Satz {i}." for i in range(50)]), encoding="utf-8")
  return path


@pytest.fixture(scope="module")
def model_dir(tiny_model, tmp_path_factory):
  """A calibrated copy of the tiny model (the session's stays uncalibrated)."""
  copy = tmp_path_factory.mktemp("quantized") / "model"
  shutil.copytree(tiny_model[0], copy)
  calibration_set = _calibration_set(copy.parent)
  get_encoder = lambda: protocol.UniqueSentences(encoder_flags.make_encoder(model_dir=str(copy)))
  summary = calibration_lib.calibrate_file(get_encoder, str(calibration_set), str(copy))
  assert "59 distinct sentences" in summary  # SENTENCES less the empty line, and 50
  return copy


@pytest.fixture(scope="module")
def exported(model_dir):
  output = model_dir.parent / "export"
  metadata = export.export(str(model_dir), str(output))
  return output, metadata


def test_encode_at_each_precision_is_the_float_vectors_quantized_by_the_calibration(model_dir):
  encoder = vmsst.Encoder.from_checkpoint(str(model_dir))
  calibration = quantize.load(str(model_dir))
  vectors = encoder.encode(SENTENCES)
  for normalize in (False, True):
    floats = encoder.encode(SENTENCES, normalize=normalize)
    for precision in quantize.PRECISIONS:
      codes = encoder.encode(SENTENCES, precision=precision, normalize=normalize)
      assert codes.dtype == quantize.output_dtype(precision)
      assert codes.shape == (len(SENTENCES), quantize.code_width(precision, vectors.shape[1]))
      np.testing.assert_array_equal(codes, quantize.quantize(
          floats, precision, calibration.ranges_for(normalize)))
  assert encoder.encode(SENTENCES[0], precision="binary").shape == (vectors.shape[1] // 8,)


def test_encode_int8_without_a_calibration_names_the_command(tiny_model):
  encoder = vmsst.Encoder.from_checkpoint(str(tiny_model[0]))
  with pytest.raises(ValueError, match="vmsst.calibrate"):
    encoder.encode(SENTENCES, precision="int8")
  with pytest.raises(ValueError, match="ubinary"):
    encoder.encode(SENTENCES, precision="int4")


@pytest.mark.parametrize("precision", quantize.PRECISIONS)
def test_embed_file_writes_each_precisions_dtype_and_shape(model_dir, tmp_path, precision):
  lines = tmp_path / "lines.txt"
  lines.write_text("\n".join(SENTENCES), encoding="utf-8")
  get_encoder = lambda: protocol.UniqueSentences(
      encoder_flags.make_encoder(model_dir=str(model_dir)))
  summary = embed_files.embed_file(get_encoder, lines, tmp_path / "out.npy", precision=precision,
                             calibration_dir=str(model_dir))
  written = np.load(tmp_path / "out.npy")
  assert written.dtype == quantize.output_dtype(precision)
  assert written.shape == (len(SENTENCES), quantize.code_width(precision, summary.dim))
  assert f"{quantize.output_dtype(precision).name} [{len(SENTENCES)}, {written.shape[1]}]" in str(
      summary)


def test_calibrate_then_embed_int8_on_the_command_line(tiny_model, model_dir, tmp_path, capfd):
  """Typed as the README shows: embed --precision=int8 on an uncalibrated model is one error
  line naming vmsst.calibrate; `calibrate` writes the fixture's calibration (same sentences);
  then embed writes the float vectors' codes by it."""
  copy = tmp_path / "model"
  shutil.copytree(tiny_model[0], copy)
  lines = tmp_path / "lines.txt"
  lines.write_text("\n".join(SENTENCES), encoding="utf-8")
  embed_int8 = lambda: vmsst_testing.run_here(embed, [
      f"--model_dir={copy}", f"--input={lines}", f"--output={tmp_path / 'int8.npy'}",
      "--precision=int8"], capfd)
  vmsst_testing.assert_user_error(embed_int8(), "vmsst.calibrate", run_directory.CALIBRATION)
  done = vmsst_testing.run_here(
      calibrate, [f"--model_dir={copy}", f"--input={_calibration_set(tmp_path)}"], capfd)
  assert done.returncode == 0, done.stderr[-2000:]
  written, fixture = quantize.load(str(copy)), quantize.load(str(model_dir))
  assert written.sentences == fixture.sentences == 59
  np.testing.assert_allclose(written.ranges, fixture.ranges, atol=1e-6)
  done = embed_int8()
  assert done.returncode == 0, done.stderr[-2000:]
  assert "int8: int8 [10," in done.stdout
  codes = np.load(tmp_path / "int8.npy")
  want = quantize.quantize(vmsst.Encoder.from_checkpoint(str(copy)).encode(SENTENCES), "int8",
                           written.ranges)
  assert codes.dtype == np.int8 and codes.shape == want.shape
  # Another batching of the same model rounds in the last bits: a bucket's edge moves by one.
  assert np.abs(codes.astype(int) - want.astype(int)).max() <= 1
  assert np.mean(codes != want) < 0.02


def _mine_rows(capfd, *args: str, ranges: str = "") -> list[str]:
  """`python -m vmsst.mine ARGS` in this process: its --output's lines; its summary names the
  int8 `ranges` it used ("calibration", "two sides") where given."""
  done = vmsst_testing.run_here(mine, args, capfd)
  assert done.returncode == 0, done.stderr[-2000:]
  assert ranges in done.stdout, done.stdout
  output = [a.split("=", 1)[1] for a in args if a.startswith("--output=")][-1]
  return pathlib.Path(output).read_text(encoding="utf-8").splitlines()


def test_mine_precision_flags_with_a_calibration_mine_the_float_pairs(model_dir, data_dir,
                                                                       tmp_path, capfd):
  """--precision=int8 (the model's calibration), binary and ubinary: with candidates as deep as
  the sides (--rescore_multiplier x --k = 12 rows), the float re-rank sees every key, so the
  pairs and scores are the float search's, to the digit; so too at --truncate_dim."""
  german, english = vmsst_testing.ntrex_translations(data_dir, 12)
  (tmp_path / "de.txt").write_text("\n".join(german) + "\n", encoding="utf-8")
  (tmp_path / "en.txt").write_text("\n".join(english[::-1]) + "\n", encoding="utf-8")
  common = [f"--model_dir={model_dir}", f"--src={tmp_path / 'de.txt'}",
            f"--trg={tmp_path / 'en.txt'}", "--k=2"]
  floats = _mine_rows(capfd, *common, f"--output={tmp_path / 'float32.tsv'}")
  assert floats
  for precision in ("int8", "binary", "ubinary"):
    rows = _mine_rows(capfd, *common, f"--precision={precision}", "--rescore_multiplier=6",
                      f"--output={tmp_path / precision}.tsv",
                      ranges="ranges of the model's calibration" if precision == "int8" else "")
    assert rows == floats, precision
  # A prefix renormalised has other ranges than the calibration's full vectors: int8 at
  # --truncate_dim measures the two sides' own, as without a calibration.
  cut = _mine_rows(capfd, *common, "--truncate_dim=8", f"--output={tmp_path / 'cut.tsv'}")
  assert _mine_rows(capfd, *common, "--truncate_dim=8", "--precision=int8",
                    "--rescore_multiplier=6", f"--output={tmp_path / 'cut_int8.tsv'}",
                    ranges="ranges measured on the two sides") == cut


def test_mine_int8_without_a_calibration_uses_the_sides_and_a_broken_one_names_calibrate(
    tiny_model, model_dir, tmp_path, capfd):
  """mine's documented rule: no calibration beside the model, the two sides' own ranges (the
  codes are compared within this one search only); an unreadable one is one error line
  naming the file and vmsst.calibrate."""
  (tmp_path / "de.txt").write_text("\n".join(SENTENCES[:4]) + "\n", encoding="utf-8")
  (tmp_path / "en.txt").write_text("\n".join(SENTENCES[7:]) + "\n", encoding="utf-8")
  common = [f"--src={tmp_path / 'de.txt'}", f"--trg={tmp_path / 'en.txt'}", "--k=1",
            "--precision=int8", f"--output={tmp_path / 'pairs.tsv'}"]
  assert _mine_rows(capfd, f"--model_dir={tiny_model[0]}", *common,
                    ranges="ranges measured on the two sides")
  broken = tmp_path / "broken"
  shutil.copytree(model_dir, broken)
  (broken / run_directory.CALIBRATION).write_text("{}", encoding="utf-8")
  done = vmsst_testing.run_here(mine, [f"--model_dir={broken}", *common], capfd)
  vmsst_testing.assert_user_error(done, run_directory.CALIBRATION, "vmsst.calibrate")


def test_saved_model_precision_signatures_equal_encoder_encode(exported, model_dir):
  output, metadata = exported
  assert {f"serving_{p}" for p in quantize.PRECISIONS[1:]} <= set(metadata["signatures"])
  assert quantize.load(str(output / export.EXTRA_DIR)).sentences == 59
  loaded = tf.saved_model.load(str(output))
  encoder = vmsst.Encoder.from_saved_model(str(output))
  checkpoint_encoder = vmsst.Encoder.from_checkpoint(str(model_dir))
  for precision in quantize.PRECISIONS[1:]:
    served = loaded.signatures[f"serving_{precision}"](
        text=tf.constant(SENTENCES))["embeddings"].numpy()
    # One call of the whole batch, as the signature got: the same float vectors.
    np.testing.assert_array_equal(served, encoder.encode(SENTENCES, precision=precision,
                                                         batch_size=len(SENTENCES)))
    from_checkpoint = checkpoint_encoder.encode(SENTENCES, precision=precision)
    assert from_checkpoint.dtype == served.dtype and from_checkpoint.shape == served.shape
    # The checkpoint and the exported graph round differently in the last bits: a value at a
    # bucket's edge moves by one bucket (int8), one near 0 flips its bit (binary), rarely.
    if precision.endswith("int8"):
      assert np.abs(from_checkpoint.astype(int) - served.astype(int)).max() <= 1
    assert np.mean(from_checkpoint != served) < 0.1, precision


def test_export_calibration_flag_measures_the_ranges_at_export(model_dir, tmp_path, capfd):
  """`export --calibration` typed (in this process), with --dtype and --platforms: the
  export's record says what they asked for."""
  uncalibrated = tmp_path / "model"
  shutil.copytree(model_dir, uncalibrated)
  (uncalibrated / run_directory.CALIBRATION).unlink()
  sentences = tmp_path / "calibration.txt"
  sentences.write_text("\n".join(f"Sentence number {i}." for i in range(30)), encoding="utf-8")
  done = vmsst_testing.run_here(export_command, [
      f"--model_dir={uncalibrated}", f"--output={tmp_path / 'export'}",
      f"--calibration={sentences}", "--dtype=bfloat16", "--platforms=cpu"], capfd,
      define=export_flags.define)
  assert done.returncode == 0, done.stderr[-2000:]
  metadata = json.loads((tmp_path / "export" / export.EXTRA_DIR / export.METADATA_FILE).read_text())
  assert (metadata["dtype"], metadata["platforms"]) == ("bfloat16", ["cpu"])
  assert "serving_int8" in metadata["signatures"]
  saved = quantize.load(str(tmp_path / "export" / export.EXTRA_DIR))
  assert (saved.sentences, saved.source) == (30, "calibration.txt")
