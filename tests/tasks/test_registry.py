"""Tests of tasks/registry/: the families, the one-call form old config.gin files name,
and the trainer's get_dataset -> batch flow."""

import functools

import numpy as np
import pytest
import seqio

import vmsst_testing
from vmsst_tasks import registry
from vmsst_tasks.registry import common
from vmsst_tasks.registry import opus
from vmsst_tasks.registry import pairs
from vmsst.base import cli
from vmsst.training import configurables
from vmsst.base.gin_utils import gin
from vmsst.base import languages
from vmsst.base import sentencepiece_vocabulary
from vmsst_tasks.registry.feature_converters import PairFeatureConverter

configurables.register()  # what the run files name (imports TensorFlow: at collection)

LENGTHS = {"tokens_a": 24, "tokens_b": 24}
BATCH = 8
DTYPES = {"tokens_a": np.int32, "tokens_b": np.int32, "mask_a": np.int32, "mask_b": np.int32,
          "lang_a": np.int32, "lang_b": np.int32, "sem_side": np.int32}


@pytest.fixture(scope="module")
def registered(data_dir, tiny_vocab_path):
  return registry.register_families([pairs.pair_tasks], data_dir=str(data_dir),
                                    vocabulary_path=tiny_vocab_path)


def trainer_batches(name, split="train", num=3, seed=0, shard_info=None):
  """Exactly the call the trainer makes, then .batch(B, drop_remainder=True)."""
  ds = seqio.get_dataset(name, task_feature_lengths=LENGTHS, dataset_split=split, shuffle=True,
                         seed=seed, feature_converter=PairFeatureConverter(pack=False),
                         shard_info=shard_info or seqio.ShardInfo(index=0, num_shards=1),
                         num_epochs=None)
  iterator = ds.batch(BATCH, drop_remainder=True).as_numpy_iterator()
  return [next(iterator) for _ in range(num)]


def test_register_tasks_names_and_counts(registered):
  assert registered == ["vmsst_ntrex128", "vmsst_multi30k", "vmsst_ntrex_multi30k"]
  ntrex = seqio.get_mixture_or_task("vmsst_ntrex128")
  assert ntrex.num_input_examples("train") == 224191 and ntrex.num_input_examples("validation") == 23436
  assert ntrex.source.counts["train"].skipped == {"tatoeba_overlap": 1}
  multi30k = seqio.get_mixture_or_task("vmsst_multi30k")
  assert multi30k.num_input_examples("train") == 174000 and multi30k.num_input_examples("validation") == 6084
  mixture = seqio.get_mixture_or_task("vmsst_ntrex_multi30k")
  assert mixture.get_rate(ntrex) == 224191 and mixture.get_rate(multi30k) == 174000


def test_register_again_is_idempotent(registered, data_dir, tiny_vocab_path):
  assert registry.register_families([pairs.pair_tasks], data_dir=str(data_dir),
                                    vocabulary_path=tiny_vocab_path) == registered
  assert seqio.get_mixture_or_task("vmsst_ntrex128").num_input_examples("train") == 224191


