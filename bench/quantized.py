r"""Quantized embeddings measured: retrieval, mining F1, bytes per vector and search time.

  .venv/bin/python bench/quantized.py --model_dir=MODEL_DIR --data_dir=../shared/data \
      --output=docs/results/quantized

For each precision of vmsst/encoding/quantize.py (sentence-transformers' layouts):

- Tatoeba retrieval (--languages, both directions averaged): by the codes
  alone (float32: cosine; int8/uint8: cosine of the decoded bucket centres;
  binary/ubinary: Hamming distance, faiss IndexBinaryFlat), and with each
  query's --rerank_depth candidates re-ranked by float cosine
  (vmsst/mining/quantized.py, what `mine --precision` does).
- Mining F1 on NTREX's held-out documents with planted pairs: English
  sentences against the translations of half of them (the other half has
  none), margin ratio, max retrieval, k=4, F1 at the best threshold (an
  oracle threshold: the same for every precision, so the comparison is fair).
- Bytes per vector, and the time of the neighbour search of mining (both
  directions, k=4) between Multi30k's training sides (--speed_sentences each).

The int8 calibration is measured on --calibration_lines of Multi30k's training
sentences (English and German), saved beside the model (quantization.json).
Writes results.json and README.md in --output.
"""

import json
import pathlib
import shlex
import sys
import time

from absl import app
from absl import flags
import numpy as np

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))
# pylint: disable=wrong-import-position
import vmsst
from vmsst.base import files
from vmsst.mining import bitext
from vmsst.base import text_files
from vmsst.encoding import quantize
from vmsst.encoding import similarity
from vmsst.evaluation import tatoeba
from vmsst.mining import quantized
from vmsst_tasks.sources import heldout
from bench import common

FLAGS = flags.FLAGS
flags.DEFINE_string("model_dir", None, "A trained model directory (python -m vmsst.train).")
flags.DEFINE_string("data_dir", "../shared/data", "The shared data directory.")
flags.DEFINE_string("output", "docs/results/quantized", "Where results.json and README.md go.")
flags.DEFINE_list("languages", ["deu", "fra", "ces", "swh", "ukr", "fin", "est", "ind"],
                  "Tatoeba languages (each against English).")
flags.DEFINE_list("mining_languages", ["deu", "fra", "rus", "zho-CN", "arb", "hin"],
                  "NTREX held-out languages mined against English.")
flags.DEFINE_integer("calibration_lines", 2000, "Multi30k training lines per language.")
flags.DEFINE_integer("rerank_depth", 10, "Candidates per query re-ranked by float cosine.")
flags.DEFINE_integer("speed_sentences", 20000, "Sentences per side of the timed search.")
flags.DEFINE_string("model_command", "", "How --model_dir was trained (for the page).")
flags.DEFINE_integer("repeats", 3, "Timed searches per precision; the least is kept.")
flags.mark_flags_as_required(["model_dir"])

PRECISIONS = quantize.PRECISIONS


def code_similarity(queries: np.ndarray, keys: np.ndarray, precision: str,
                    ranges: np.ndarray | None) -> np.ndarray:
  """Each query's nearest key by the codes alone: int64 [n] (ties to the lower index)."""
  if precision == "float32":
    sims = similarity.cosine_matrix(queries, keys)
  elif precision in quantize.CALIBRATED:
    decode = lambda x: similarity.normalize(quantize.dequantize(x, precision, ranges))
    sims = decode(queries) @ decode(keys).T
  else:
    dim = keys.shape[1] * 8
    signs = lambda x: quantize.unpacked_signs(x, precision, dim)
    sims = signs(queries) @ signs(keys).T  # = dim - 2 * Hamming distance
  return np.argmax(sims, axis=1)


