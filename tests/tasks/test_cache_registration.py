"""The OPUS / paper tasks cached once by seqio's own Beam job (DirectRunner), then trained from.

`python -m seqio.scripts.cache_tasks_main` runs as a user would run it, with
vmsst_tasks.cache_registration as its --module_import, over a small
OPUS-format directory; the cached examples must be the on-the-fly ones, and
the training input (train_iterator.use_cached) reads them, resumably.
"""

import json
import os
import subprocess
import sys

import numpy as np
import pytest
import seqio

import vmsst_testing
from vmsst_tasks import cache_registration
from vmsst_tasks import registry
from vmsst_tasks.registry import data_counts
from vmsst_tasks.registry import opus
from vmsst_tasks.pipeline import input_pipeline

pytestmark = pytest.mark.slow  # a Beam pipeline in a subprocess (~40 s)


def _write_moses(directory, corpus, l1, l2, lines1, lines2):
  for code, lines in ((l1, lines1), (l2, lines2)):
    (directory / f"{corpus}.{l1}-{l2}.{code}").write_text("".join(f"{t}\n" for t in lines),
                                                          encoding="utf-8")


@pytest.fixture(scope="module", name="cached")
def _cached(small_data_dir, tiny_vocab_path, tmp_path_factory):
  """(register_tasks kwargs, cache dir, the job's output) after one DirectRunner run."""
  root = tmp_path_factory.mktemp("cache_job")
  opus_dir = root / "opus"
  opus_dir.mkdir()
  _write_moses(opus_dir, "Europarl", "en", "de", [f"the house {i}" for i in range(40)],
               [f"das Haus {i}" for i in range(39)] + [""])  # one empty side: skipped
  _write_moses(opus_dir, "Tatoeba", "en", "fr", [f"a cat {i}" for i in range(20)],
               [f"un chat {i}" for i in range(20)])
  kwargs = {"data_dir": str(small_data_dir), "vocabulary_path": tiny_vocab_path,
            "opus_dir": str(opus_dir)}
  cache = root / "cache"
  done = subprocess.run(
      [sys.executable, "-m", "seqio.scripts.cache_tasks_main",
       "--module_import=vmsst_tasks.cache_registration",
       r"--tasks=vmsst_opus\..*,vmsst_opus_paper\..*", f"--output_cache_dir={cache}",
       "--pipeline_options=--runner=DirectRunner", "--min_shards=2"],
      cwd=vmsst_testing.ROOT, capture_output=True, text=True, check=False,
      env=dict(os.environ, **{cache_registration.ENV: json.dumps(kwargs)},
               TF_CPP_MIN_LOG_LEVEL="2"))
  assert done.returncode == 0, done.stderr[-4000:]
  registry.register_tasks(**kwargs)
  seqio.set_global_cache_dirs([str(cache)])  # what train_iterator.cache_dirs does
  return kwargs, cache


def _examples(task, use_cached):
  ds = seqio.get_mixture_or_task(task).get_dataset(
      {"tokens_a": 32, "tokens_b": 32}, split="train", use_cached=use_cached, shuffle=False,
      num_epochs=1)
  return sorted((tuple(ex["tokens_a"]), tuple(ex["tokens_b"]), int(ex["lang_a"]),
                 int(ex["lang_b"])) for ex in ds.as_numpy_iterator())


def test_the_cache_holds_the_examples_preprocessed_on_the_fly(cached):
  _, cache = cached
  tasks = [t.name for t in seqio.get_mixture_or_task(opus.PAPER_MIXTURE).tasks]
  assert sorted(tasks) == ["vmsst_opus.eng.deu", "vmsst_opus.eng.fra"]
  for task in tasks:
    assert (cache / task).is_dir(), sorted(p.name for p in cache.iterdir())
    stats = json.loads(next((cache / task).glob("stats.train.json")).read_text())
    on_the_fly = _examples(task, use_cached=False)
    assert stats["examples"] == len(on_the_fly) == {"vmsst_opus.eng.deu": 39,
                                                     "vmsst_opus.eng.fra": 20}[task]
    assert _examples(task, use_cached=True) == on_the_fly
  # The counts stay exact: read = kept + skipped, kept = what the cache holds.
  report = data_counts.report_data_counts(opus.PAPER_MIXTURE)
  assert report["total"]["train"] == {"read": 60, "kept": 59, "skipped": 1,
                                      "skipped_by_reason": {"empty_side": 1}}


def test_training_reads_the_cache_and_resumes_from_a_saved_position(cached, tmp_path):
  _, cache = cached
  common = dict(batch_size=8, sequence_length=16, seed=1, use_cached=True,
                cache_dirs=[str(cache)])
  # An earlier run's cache in this process (a comparison's, another test's) is not read.
  seqio.set_global_cache_dirs([str(tmp_path / "an_earlier_runs_cache")])
  batches = input_pipeline.train_iterator(opus.PAPER_MIXTURE, start_step=0, **common)
  assert seqio.get_global_cache_dirs() == [str(cache)]
  for _ in range(3):
    next(batches)
  batches.save(str(tmp_path))
  want = [next(batches) for _ in range(2)]
  resumed = input_pipeline.train_iterator(
      opus.PAPER_MIXTURE, start_step=3, **common,
      restore_position=lambda fresh: fresh.restore(str(tmp_path)))
  assert resumed.restored_from == 3
  for got, expected in zip([next(resumed) for _ in range(2)], want):
    np.testing.assert_array_equal(got["tokens_a"], expected["tokens_a"])
