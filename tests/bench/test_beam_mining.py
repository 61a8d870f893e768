"""bench/beam_mining.py: the projection from hand-made stage seconds, its page, and the page
of a record from before --runners."""

import dataclasses
import pathlib
import sys

import pytest

BENCH = pathlib.Path(__file__).resolve().parents[2] / "bench"
sys.path.insert(0, str(BENCH))

import beam_mining  # pylint: disable=wrong-import-position
from vmsst.mining import approximate  # pylint: disable=wrong-import-position

N = 1_000_000
IVF = approximate.IvfOptions(nprobe=16)


def _runner(label: str, seconds: float, **extra) -> dict:
  stages = {"sentences": seconds, "embeddings": None, "index": seconds, "assign": seconds,
            "neighbours": 10 * seconds, "merge": seconds, "candidates": seconds,
            "pairs": seconds}
  return {"label": label, "stage_seconds": stages, "recall": {"forward": 0.75, "backward": 0.77},
          "pairs": 800, "identical_to_in_process": True, "f1_vs_in_process": 1.0,
          "recall_of_planted": 1.0, **extra}


def _scale(*names: str) -> dict:
  runners = {"direct": _runner("DirectRunner", 20.0, cores_bound=2),
             "dask": _runner("Dask, 2 workers", 10.0, cores_bound=2, workers=2,
                             tasks_per_worker=[40, 41])}
  return {"n": N, "d": 64, "shards": 8, "ivf": dataclasses.asdict(IVF), "cells": IVF.cells(N),
          "train_size": IVF.training_keys(N), "runners": {n: runners[n] for n in names},
          "in_process_seconds": 5.0, "in_process_pairs": 800, "in_process_recall_of_planted": 1.0}


def test_the_projection_spreads_every_stage_but_the_index_and_the_pairs():
  p = beam_mining.projection(_scale("direct", "dask"), embed_rate=1000.0, cores_here=2, cores=4)
  assert (p["rates_from"], p["runner"]) == ("dask", "Dask, 2 workers")
  few, many = p["rows"]["1e+09 x 100 workers"]["hours"], p["rows"]["1e+09 x 1000 workers"]["hours"]
  for stage in ("sentences", "embeddings", "assign", "neighbours", "merge", "candidates"):
    assert many[stage] == pytest.approx(few[stage] / 10, abs=0.01), stage
  assert many["index"] == few["index"] and many["pairs"] == few["pairs"]
  n = 10 ** 9
  # The pairs: one sequential task at its measured seconds a row, linear in n.
  assert few["pairs"] == pytest.approx(round(10.0 * n / N / 3600, 2))
  # The index: one task a side on its sample, k-means growing as sample x cells.
  growth = IVF.training_keys(n) * IVF.cells(n) / (IVF.training_keys(N) * IVF.cells(N))
  assert few["index"] == pytest.approx(round(10.0 * 2 * growth / (2 * 4) / 3600, 2))
  assert p["single_task"]["1e+09"] == {
      "index": {"hours": few["index"], "sample": IVF.training_keys(n), "cells": IVF.cells(n)},
      "pairs": {"hours": few["pairs"]}}
  # The search: n x nprobe x n / cells, over all 100 x 4 cores.
  scanned = (n / N) ** 2 * IVF.cells(N) / IVF.cells(n)
  assert few["neighbours"] == pytest.approx(100.0 * 2 * scanned / 400 / 3600, abs=0.01)
  assert few["embeddings"] == pytest.approx(2 * n * 2 / 1000.0 / 400 / 3600, abs=0.01)
  row = p["rows"]["1e+09 x 100 workers"]
  assert row["dominant"] == max(few, key=few.get)
  assert row["total_hours"] == pytest.approx(sum(few.values()), abs=0.1)


def test_without_a_dask_run_the_projection_takes_the_direct_runners_rates():
  p = beam_mining.projection(_scale("direct"), embed_rate=None, cores_here=2, cores=4)
  assert p["rates_from"] == "direct"
  assert "embeddings" not in p["rows"]["1e+08 x 100 workers"]["hours"]
  assert p["pairs_seconds_per_million_rows"] == pytest.approx(20.0)


def _results(scale: dict) -> dict:
  results = {"cores": 2, "dataflow_cores": 4, "notes": ["a note"], "corpus_scale": scale,
             "machine": "2 cores, load average 0.1 at the start (shared), 0.2 at the end",
             "command": "python bench/beam_mining.py --n=1000000"}
  results["projection"] = beam_mining.projection(scale, None, 2, 4)
  return results


def test_the_page_sets_the_runners_side_by_side_and_names_the_projections_rates():
  page = beam_mining._render(_results(_scale("direct", "dask")), "python bench/beam_mining.py")
  assert "| stage | DirectRunner s | Dask, 2 workers s | in-process s |" in page
  assert "| neighbours | 200.0 | 100.0 | |" in page
  assert "| index to pairs | 300.0 | 150.0 | 5.0 |" in page  # embeddings planted: not run
  assert "| Dask, 2 workers | 800 | True | 1.0000 | 1.0000 | forward 0.7500" in page
  assert "(tasks run per worker: [40, 41])" in page and "load average 0.1" in page
  assert "From the Dask, 2 workers run's rates above (`rates_from`: dask)" in page
  assert "| index (1 task a side) |" in page and "| pairs (1 task) |" in page
  assert "nor is there an NTREX part" in page and "- a note" in page


def test_a_record_from_before_the_runners_renders_as_the_direct_runners():
  old = {k: v for k, v in _scale("direct")["runners"]["direct"].items()
         if k in beam_mining.RUNNER_FIELDS}
  old["stage_seconds"] = {k: old["stage_seconds"][k] for k in ("sentences", "embeddings",
                                                               "index", "assign", "neighbours",
                                                               "pairs")}
  scale = {**{k: v for k, v in _scale().items() if k != "runners"}, **old}
  page = beam_mining._render(_results(beam_mining._upgraded(scale)), "python ...")
  assert "| stage | DirectRunner s | in-process s |" in page and "| merge |" not in page
  assert "(`rates_from`: direct)" in page


def test_a_kept_part_keeps_its_machine_and_command_in_its_place():
  recorded = {"machine": "A; the NTREX part: B", "command": "python a\n    python b"}
  assert beam_mining._provenance("C", "python c", recorded, "corpus_scale") == (
      "A; the NTREX part: C", "python a\n    python c")
  assert beam_mining._provenance("C", "python c", recorded, "real") == (
      "C; the NTREX part: B", "python c\n    python b")
  assert beam_mining._provenance("C", "python c", recorded, None) == ("C", "python c")