def retrieval(encoder, calibration, other: list[str], english: list[str]) -> dict:
  """Accuracy (%) by the codes alone and with the float re-rank, per precision."""
  x, y = (similarity.normalize(encoder.encode(s, batch_size=256)) for s in (other, english))
  ranges = calibration.normalized_ranges
  rows = np.arange(len(x))
  out = {}
  for precision in PRECISIONS:
    codes = [quantize.quantize(v, precision, ranges if precision in quantize.CALIBRATED
                               else None) for v in (x, y)]
    coarse = np.mean([np.mean(code_similarity(codes[0], codes[1], precision, ranges) == rows),
                      np.mean(code_similarity(codes[1], codes[0], precision, ranges) == rows)])
    entry = {"codes_only": 100 * float(coarse)}
    if precision != "float32":
      search = quantized.QuantizedSearch(precision, FLAGS.rerank_depth, ranges)
      hood = quantized.neighbourhoods(x, y, 1, search)
      entry["reranked"] = 100 * float(np.mean([np.mean(hood[1][:, 0] == rows),
                                               np.mean(hood[3][:, 0] == rows)]))
    out[precision] = entry
  return out


def best_f1(pairs: np.ndarray, gold: set[tuple[int, int]]) -> float:
  """F1 (%) at the best threshold of pairs ordered best first."""
  hits = np.cumsum([tuple(p) in gold for p in pairs.tolist()])
  if not len(hits):
    return 0.0
  found = np.arange(1, len(hits) + 1)
  f1 = 2 * hits / (found + len(gold))
  return 100 * float(f1.max())


def mining_f1(encoder, calibration, english: list[str], other: list[str]) -> dict:
  """Planted mining: all English sentences against the translations of the first half."""
  half = len(english) // 2
  x = encoder.encode(english, batch_size=256)
  y = encoder.encode(other[:half], batch_size=256)
  gold = {(i, i) for i in range(half)}
  out = {}
  for precision in PRECISIONS:
    search = None if precision == "float32" else quantized.QuantizedSearch(
        precision, 4, calibration.normalized_ranges)
    pairs, _ = bitext.mine(x, y, k=4, quantized_search=search)
    out[precision] = best_f1(pairs, gold)
  return out


def search_times(encoder, calibration, data_dir: pathlib.Path) -> dict:
  """Seconds of mining's neighbour search (both directions, k=4) between Multi30k's sides."""
  sides = [text_files.read_lines(data_dir / "multi30k" / f"train.{code}.gz")
           [:FLAGS.speed_sentences] for code in ("en", "de")]
  x, y = (encoder.encode(s, batch_size=256) for s in sides)
  out = {"sentences": [len(x), len(y)]}
  for precision in PRECISIONS:
    search = None if precision == "float32" else quantized.QuantizedSearch(
        precision, 4, calibration.normalized_ranges)
    options = {"backend": "faiss"} if search is None else {"quantized_search": search}
    times = []
    for _ in range(FLAGS.repeats):  # the least of a few: the machine is shared
      start = time.perf_counter()
      bitext.neighbourhoods(x, y, 4, **options)
      times.append(time.perf_counter() - start)
    out[precision] = min(times)
  return out


def calibrate(encoder, data_dir: pathlib.Path) -> quantize.Calibration:
  lines = [line for code in ("en", "de") for line in text_files.read_lines(
      data_dir / "multi30k" / f"train.{code}.gz")[-FLAGS.calibration_lines:]]
  sentences = list(dict.fromkeys(s for s in lines if s.strip()))
  calibration = quantize.calibrate(encoder.encode(sentences, batch_size=256),
                                   "multi30k train.en/.de (last lines)")
  quantize.save(FLAGS.model_dir, calibration)
  return calibration


def ntrex_held_out(data_dir: pathlib.Path) -> dict[str, tuple[list[str], list[str]]]:
  sets = heldout.retrieval_sets(str(data_dir), max_pairs=10**6)
  return {code: sets[f"ntrex_val.eng-{code}"] for code in FLAGS.mining_languages}


