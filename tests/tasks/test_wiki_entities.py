"""Wikipedia sentence/entity extraction: the real sample dump and hand-written markup cases."""

import bz2
import json
import pathlib
import subprocess
import sys

import numpy as np
import pytest

from vmsst.base import entity_files
from vmsst_tasks import wiki_entities as wiki_entities_command
from vmsst_tasks.sources import wikipedia as we

import vmsst_testing

REPO = pathlib.Path(__file__).resolve().parents[2]

SAMPLE = (pathlib.Path(__file__).resolve().parents[3] / "shared" / "data"
          / "wiki_entity_sample" / "enwiki-pages-articles-sample.xml.bz2")


def _dump(tmp_path, pages, name="dump.xml.bz2"):
  """A bz2 MediaWiki export (schema 0.10 namespace) of (title, ns, wikitext) pages."""
  body = "".join(
      f"<page><title>{t}</title><ns>{ns}</ns><id>{i}</id><revision><text xml:space=\"preserve\">"
      f"{text.replace('&', '&amp;').replace('<', '&lt;').replace('>', '&gt;')}</text>"
      "</revision></page>" for i, (t, ns, text) in enumerate(pages))
  xml = f'<mediawiki xmlns="http://www.mediawiki.org/xml/export-0.10/">{body}</mediawiki>'
  path = tmp_path / name
  path.write_bytes(bz2.compress(xml.encode()))
  return str(path)


def _sum_skipped(counter):
  return sum(v for k, v in counter.items() if k.startswith("skipped_"))


@pytest.fixture(scope="module")
def sample():
  if not SAMPLE.exists():
    pytest.skip(f"{SAMPLE} not found (../shared/data/wiki_entity_sample)")
  # The 2-article fixture: most entities are linked once, so the paper's threshold (10)
  # would leave almost nothing; keep every linked entity.
  return we.extract(str(SAMPLE), heldout_fraction=0.5, min_links=0)


def test_sample_dump_real_content_and_counts_add_up(sample):
  examples, entities, counts = sample
  assert counts.pages == {"read": 3, "kept": 2, "skipped_redirect": 1}  # AccessibleComputing
  for unit in ("links", "sentences"):
    assert counts.__dict__[unit]["read"] == (counts.__dict__[unit]["kept"]
                                             + _sum_skipped(counts.__dict__[unit])), unit
  assert counts.links["skipped_namespace"] > 0  # the File: images of "Computer accessibility"
  assert counts.examples["train"] + counts.examples["validation"] == len(examples)
  first = [e for e in examples if e["text"].startswith("In human–computer interaction, computer")]
  assert {e["entity"] for e in first} == {"Human–computer interaction", "Accessibility",
                                          "Computer system", "Disability"}
  assert first[0]["text"].endswith("regardless of disability or severity of impairment.")
  assert {e["page"] for e in examples} == {"Computer accessibility", "Accessibility"}
  keys = dict((k, n) for k, n, _ in entities)
  assert keys["Screen reader"] == 4 and keys["Assistive technology"] == 5
  assert not any(k.startswith(("File:", "Category:")) for k in keys)
  for e in examples:
    assert not any(m in e["text"] for m in ("[[", "]]", "{{", "}}", "'''", "<ref", "&quot;"))
  trained = {e["entity"] for e in examples if e["split"] == "train"}
  held_out = [e for e in examples if e["split"] == "validation"]
  assert held_out and all(e["entity"] in trained for e in held_out)


MARKUP = """{{Infobox|name={{nested|x}}}}
'''Alan Turing''' was an [[english people|English]] [[mathematician]].<ref>{{cite|a}}</ref> He worked at [[Bletchley_Park#Codebreaking|Bletchley]] during the war.
== Legacy ==
{| class="wikitable"
| [[Table link]] || cell
|}
[[File:Turing.jpg|thumb|A photo of [[Alan Turing]] at [[Sherborne School]].]]
* The [[Turing machine]] is named after him and [[#Legacy|this section]] discusses it.
Short [[Mathematician]].
<!-- a [[Commented link]] --> He was [[Category:People|x]]born in [[London]] in 1912 by ''all'' accounts.
[[de:Alan Turing]]"""


def test_markup_is_stripped_and_links_resolved(tmp_path):
  dump = _dump(tmp_path, [("Alan Turing", 0, MARKUP), ("Talk:Alan Turing", 1, "[[London]] talk."),
                          ("Turing", 0, "#REDIRECT [[Alan Turing]]")])
  counts = we.Counts()
  sentences = list(we.article_sentences(dump, counts))
  assert [(s.text, s.titles) for s in sentences] == [
      ("Alan Turing was an English mathematician.", ("English people", "Mathematician")),
      ("He worked at Bletchley during the war.", ("Bletchley Park",)),
      ("The Turing machine is named after him and this section discusses it.",
       ("Turing machine",)),
      ("He was born in London in 1912 by all accounts.", ("London",)),
  ]
  assert counts.pages == {"read": 3, "kept": 1, "skipped_namespace": 1, "skipped_redirect": 1}
  # 10 links in the prose (the file link with its nested caption links counts once) =
  # 5 in the sentences above (kept or not by `extract`) + File, Category, de: + [[#Legacy|..]]
  # + the one in "Short Mathematician." (2 words); comments and tables hold none.
  assert counts.links == {"read": 10, "skipped_namespace": 3, "skipped_section_only": 1,
                          "skipped_in_short_sentence": 1}
  assert counts.sentences == {"read": 5, "skipped_too_short": 1}


