"""The two caches a pod keeps in a bucket, on the GCS emulator: the teacher cache and seqio's.

The teacher cache is filled by the run's teacher stage (what `python -m vmsst.teacher_cache`
runs) into gs://, read back by a new instance, and a second fill encodes nothing. seqio's cache
is written by its own Beam job (`python -m seqio.scripts.cache_tasks_main`, the DirectRunner)
to gs://, and `train` with `train_iterator.use_cached` reads it from there (its `main` in this
process, `test_gcs_train.train_here`: a process would add only its seconds of imports).
"""

import json
import subprocess
import sys

import numpy as np
import pytest

import test_gcs_train as gcs_train
from test_gcs_train import _bucket  # pylint: disable=unused-import  (the `bucket` fixture)
import vmsst_testing
from vmsst.base import files
from vmsst.base.gin_utils import gin
from vmsst.teachers import cache as teacher_cache
from vmsst_tasks import cache_registration

pytestmark = pytest.mark.slow


class VowelTeacher:
  """Embeds a sentence as (length, spaces, vowels); counts the sentences it encodes."""

  name = "vowels"
  encoded = 0

  def encode(self, sentences):
    VowelTeacher.encoded += len(sentences)
    return np.array([[len(s), s.count(" "), sum(s.count(v) for v in "aeiou")]
                     for s in sentences], np.float32)


gin.external_configurable(VowelTeacher, module="tests.test_gcs_caches")


@pytest.fixture(name="clean_gin")
def _clean_gin():
  yield
  gin.clear_config()


def test_the_teacher_stage_fills_a_cache_in_the_bucket_once(gcs, bucket, clean_gin):
  del clean_gin
  from vmsst import teacher_cache as command  # pylint: disable=import-outside-toplevel
  cache_dir = files.join(bucket["root"], "teacher_cache")
  run = [str(vmsst_testing.ROOT / "gin/runs/distillation_cpu.gin")]
  bindings = vmsst_testing.small_run_bindings(
      bucket["data"], bucket["vocab"], files.join(bucket["root"], "runs", "distilled"), 1, [
          f"TEACHER_CACHE_DIR = '{cache_dir}'", "TeacherCache.teacher = @VowelTeacher()",
          "distillation_tasks.max_sources = 3", "retrieval_sets.max_pairs = 4"])
  VowelTeacher.encoded = 0
  reports = command.fill_run(run, bindings)
  assert list(reports) == [cache_dir] and reports[cache_dir].encoded == VowelTeacher.encoded > 0
  prefix = cache_dir[len(f"gs://{gcs.bucket}/"):]
  names = {n[len(prefix) + 1:] for n in gcs.objects(prefix)}
  assert {"manifest.json", "keys-00000.npy", "vectors-00000.npy"} <= names, names
  reread = teacher_cache.TeacherCache(cache_dir, VowelTeacher())
  assert len(reread) == VowelTeacher.encoded
  gin.clear_config()
  assert command.fill_run(run, bindings)[cache_dir].encoded == 0  # all read from the bucket


def _write_moses(directory: str, corpus: str, l1: str, l2: str, lines1, lines2) -> None:
  for code, lines in ((l1, lines1), (l2, lines2)):
    files.write_text(files.join(directory, f"{corpus}.{l1}-{l2}.{code}"),
                     "".join(f"{t}\n" for t in lines))


def test_seqio_cache_job_writes_to_the_bucket_and_train_reads_it_there(gcs, bucket, tmp_path,
                                                                      capfd, monkeypatch):
  opus_dir, cache = files.join(bucket["root"], "cache_opus"), files.join(bucket["root"], "seqio")
  _write_moses(opus_dir, "Europarl", "en", "de", [f"the house {i}" for i in range(40)],
               [f"das Haus {i}" for i in range(40)])
  _write_moses(opus_dir, "Tatoeba", "en", "fr", [f"a cat {i}" for i in range(20)],
               [f"un chat {i}" for i in range(20)])
  registration = {"data_dir": bucket["data"], "vocabulary_path": bucket["vocab"],
                  "opus_dir": opus_dir}
  env = dict(gcs_train.run_env(tmp_path), **{cache_registration.ENV: json.dumps(registration)})
  done = subprocess.run(
      [sys.executable, "-m", "seqio.scripts.cache_tasks_main",
       "--module_import=vmsst_tasks.cache_registration",
       r"--tasks=vmsst_opus\..*,vmsst_opus_paper\..*", f"--output_cache_dir={cache}",
       "--pipeline_options=--runner=DirectRunner", "--min_shards=2"],
      cwd=tmp_path, capture_output=True, text=True, check=False, env=env,
      timeout=gcs_train.TIMEOUT_S)
  assert done.returncode == 0, done.stderr[-4000:]
  for task in ("vmsst_opus.eng.deu", "vmsst_opus.eng.fra"):
    listed = files.listdir(files.join(cache, task))
    assert "stats.train.json" in listed and any(n.startswith("train.tfrecord") for n in listed), (
        listed)
  # train's `main` in this process, on one of its devices (a process adds only its imports).
  model_dir = files.join(bucket["root"], "runs", "from_cache")
  done = gcs_train.train_here(gcs_train.bindings(
      bucket["data"], bucket["vocab"], model_dir, steps=2, opus=opus_dir,
      extra=[vmsst_testing.ONE_DEVICE, "train.mixture_name = 'vmsst_opus_paper'",
             "train_iterator.use_cached = True", f"train_iterator.cache_dirs = ['{cache}']"]),
      tmp_path / "train", capfd, monkeypatch)
  assert done.returncode == 0, done.stderr[-4000:]
  assert files.exists(files.join(model_dir, "checkpoints", "2"))  # a fresh run: steps 1 and 2
  assert not gcs_train.local_gs_folders(tmp_path)
