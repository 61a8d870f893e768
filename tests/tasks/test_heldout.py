"""Tests of tasks/sources/heldout.py: the in-training retrieval sets."""

from vmsst_tasks.sources import heldout
from vmsst_tasks.sources import pair_readers
from vmsst.base import text_files


def test_dedupe_pairs_keeps_first_of_each_source_and_target():
  pairs = [("a", "A"), (" a ", "B"), ("b", "A"), ("", "C"), ("c", "C"), ("d", "D")]
  assert heldout.dedupe_pairs(pairs, max_pairs=10) == (["a", "c", "d"], ["A", "C", "D"])
  assert heldout.dedupe_pairs(pairs, max_pairs=2) == (["a", "c"], ["A", "C"])


def test_retrieval_sets(data_dir):
  sets = heldout.retrieval_sets(str(data_dir))
  assert sorted(sets) == sorted(
      ["multi30k_test2016.eng-deu", "multi30k_test2016.eng-fra", "multi30k_test2016.eng-ces"]
      + [f"ntrex_val.eng-{c}" for c in ("deu", "fra", "spa", "rus", "zho-CN", "jpn", "arb", "hin", "swa")])
  english, german = sets["multi30k_test2016.eng-deu"]
  assert len(english) == len(german) == 500  # Capped; 1000 lines, all distinct.
  assert english[0] == "A man in an orange hat starring at something."
  assert german[0] == "Ein Mann mit einem orangefarbenen Hut, der etwas anstarrt."
  for source_side, target_side in sets.values():
    assert len(set(source_side)) == len(source_side) and len(set(target_side)) == len(target_side)


def test_ntrex_sets_come_from_validation_documents_only(data_dir):
  english, swahili = heldout.retrieval_sets(str(data_dir), max_pairs=1000)["ntrex_val.eng-swa"]
  assert len(english) == len(swahili) == 189  # The 189 lines of the 12 validation documents.
  held_out = pair_readers.ntrex_validation_documents(data_dir)
  all_english = text_files.read_lines(pair_readers.ntrex_files(data_dir)["eng"])
  all_swahili = text_files.read_lines(pair_readers.ntrex_files(data_dir)["swa"])
  documents = pair_readers.ntrex_documents(data_dir)
  for en, sw in zip(english, swahili):
    line = all_english.index(en)
    assert documents[line] in held_out and all_swahili[line] == sw