def test_threshold_keeps_entities_linked_more_than_n_times(tmp_path):
  dump = _dump(tmp_path, [
      ("A", 0, "The [[river]] flows past the [[mill]] today.\n\nA [[river]] bank is green."),
      ("B", 0, "One more [[River]] is here too.")])
  examples, entities, counts = we.extract(dump, min_links=2)
  assert entities == [("River", 3, "")]
  assert [e["entity"] for e in examples] == ["River"] * 3
  assert counts.links["kept"] == 3 and counts.links["skipped_below_threshold"] == 1
  assert counts.sentences == {"read": 3, "kept": 3}
  _, entities, counts = we.extract(dump, min_links=3)
  assert entities == [] and counts.sentences["skipped_no_kept_entity"] == 3


def test_interlanguage_table_maps_titles_to_ids_and_drops_unmapped(tmp_path):
  dump = _dump(tmp_path, [("A", 0, "The [[Rhine_river|Rhine]] meets the [[Main (river)|Main]] "
                                   "at [[Mainz]] city.")])
  table = tmp_path / "ill.tsv"
  table.write_text("# title<TAB>id\nrhine river\tQ584\n\nMain (river)\tQ1670\n")
  examples, entities, counts = we.extract(dump, interlanguage=str(table), min_links=0)
  assert [e["entity"] for e in examples] == ["Q584", "Q1670"]
  assert sorted(k for k, _, _ in entities) == ["Q1670", "Q584"]
  assert counts.links["skipped_no_interlanguage_id"] == 1  # Mainz
  table.write_text("Rhine\tQ584\nMainz Q1707\n")
  with pytest.raises(ValueError, match=r"ill.tsv:2: expected '<title><TAB><id>'.*fix or delete"):
    we.extract(dump, interlanguage=str(table), min_links=0)


def test_interlanguage_flag_keys_the_written_entities_by_id(tmp_path, capfd):
  dump = _dump(tmp_path, [("A", 0, "The [[Rhine_river|Rhine]] meets the [[Main (river)|Main]] "
                                   "at [[Mainz]] city.")])
  table = tmp_path / "ill.tsv"
  table.write_text("rhine river\tQ584\nMain (river)\tQ1670\n")
  done = vmsst_testing.run_here(wiki_entities_command, [f"--dump={dump}", f"--output={tmp_path / 'out'}",
                                     f"--interlanguage={table}", "--min_links=0",
                                     "--heldout_fraction=0"], capfd)
  assert done.returncode == 0, done.stderr[-2000:]
  assert json.loads((tmp_path / "out" / "meta.json").read_text())["entity_keys"] == (
      entity_files.KEYS_ID)
  assert sorted(entity_files.load_entity_keys(str(tmp_path / "out"))) == ["Q1670", "Q584"]


def test_hard_negatives_share_the_type_and_are_not_on_the_page(tmp_path):
  dump = _dump(tmp_path, [
      ("Rome", 0, "[[Paris]] is bigger than [[Lyon]] in size.\nThe [[Seine]] runs through it."),
      ("P2", 0, "[[Berlin]] and [[Munich]] are cities.\n[[Rome]] is another city too."),
      ("P3", 0, "The [[Danube]] is a long river.")])
  types = tmp_path / "types.tsv"
  types.write_text("Paris\tcity\nLyon\tcity\nBerlin\tcity\nMunich\tcity\nRome\tcity\n"
                   "Seine\triver\nDanube\triver\n")
  examples, _, counts = we.extract(dump, types=str(types), num_hard_negatives=2, seed=1,
                                   min_links=0)
  by_entity = {e["entity"]: e["hard_negatives"] for e in examples}
  # Same type (city), not on the page "Rome" (neither Lyon, linked there, nor Rome itself).
  assert sorted(by_entity["Paris"]) == ["Berlin", "Munich"]
  assert sorted(by_entity["Berlin"]) == ["Lyon", "Paris"]
  assert by_entity["Seine"] == ["Danube", None] and by_entity["Danube"] == ["Seine", None]
  assert counts.examples["hard_negative_slots_padded"] == 2
  again, _, _ = we.extract(dump, types=str(types), num_hard_negatives=2, seed=1, min_links=0)
  assert again == examples  # stateless: the same seed gives the same negatives
  draws = {tuple(we.extract(dump, types=str(types), num_hard_negatives=1, seed=s,
                            min_links=0)[0][0]
                 ["hard_negatives"]) for s in range(8)}
  assert len(draws) > 1  # Paris's one negative depends on the seed


