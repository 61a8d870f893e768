"""A TFDS translation dataset, built here with TFDS's own builder API from NTREX, as a vmsst task.

The builder below is a real `tfds.core.GeneratorBasedBuilder`: it writes
TFRecords and dataset_info.json into a temporary data_dir, from which the
source reads (no mock, no network). A second process reads the same
directory without the builder's code, as a dataset prepared elsewhere.
"""

import subprocess
import sys

import numpy as np
import pytest
import seqio
import tensorflow_datasets as tfds

import vmsst_testing
from vmsst_tasks.sources import pair_filters
from vmsst_tasks import registry
from vmsst_tasks.registry import common
from vmsst_tasks.registry import data_counts
from vmsst_tasks.registry import pairs as pair_family
from vmsst_tasks.sources import pair_readers
from vmsst_tasks.sources import tfds_readers
from vmsst.base import cli
from vmsst.base import languages
from vmsst.base import text_files
from vmsst_tasks.registry.feature_converters import PairFeatureConverter

NUM_TRAIN, NUM_VALIDATION = 300, 40


class NtrexTranslate(tfds.core.GeneratorBasedBuilder):
  """NTREX-128 German-English lines as a TFDS Translation dataset (config "de-en")."""
  VERSION = tfds.core.Version("1.0.0")
  BUILDER_CONFIGS = [tfds.core.BuilderConfig(name="de-en")]
  ntrex_dir = None  # set before building

  def _info(self):
    return tfds.core.DatasetInfo(builder=self,
                                 features=tfds.features.Translation(languages=("de", "en")))

  def _split_generators(self, dl_manager):
    del dl_manager  # nothing to download: the shared files
    german = text_files.read_lines(self.ntrex_dir / "newstest2019-ref.deu.txt.gz")
    english = text_files.read_lines(self.ntrex_dir / "newstest2019-src.eng.txt.gz")
    lines = list(zip(german, english))
    lines[3] = ("   ", english[3])  # an empty side: skipped and counted like any source's
    return {"train": self._generate_examples(lines[:NUM_TRAIN]),
            "validation": self._generate_examples(lines[NUM_TRAIN:NUM_TRAIN + NUM_VALIDATION])}

  def _generate_examples(self, lines):
    for i, (de, en) in enumerate(lines):
      yield i, {"de": de, "en": en}


@pytest.fixture(scope="module", name="tfds_dir")
def _tfds_dir(data_dir, tmp_path_factory):
  directory = tmp_path_factory.mktemp("tfds")
  NtrexTranslate.ntrex_dir = data_dir / "ntrex128"
  NtrexTranslate(config="de-en", data_dir=str(directory)).download_and_prepare()
  return directory


def _spec(tfds_dir, **kwargs):
  return tfds_readers.TfdsTranslation(name="ntrex_translate/de-en", lang_a_key="de",
                                      lang_b_key="en", data_dir=str(tfds_dir), **kwargs)