def render(results: dict) -> str:
  dim = results["dimension"]
  lines = ["# Quantized embeddings: retrieval, mining F1, size and search time", "",
           "Written by:", "", f"    {results['command']}", "",
           f"Model: `{results['model']}` ({dim} dimensions). Calibration (int8/uint8 ranges): "
           f"{results['calibration']}. Codes are sentence-transformers' layouts "
           "(`vmsst/encoding/quantize.py`).", "",
           *([f"The model was trained by `{results['model_command']}`.", ""]
             if results.get("model_command") else []),
           "| precision | bytes / vector | held-out acc. (codes only) | held-out acc. "
           f"(top {FLAGS.rerank_depth} re-ranked) | Tatoeba acc. (codes only) | Tatoeba acc. "
           f"(top {FLAGS.rerank_depth} re-ranked) | NTREX planted mining F1 (4k re-ranked) "
           "| search time (s, least of --repeats) |", "|---|---|---|---|---|---|---|---|"]
  for precision in PRECISIONS:
    tat, held = results["tatoeba_mean"][precision], results["heldout_mean"][precision]
    lines.append(
        f"| {precision} | {quantize.bytes_per_vector(precision, dim)} | "
        f"{held['codes_only']:.2f} | {held['reranked']:.2f} | "
        f"{tat['codes_only']:.2f} | {tat['reranked']:.2f} | "
        f"{results['mining_f1_mean'][precision]:.2f} | "
        f"{results['search_seconds'][precision]:.2f} |")
  sizes = results["search_seconds"]["sentences"]
  lines += ["", "Held-out: the training run's in-training retrieval sets (Multi30k test 2016 "
            "eng-deu/fra/ces and NTREX validation documents, eng against 9 languages; 500 "
            "pairs each, `tasks/sources/heldout.py`), mean accuracy (%) of both directions. "
            f"Tatoeba: mean over {', '.join(FLAGS.languages)} (both directions; "
            "per language in `results.json`). Mining: NTREX held-out documents, English against "
            f"the translations of half of them, mean over {', '.join(FLAGS.mining_languages)}; "
            "F1 at the best threshold (the same oracle for every precision). Search time: "
            f"mining's k=4 neighbour search both ways between {sizes[0]:,} and {sizes[1]:,} "
            "Multi30k training sentences (float32: faiss IndexFlatIP; binary: IndexBinaryFlat "
            "then the float re-rank; int8: decoded blocks, then the re-rank), on a shared 2-core "
            f"machine (load average {results['machine']['load_average']}): binary and ubinary "
            "run the same search, so their difference is the machine's noise. The model is a "
            "short CPU run, far from converged: the figures compare precisions, not models."]
  return "\n".join(lines) + "\n"


def main(argv):
  del argv
  data_dir = pathlib.Path(FLAGS.data_dir)
  encoder = vmsst.Encoder.from_checkpoint(FLAGS.model_dir, batch_size=256)
  calibration = calibrate(encoder, data_dir)
  folder = data_dir / "tatoeba" / "v1"
  per_language = {code: retrieval(encoder, calibration, *tatoeba.read_pairs(folder, code))
                  for code in FLAGS.languages}
  mean = lambda key, p, table=per_language: float(np.mean(
      [r[p].get(key, r[p]["codes_only"]) for r in table.values()]))
  # The training run's own held-out sets (tasks/sources/heldout.py), where the model is furthest
  # above chance: the figures its TensorBoard reports, at each precision.
  per_set = {name: retrieval(encoder, calibration, *pair)
             for name, pair in heldout.retrieval_sets(str(data_dir)).items()}
  held_out = ntrex_held_out(data_dir)
  f1 = {code: mining_f1(encoder, calibration, *pair) for code, pair in held_out.items()}
  results = {
      "command": shlex.join([".venv/bin/python", "bench/quantized.py", *sys.argv[1:]]),
      "model": files.name(FLAGS.model_dir), "dimension": encoder.dimension,
      "model_command": FLAGS.model_command,
      "calibration": f"{calibration.sentences} sentences of {calibration.source}",
      "tatoeba": per_language,
      "tatoeba_mean": {p: {"codes_only": mean("codes_only", p), "reranked": mean("reranked", p)}
                       for p in PRECISIONS},
      "heldout": per_set,
      "heldout_mean": {p: {key: mean(key, p, per_set) for key in ("codes_only", "reranked")}
                       for p in PRECISIONS},
      "mining_f1": f1,
      "mining_f1_mean": {p: float(np.mean([r[p] for r in f1.values()])) for p in PRECISIONS},
      "search_seconds": search_times(encoder, calibration, data_dir),
      "machine": common.machine(),
  }
  output = pathlib.Path(FLAGS.output)
  files.makedirs(output)
  files.write_text(output / "results.json", json.dumps(results, indent=1) + "\n")
  files.write_text(output / "README.md", render(results))
  print(render(results))


if __name__ == "__main__":
  app.run(main)