def test_written_directory_loads_as_entity_rows(tmp_path, capfd):
  """Written by the command as typed (in this process): --types, --num_hard_negatives, --lang,
  --seed."""
  dump = _dump(tmp_path, [("P1", 0, "[[Paris]] is bigger than [[Lyon]] in size."),
                          ("P2", 0, "[[Berlin]] is a city in Germany.")])
  types = tmp_path / "types.tsv"
  types.write_text("Paris\tcity\nLyon\tcity\nBerlin\tcity\n")
  done = vmsst_testing.run_here(wiki_entities_command, [
      f"--dump={dump}", f"--output={tmp_path / 'out'}", f"--types={types}",
      "--num_hard_negatives=1", "--heldout_fraction=0", "--min_links=0", "--lang=deu",
      "--seed=3"], capfd)
  assert done.returncode == 0, done.stderr[-2000:]
  meta = json.loads((tmp_path / "out" / "meta.json").read_text())
  assert meta["num_entities"] == 3 and meta["num_hard_negatives"] == 1
  assert meta["entity_keys"] == entity_files.KEYS_TITLE and meta["min_links"] == 0
  keys = entity_files.load_entity_keys(str(tmp_path / "out"))
  texts, langs, ids = we.load_split(str(tmp_path / "out"), "train")
  assert langs == ["deu"] * 3 and ids.dtype == np.int32 and ids.shape == (3, 2)
  assert [keys[i] for i in ids[:, 0]] == ["Paris", "Lyon", "Berlin"]
  assert keys[ids[2, 1]] in ("Paris", "Lyon") and texts[2] == "Berlin is a city in Germany."
  assert we.load_split(str(tmp_path / "out"), "validation")[2].shape == (0, 2)
  with pytest.raises(FileNotFoundError, match="python -m vmsst_tasks.wiki_entities"):
    entity_files.load_meta(str(tmp_path / "missing"))


def test_paper_threshold_keeps_entities_linked_more_than_ten_times_by_default(tmp_path):
  # "Paris" linked 11 times, "Lyon" exactly 10: EASE §3.1 keeps "more than ten".
  text = "\n".join(["[[Paris]] is a large city here."] * 11 + ["[[Lyon]] is a city too here."] * 10)
  dump = _dump(tmp_path, [("P", 0, text)])
  examples, entities, counts = we.extract(dump)
  assert we.PAPER_MIN_LINKS == 10
  assert [k for k, _, _ in entities] == ["Paris"]
  assert len(examples) == 11 and counts.links["skipped_below_threshold"] == 10
  done = subprocess.run([sys.executable, "-m", "vmsst_tasks.wiki_entities", f"--dump={dump}",
                         f"--output={tmp_path / 'out'}", "--heldout_fraction=0"],
                        cwd=REPO, capture_output=True, text=True, check=False)
  assert done.returncode == 0, done.stderr
  assert done.stdout.startswith(f"11 examples, 1 entities -> {tmp_path / 'out'}")
  meta = json.loads((tmp_path / "out" / "meta.json").read_text())
  assert meta["min_links"] == 10 and meta["num_entities"] == 1  # the CLI's default too


def test_command_parses_flags_with_absl_like_every_other_command(tmp_path):
  done = subprocess.run([sys.executable, "-m", "vmsst_tasks.wiki_entities", "--dump=x.xml"],
                        cwd=REPO, capture_output=True, text=True, check=False)
  vmsst_testing.assert_user_error(done, "--output", "--help")
  assert "FATAL" not in done.stderr


def test_an_entity_with_several_types_draws_from_one_chosen_at_random(tmp_path):
  # Rome is a city and a capital; its candidates: city {Lyon, Turin}, capital {Paris, Berlin}.
  pages = [("P0", 0, "[[Rome]] is old and has a long history."),
           ("P1", 0, "[[Rome]] is also famous for its food."),
           ("P2", 0, "[[Lyon]] and [[Turin]] are cities in Europe."),
           ("P3", 0, "[[Paris]] and [[Berlin]] are capitals in Europe.")]
  dump = _dump(tmp_path, pages)
  types = tmp_path / "types.tsv"
  types.write_text("Rome\tcity\nRome\tcapital\nLyon\tcity\nTurin\tcity\n"
                   "Paris\tcapital\nBerlin\tcapital\n")
  assert entity_files.read_multi_table(str(types), "type")["Rome"] == ["city", "capital"]
  chosen = {}
  for seed in range(12):
    examples, entities, _ = we.extract(dump, types=str(types), num_hard_negatives=2, seed=seed,
                                       min_links=0)
    rome = [sorted(e["hard_negatives"]) for e in examples if e["entity"] == "Rome"]
    assert len(rome) == 2 and rome[0] == rome[1]  # one type per entity, for all its examples
    assert rome[0] in (["Lyon", "Turin"], ["Berlin", "Paris"])  # never a mix of the two types
    written = dict((k, t) for k, _, t in entities)["Rome"]
    assert rome[0] == (["Lyon", "Turin"] if written == "city" else ["Berlin", "Paris"])
    chosen[seed] = written
  assert set(chosen.values()) == {"city", "capital"}, chosen  # not always the first type
  assert we.chosen_type("Rome", {"Rome": ["city", "capital"]}, 3) == chosen[3]