@pytest.mark.slow
def test_trainer_flow_yields_model_batches(registered, tiny_vocab_path):
  language_ids = set(range(len(languages.LANGUAGES)))
  batches = trainer_batches("vmsst_ntrex_multi30k")
  for batch in batches:
    assert set(batch) == set(DTYPES)
    for key, dtype in DTYPES.items():
      assert batch[key].dtype == dtype, key
      assert batch[key].shape == ((BATCH, 24) if key.startswith(("tokens", "mask")) else (BATCH,)), key
    np.testing.assert_array_equal(batch["sem_side"], [0, 1] * (BATCH // 2))
    assert set(batch["lang_a"]) | set(batch["lang_b"]) <= language_ids
    for side in "ab":
      tokens, mask = batch[f"tokens_{side}"], batch[f"mask_{side}"]
      np.testing.assert_array_equal(mask, (tokens != 0).astype(np.int32))
      last = mask.sum(axis=1) - 1
      assert (tokens[np.arange(BATCH), last] == 1).all()  # Every row ends in EOS.
  again = trainer_batches("vmsst_ntrex_multi30k")  # Same seed, same batches.
  np.testing.assert_array_equal(again[0]["tokens_a"], batches[0]["tokens_a"])


def test_validation_split_decodes_to_the_real_pair(registered, tiny_vocab_path):
  vocab = sentencepiece_vocabulary.get_vocabulary(tiny_vocab_path)
  task = seqio.get_mixture_or_task("vmsst_multi30k")
  ds = PairFeatureConverter()(task.get_dataset({"tokens_a": 64, "tokens_b": 64}, split="validation",
                                               shuffle=False), {"tokens_a": 64, "tokens_b": 64})
  first = next(ds.as_numpy_iterator())
  assert vocab.decode(first["tokens_a"].tolist()) == "A group of men are loading cotton onto a truck"
  assert vocab.decode(first["tokens_b"].tolist()) == "Eine Gruppe von Männern lädt Baumwolle auf einen Lastwagen"
  assert first["lang_a"] == languages.language_index("eng")
  assert first["lang_b"] == languages.language_index("deu")


def test_sharded_validation_flow(registered):
  (batch,) = trainer_batches("vmsst_ntrex128", split="validation", num=1,
                             shard_info=seqio.ShardInfo(index=1, num_shards=2))
  assert batch["tokens_a"].shape == (BATCH, 24)


def test_families_are_selected_in_gin(registered, data_dir, tiny_vocab_path):
  gin.parse_config([f"register_families.data_dir = '{data_dir}'",
                    f"register_families.vocabulary_path = '{tiny_vocab_path}'",
                    "register_families.families = [@pair_tasks]", "pair_tasks.ntrex_seed = 0"])
  try:
    assert registry.register_families() == registered
  finally:
    gin.clear_config()



# ------------------------------------------------------------------------ OPUS


def write_opus(directory, tatoeba_sentence):
  directory.mkdir()
  (directory / "Europarl.de-en.de").write_text("".join(f"Haus {i}\n" for i in range(20)) + f"{tatoeba_sentence}\n")
  (directory / "Europarl.de-en.en").write_text("".join(f"house {i}\n" for i in range(20)) + "x\n")
  (directory / "Tatoeba.en-zh_cn.tsv").write_text("hello\t你好\nbroken line\nbye\t再见\n")


@pytest.mark.slow  # over ~7 s (docs/results/tests/)
def test_opus_tasks_and_the_paper_mixture_call(data_dir, tiny_vocab_path, tmp_path, monkeypatch):
  tatoeba = (data_dir / "tatoeba/v1/tatoeba.deu-eng.deu").read_text().splitlines()[0]
  write_opus(tmp_path / "opus", tatoeba)
  calls = []

  def fake_register(opus_dir, vocab, *, exclude, reuse):
    calls.append((opus_dir, vocab, exclude, reuse))
    return "fake_paper"

  monkeypatch.setattr(opus, "register_paper_mixture", fake_register)
  names = registry.register_tasks(str(data_dir), tiny_vocab_path, opus_dir=str(tmp_path / "opus"))
  assert names[3:] == ["vmsst_opus.deu.eng", "vmsst_opus.eng.zho_CN", "vmsst_opus", "fake_paper"]
  ((opus_dir, vocab, exclude, reuse),) = calls
  assert opus_dir == str(tmp_path / "opus")
  assert exclude is common.tatoeba_exclusion(str(data_dir)) and tatoeba in exclude
  assert reuse == {("deu", "eng"): "vmsst_opus.deu.eng", ("eng", "zho-CN"): "vmsst_opus.eng.zho_CN"}
  opus_task = seqio.get_mixture_or_task("vmsst_opus.deu.eng")
  assert vocab is opus_task.output_features["tokens_a"].vocabulary  # One vocabulary object.
  mixture = seqio.get_mixture_or_task("vmsst_opus")
  assert [mixture.get_rate(t) for t in mixture.tasks] == [21.0, 3.0]  # Lines on disk.
  vocab = sentencepiece_vocabulary.get_vocabulary(tiny_vocab_path)
  task = seqio.get_mixture_or_task("vmsst_opus.deu.eng")
  texts = [vocab.decode(ex["tokens_a"].tolist())
           for ex in task.get_dataset(None, shuffle=False).as_numpy_iterator()]
  assert texts == [f"Haus {i}" for i in range(20)]  # The Tatoeba sentence is filtered out.
  assert task.source.counts.skipped == {"tatoeba_overlap": 1} and task.source.counts.read == 21
  (batch,) = trainer_batches("vmsst_opus", num=1)
  assert batch["tokens_b"].shape == (BATCH, 24)


def test_paper_mixture_is_registered_by_the_registry_itself(data_dir, tiny_vocab_path,
                                                             tmp_path):
  """No importlib hook: the OPUS family registers vmsst_opus_paper directly."""
  write_opus(tmp_path / "opus", "x")
  family = functools.partial(opus.opus_tasks, opus_dir=str(tmp_path / "opus"),
                             paper_mixture=True)
  names = registry.register_families([pairs.pair_tasks, family], data_dir=str(data_dir),
                                     vocabulary_path=tiny_vocab_path)
  assert names[-1] == opus.PAPER_MIXTURE == "vmsst_opus_paper"
  mixture = seqio.get_mixture_or_task(opus.PAPER_MIXTURE)
  # Europarl.de-en has English as its second code: a task of the mixture's own, pivot first;
  # Tatoeba.en-zh_cn is exactly the registry's vmsst_opus.eng.zho_CN, reused.
  assert sorted(t.name for t in mixture.tasks) == ["vmsst_opus.eng.zho_CN",
                                                   "vmsst_opus_paper.eng_deu"]


def test_opus_misaligned_files_fail_at_registration(data_dir, tiny_vocab_path, tmp_path):
  (tmp_path / "toy.de-en.de").write_text("a\nb\n")
  (tmp_path / "toy.de-en.en").write_text("a\n")
  with pytest.raises(cli.UserError,
                     match=r"toy\.de-en\.de has 2 lines but .*toy\.de-en\.en has 1"):
    opus.opus_tasks(common.RegistrationInputs.read(str(data_dir), tiny_vocab_path),
                    opus_dir=str(tmp_path))


# ------------------------------------------------------------- the run files

RUNS = sorted(p for p in (vmsst_testing.ROOT / "gin/runs").glob("*_cpu*.gin")
              if not p.name.startswith("base_"))
PAIR_NAMES = ["vmsst_ntrex128", "vmsst_multi30k", "vmsst_ntrex_multi30k"]
# What the CPU runs registered with the one-call register_tasks, by the mixture
# they train: the pair tasks always, then those of the one extra argument.
REGISTERED_BEFORE = {
    "vmsst_ntrex_multi30k": PAIR_NAMES,
    "vmsst_distill_ntrex_multi30k": [*PAIR_NAMES, "vmsst_distill_ntrex128",
                                     "vmsst_distill_multi30k", "vmsst_distill_ntrex_multi30k"],
    "vmsst_wiki_entities": [*PAIR_NAMES, "vmsst_wiki_entities"],
    "vmsst_triplets": [*PAIR_NAMES, "vmsst_triplets"],
}


class _LengthTeacher:
  """A teacher that embeds a sentence as its length: fills a cache in no time."""

  name = "length"

  def encode(self, sentences):
    return np.array([[len(s)] for s in sentences], np.float32)


gin.external_configurable(_LengthTeacher, module="tests.tasks.test_registry")


@pytest.fixture(scope="module")
def run_inputs(small_data_dir, data_dir, tmp_path_factory):
  """(data dir: the small NTREX / Multi30k with STSb beside, an entity directory)."""
  from vmsst_tasks.sources import wikipedia  # pylint: disable=import-outside-toplevel
  root = tmp_path_factory.mktemp("run_data")
  for child in [*small_data_dir.iterdir(), data_dir / "stsb"]:
    (root / child.name).symlink_to(child)
  entity_dir = root.parent / "entities"
  dump = next((data_dir / "wiki_entity_sample").glob("*.xml.bz2"))
  wikipedia.build(str(dump), str(entity_dir), heldout_fraction=0.5, min_links=0)
  return root, entity_dir


@pytest.mark.parametrize("run", RUNS, ids=lambda p: p.name)
def test_every_cpu_run_file_registers_the_tasks_it_registered_before(run, run_inputs,
                                                                     tiny_vocab_path, tmp_path):
  from vmsst.teachers import cache as teacher_cache  # pylint: disable=import-outside-toplevel
  data, entity_dir = run_inputs
  gin.clear_config()
  gin.add_config_file_search_path(str(vmsst_testing.ROOT))
  try:
    gin.parse_config_files_and_bindings([str(run)], vmsst_testing.small_run_bindings(
        data, tiny_vocab_path, tmp_path / "run", 1, [
            f"ENTITY_DIR = '{entity_dir}'", f"TEACHER_CACHE_DIR = '{tmp_path / 'cache'}'",
            "TeacherCache.teacher = @_LengthTeacher()", "distillation_tasks.max_sources = 3"]),
        finalize_config=False)
    register = gin.query_parameter("train.register_tasks").scoped_configurable_fn
    mixture = gin.query_parameter("train.mixture_name")
    names, _ = teacher_cache.fill_stage(register)  # distillation: fills the cache, registers
  finally:
    gin.clear_config()
  assert names == REGISTERED_BEFORE[mixture]
