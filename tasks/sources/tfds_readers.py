"""Pairs of any TFDS translation dataset, read from a local data_dir (never downloaded here).

  TfdsTranslation("wmt14_translate/de-en", "de", "en", data_dir="/data/tfds")
    -> task vmsst_tfds.wmt14_translate.de_en (tasks/registry/tfds.py::tfds_tasks)
    {"de": "Hallo.", "en": "Hello."} -> {"text_a": "Hallo.", "text_b": "Hello.",
                                         "lang_a": "deu", "lang_b": "eng"}

A dataset prepared anywhere (`tfds build <name> --data_dir=...` on a machine
with network, or a builder of your own's `download_and_prepare`) is read
from its files: the builder's code need not be importable here. Both
sides go through the same bad-input policy as every other source
(tasks/sources/pair_filters.py), and the read/kept/skipped counts of each split are
taken once, by one pass in TensorFlow, when the source is built.
"""

import dataclasses
import re

import seqio
import tensorflow as tf
import tensorflow_datasets as tfds

from vmsst_tasks.sources import pair_filters
from vmsst_tasks.sources import pair_readers
from vmsst.base import cli
from vmsst.base.gin_utils import gin
from vmsst.base import languages

TFDS_TASK_PREFIX = "vmsst_tfds"
# Our split names -> the TFDS names tried for each, in order.
SPLIT_NAMES = {"train": ("train",), "validation": ("validation", "dev", "test")}


@gin.configurable
@dataclasses.dataclass(frozen=True, kw_only=True)
class TfdsTranslation:
  """One TFDS translation dataset as a vmsst pair task.

  Gin: `tfds_tasks.translations = [@de_en/TfdsTranslation()]` (and @tfds_tasks
  in register_families.families) with
  `de_en/TfdsTranslation.name = 'wmt14_translate/de-en'`, `.lang_a_key = 'de'`,
  `.lang_b_key = 'en'`, `.data_dir = '/data/tfds'`.

  Attributes:
    name: the TFDS name, "<builder>[/<config>][:<version>]".
    lang_a_key, lang_b_key: the features holding the two sides.
    data_dir: the TFDS data_dir the dataset was prepared into.
    lang_a, lang_b: their language codes; default the keys (any code
      vmsst.base.languages.canonical_language reads, "de" -> "deu").
  """
  name: str
  lang_a_key: str
  lang_b_key: str
  data_dir: str
  lang_a: str | None = None
  lang_b: str | None = None

  @property
  def task_name(self) -> str:
    """"vmsst_tfds.wmt14_translate.de_en" (seqio task names: letters, digits, '_', '.')."""
    base = self.name.split(":")[0].replace("/", ".")
    return f"{TFDS_TASK_PREFIX}.{re.sub(r'[^A-Za-z0-9_.]', '_', base)}"


def _builder(spec: TfdsTranslation) -> tfds.core.DatasetBuilder:
  """The dataset's builder over its prepared files (a known builder class's too; never prepares)."""
  try:
    builder = tfds.builder(spec.name, data_dir=spec.data_dir)
    if builder.info.splits:
      return builder
    why = "no prepared split"  # a builder class TFDS knows, its files absent
  except (tfds.core.registered.DatasetNotFoundError, FileNotFoundError, ValueError) as e:
    why = type(e).__name__
  raise cli.UserError(
      f"TFDS dataset {spec.name!r} is not prepared in {spec.data_dir} ({why}); prepare it "
      f"where there is network (tfds build {spec.name} --data_dir={spec.data_dir}) and copy "
      "the directory here, or fix TfdsTranslation.data_dir: training never downloads.")


class TfdsPairSource(seqio.FunctionDataSource):
  """The pair schema over a prepared TFDS translation dataset's train (and validation) split.

  Attributes:
    counts: split -> PairCounts of the whole split (one pass, at construction).
    input_name: the dataset and directory, for errors.
  """

  def __init__(self, spec: TfdsTranslation, *, exclude=frozenset(),
               policy: pair_readers.InputPolicy = pair_readers.DEFAULT_POLICY):
    self.spec, self._exclude, self._policy = spec, frozenset(exclude), policy
    self._builder = _builder(spec)
    features = self._builder.info.features
    missing = [k for k in (spec.lang_a_key, spec.lang_b_key) if k not in features.keys()]
    if missing:
      raise cli.UserError(f"TFDS dataset {spec.name} has no feature {missing} (it has "
                          f"{sorted(features.keys())}); fix TfdsTranslation.lang_a_key / "
                          "lang_b_key.")
    self._codes = tuple(languages.canonical_language(code or key) for code, key in
                        ((spec.lang_a, spec.lang_a_key), (spec.lang_b, spec.lang_b_key)))
    available = self._builder.info.splits
    self._tfds_splits = {ours: next(n for n in names if n in available)
                    for ours, names in SPLIT_NAMES.items() if any(n in available for n in names)}
    if "train" not in self._tfds_splits:
      raise cli.UserError(f"TFDS dataset {spec.name} in {spec.data_dir} has no train split "
                          f"(splits: {sorted(available)}).")
    self.input_name = f"TFDS {spec.name} in {spec.data_dir}"
    self.counts = {split: pair_filters.count_skips(self._checked(split, False, 0))
                   for split in self._tfds_splits}
    super().__init__(dataset_fn=self._dataset, splits=tuple(self._tfds_splits),
                     num_input_examples={s: c.kept for s, c in self.counts.items()})

  def _checked(self, split: str, shuffle_files: bool, seed: int | None) -> tf.data.Dataset:
    """The split as pairs with their skip reason (pair_filters.with_skip_reason)."""
    read_config = tfds.ReadConfig(shuffle_seed=seed, skip_prefetch=True)
    ds = self._builder.as_dataset(split=self._tfds_splits[split], shuffle_files=shuffle_files,
                                  read_config=read_config)
    key_a, key_b = self.spec.lang_a_key, self.spec.lang_b_key
    code_a, code_b = self._codes
    ds = ds.map(lambda ex: {"text_a": ex[key_a], "text_b": ex[key_b],
                            "lang_a": tf.constant(code_a), "lang_b": tf.constant(code_b)})
    return pair_filters.with_skip_reason(ds, exclude=self._exclude, policy=self._policy)

  def _dataset(self, split: str, shuffle_files: bool, seed: int | None = None) -> tf.data.Dataset:
    return pair_filters.kept_pairs(self._checked(split, shuffle_files, seed))
