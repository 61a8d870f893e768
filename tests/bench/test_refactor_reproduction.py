"""bench/refactor_reproduction.py: figures compared to the digit, the page says which differ."""

import importlib.util
import json
import math
import pathlib
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench"))  # the script's own `import common`
_spec = importlib.util.spec_from_file_location("refactor_reproduction",
                                               ROOT / "bench" / "refactor_reproduction.py")
repro = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(repro)


def _record(figures: dict, seconds: float = 60.0) -> dict:
  return {"figures": figures, "seconds": seconds, "date": "2026-11-26T19:40:00Z",
          "load_average": 3.5, "env": repro.RUN_ENV}


def _results(runs: dict) -> dict:
  return {"meta": {"cores": 2, "steps": 100, "seed": 0, "batch_size": 32, "vocab_sha256": "ab" * 32,
                   "commits": {"before": "1" * 40, "after": "2" * 40},
                   "checkouts": {"before": "/b", "after": "/a"},
                   "left_out": {"distillation": "not in --objectives"},
                   "command": "python bench/refactor_reproduction.py --before=/b"},
          "objectives": repro.summarize(runs)}


def test_a_figure_equal_only_to_the_last_digit_or_missing_on_one_side_differs():
  rows = repro.compare_figures(
      {"loss": 295.214, "retrieval/mean": 2.13, "elbo": math.nan, "kl": 1.0},
      {"loss": 295.21400000000003, "retrieval/mean": 2.13, "elbo": math.nan, "nll": 3.0})
  assert {r["figure"]: r["same"] for r in rows} == {
      "elbo": True, "kl": False, "loss": False, "nll": False, "retrieval/mean": True}
  assert [r for r in rows if r["figure"] == "kl"][0]["after"] is None


def test_the_page_names_both_commits_every_figure_and_the_differences():
  runs = {"vmsst": {"before": _record({"loss": 1.5, "retrieval/mean": 2.0}, 61.0),
                    "after": _record({"loss": 1.5, "retrieval/mean": 2.0}, 59.0)},
          "contrastive": {"before": _record({"loss": 0.25, "retrieval/ntrex_val.eng-deu": 3.0}),
                          "after": _record({"loss": 0.25, "retrieval/ntrex_val.eng-deu": 3.5})}}
  results = _results(runs)
  assert results["objectives"]["vmsst"]["differ"] == 0
  assert results["objectives"]["contrastive"]["differ"] == 1
  page = repro.page(results)
  assert "1" * 40 in page and "2" * 40 in page
  assert "**1 figures differ.**" in page
  assert "| retrieval/ntrex_val.eng-deu | 3 | 3.5 | **no** |" in page
  assert "| vmsst | 1.5 | 1.5 | 2 | 2 | 2 | 0 | 61 | 59 |" in page
  assert "- distillation: not in --objectives" in page
  assert "- contrastive" not in page and "query_tower" not in page  # notes of runs shown only
  assert "python bench/refactor_reproduction.py --before=/b" in page
  assert "2026-11-26T19:40:00Z" in page and "2-core" in page
  json.dumps(results)  # results.json holds it as it is


def test_identical_runs_say_so_and_name_runs_without_the_fixed_hash_seed():
  runs = {"vmsst": {side: _record({"loss": 1.5}) for side in repro.SIDES},
          "contrastive": {side: _record({"loss": 0.5}) for side in repro.SIDES}}
  del runs["contrastive"]["before"]["env"]
  page = repro.page(_results(runs))
  assert "**Every figure identical.**" in page
  assert "- contrastive: trained before PYTHONHASHSEED was fixed" in page


@pytest.mark.parametrize("objectives, ok", [
    (["contrastive", "query_tower", "distillation"], True),
    (["query_tower", "contrastive"], False),
    (["vmsst", "distillation"], False)])
def test_a_run_that_starts_from_another_needs_it_listed_first(objectives, ok):
  if ok:
    repro.check_objectives(objectives)
  else:
    with pytest.raises(ValueError, match="contrastive"):
      repro.check_objectives(objectives)


def test_the_results_page_is_exactly_what_the_committed_record_renders():
  """Editing the figures by hand, or the record without rerunning the script, fails here."""
  folder = ROOT / "docs" / "results" / "refactor_reproduction"
  results = json.loads((folder / "results.json").read_text())
  assert (folder / "README.md").read_text() == repro.page(results)