@pytest.mark.slow  # builds the dataset (about 6 s) and reads it through seqio
def test_tfds_task_reads_the_built_dataset_counts_and_mixes(data_dir, tiny_vocab_path, tfds_dir):
  spec = _spec(tfds_dir)
  names = registry.register_tasks(str(data_dir), tiny_vocab_path, tfds_translations=[spec])
  assert names[-1] == spec.task_name == "vmsst_tfds.ntrex_translate.de_en"
  task = seqio.get_mixture_or_task(spec.task_name)
  counts = task.source.counts
  assert counts["train"].as_dict() == {"read": NUM_TRAIN, "kept": NUM_TRAIN - 1, "skipped": 1,
                                       "skipped_by_reason": {"empty_side": 1}}
  assert counts["validation"].read == counts["validation"].kept == NUM_VALIDATION
  assert task.num_input_examples("train") == NUM_TRAIN - 1

  texts = list(task.source.get_dataset("validation", shuffle=False).as_numpy_iterator())
  german = text_files.read_lines(data_dir / "ntrex128" / "newstest2019-ref.deu.txt.gz")
  expected = german[NUM_TRAIN:NUM_TRAIN + NUM_VALIDATION]  # TFDS shuffles when it writes
  assert sorted(t["text_a"].decode() for t in texts) == sorted(g.strip() for g in expected)
  assert {t["lang_a"] for t in texts} == {b"deu"} and {t["lang_b"] for t in texts} == {b"eng"}

  # In a mixture with NTREX, through the trainer's feature converter.
  common.replace_mixture("vmsst_test_tfds_mix", [(spec.task_name, 1.0),
                                                     (pair_family.NTREX_TASK, 1.0)])
  ds = seqio.get_dataset("vmsst_test_tfds_mix",
                         task_feature_lengths={"tokens_a": 16, "tokens_b": 16},
                         feature_converter=PairFeatureConverter(pack=False),
                         dataset_split="train", shuffle=True, num_epochs=None, seed=0)
  batch = next(ds.batch(64, drop_remainder=True).as_numpy_iterator())
  pairs = set(zip(batch["lang_a"].tolist(), batch["lang_b"].tolist()))
  assert (languages.language_index("deu"), languages.language_index("eng")) in pairs
  assert len(pairs) > 1  # NTREX's pairs too
  data_counts.report_data_counts(spec.task_name)  # counts reach the report, exact


@pytest.mark.slow
def test_a_dataset_prepared_elsewhere_reads_without_its_builder_code(tfds_dir):
  """Another process has no NtrexTranslate class: TFDS reads the files alone."""
  code = ("from vmsst_tasks.sources import tfds_readers as t; "
          f"s = t.TfdsPairSource(t.TfdsTranslation(name='ntrex_translate/de-en', lang_a_key='de', "
          f"lang_b_key='en', data_dir={str(tfds_dir)!r})); print(s.counts['train'].kept)")
  done = subprocess.run([sys.executable, "-c", code], cwd=vmsst_testing.ROOT,
                        capture_output=True, text=True, check=False)
  assert done.returncode == 0, done.stderr[-2000:]
  assert done.stdout.split()[-1] == str(NUM_TRAIN - 1)


def test_a_dataset_not_prepared_is_a_user_error_never_a_download(tmp_path):
  with pytest.raises(cli.UserError, match=r"not prepared in .*tfds build wmt14_translate/de-en"):
    tfds_readers.TfdsPairSource(tfds_readers.TfdsTranslation(
        name="wmt14_translate/de-en", lang_a_key="de", lang_b_key="en", data_dir=str(tmp_path)))
  assert not list(tmp_path.iterdir())  # nothing downloaded into it


def test_pair_filters_apply_the_policy_of_the_python_readers():
  import tensorflow as tf  # pylint: disable=import-outside-toplevel
  rows = [("Hello.", "Hallo."), (" \ufeffpadded\r", "x"), ("", "y"), ("a" * 30, "z"),
          ("excluded", "w"), (b"bad \xff".decode("latin-1"), "v")]
  texts_a = [a.encode() for a, _ in rows]
  texts_a[-1] = b"bad \xff"  # not UTF-8
  ds = tf.data.Dataset.from_tensor_slices({"text_a": texts_a, "text_b": [b for _, b in rows]})
  checked = pair_filters.with_skip_reason(ds, exclude=frozenset({"excluded"}),
                                          policy=pair_readers.InputPolicy(max_chars=20))
  reasons = [pair_filters.SKIP_REASONS[ex["skip"]] for ex in checked.as_numpy_iterator()]
  assert reasons == ["kept", "kept", "empty_side", "overlong", "tatoeba_overlap", "invalid_utf8"]
  kept = [ex["text_a"] for ex in pair_filters.kept_pairs(checked).as_numpy_iterator()]
  assert kept == [b"Hello.", b"padded"]
  counts = pair_filters.count_skips(checked)
  assert counts.read == 6 and counts.kept == 2 and sum(counts.skipped.values()) == 4
  np.testing.assert_array_equal(sorted(counts.skipped), ["empty_side", "invalid_utf8", "overlong",
                                                         "tatoeba_overlap"])
