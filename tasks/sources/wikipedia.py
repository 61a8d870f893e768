r"""Linked entities from a MediaWiki dump (EASE): sentences, their entities, the entity table.

`build` (the command `python -m vmsst_tasks.wiki_entities`) writes OUTPUT/examples.jsonl (one
line per (sentence, entity) example: {"text", "lang", "entity", "hard_negatives", "page",
"split"}), OUTPUT/entities.tsv
(the entity vocabulary: `key<TAB>count<TAB>type`; row i of the model's entity
table is line i) and OUTPUT/meta.json (sizes and every count).

The dump (bz2 or plain XML) is streamed with xml.etree.iterparse, matching tags
by local name so any export schema version works; it is read twice (pass 1
counts links per entity, pass 2 writes examples), so memory holds the entity
counts, not the dump. Per page: redirects and non-article namespaces are
skipped; templates, refs, comments, tables, files, categories, headings and
bold/italic quotes are stripped; [[Target|anchor]] becomes "anchor" and links
Target. An entity is kept if linked more than `min_links` times (default 10,
EASE §3.1: "entities that appear more than ten times as hyperlinks"; a small
fixture dump sets it lower).

Optional tables (UTF-8, one `key<TAB>value` a line; blank lines and lines
starting with '#' ignored; titles are normalised like link targets):
  interlanguage: title -> language-independent id (e.g. a Wikidata Q-id). When
    given, entities are keyed by id and links to titles without one are dropped
    (meta.json's "entity_keys" says which: Wikipedia2Vec vectors, keyed by
    title, then need a title -> id table to meet the vocabulary).
  types: entity key (id when an interlanguage table is given) -> type, one line
    per (entity, type): an entity may have several (Wikidata "instance of").
    When given, each example gets `num_hard_negatives` entities of its entity's
    type that are not linked on the example's page; an entity with several
    types draws from one of them, chosen at random once per entity (EASE §3.2:
    "If there are more than one appropriate type, we randomly choose one"; the
    authors' build_type_hardnegative_dataset.py picks per entity). Every draw
    uses a stateless seed.
Every skip is counted: pages/links/sentences read = kept + skipped per reason.
"""

import collections
import dataclasses
import hashlib
import html
import json
import re
import xml.etree.ElementTree as ET
from typing import Iterator, Mapping, Sequence

import numpy as np

from vmsst.base import cli
from vmsst.base import entity_files
from vmsst.base import files


NAMESPACE_PREFIXES = {"file", "image", "media", "category", "template", "wikipedia", "wp",
                      "help", "portal", "special", "user", "talk", "draft", "module", "wikt",
                      "wiktionary", "commons", "s", "q", "b", "n", "v", "d", "meta", "mw"}
SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[\"'(\[]?[A-Z0-9])")
PADDING = -1  # a hard-negative slot without a candidate (also the id of a missing entity)
# EASE §3.1 keeps entities "that appear more than ten times as hyperlinks".
PAPER_MIN_LINKS = 10


@dataclasses.dataclass
class Counts:
  """What was read, kept and skipped (and why), per unit."""
  pages: collections.Counter = dataclasses.field(default_factory=collections.Counter)
  links: collections.Counter = dataclasses.field(default_factory=collections.Counter)
  sentences: collections.Counter = dataclasses.field(default_factory=collections.Counter)
  examples: collections.Counter = dataclasses.field(default_factory=collections.Counter)

  def as_dict(self) -> dict[str, dict[str, int]]:
    return {f.name: dict(sorted(getattr(self, f.name).items())) for f in dataclasses.fields(self)}


@dataclasses.dataclass(frozen=True)
class Sentence:
  """A sentence of an article, anchors as plain text, and its links' normalised titles."""
  page: str
  text: str
  titles: tuple[str, ...]


def iter_pages(dump: str) -> Iterator[tuple[str, int, bool, str]]:
  """(title, namespace, is_redirect, wikitext) of every <page>, streamed."""
  with files.open_compressed(dump) as f:
    page: dict[str, str] = {}
    for _, elem in ET.iterparse(f, events=("end",)):
      tag = elem.tag.rsplit("}", 1)[-1]
      if tag in ("title", "ns", "text"):
        page[tag] = elem.text or ""
      elif tag == "redirect":
        page["redirect"] = "1"
      elif tag == "page":
        text = page.get("text", "")
        redirect = "redirect" in page or text.lstrip().upper().startswith("#REDIRECT")
        yield page.get("title", ""), int(page.get("ns", "0") or 0), redirect, text
        page = {}
        elem.clear()


def _remove_nested(text: str, opening: str, closing: str) -> str:
  """Drops every (possibly nested) opening...closing span, e.g. {{a|{{b}}}}."""
  out, depth, i = [], 0, 0
  while i < len(text):
    if text.startswith(opening, i):
      depth, i = depth + 1, i + len(opening)
    elif depth and text.startswith(closing, i):
      depth, i = depth - 1, i + len(closing)
    else:
      if not depth:
        out.append(text[i])
      i += 1
  return "".join(out)


def strip_markup(wikitext: str) -> str:
  """Wikitext without comments, refs, templates, tables, tags and headings (links kept)."""
  text = re.sub(r"<!--.*?-->", "", wikitext, flags=re.S)
  text = re.sub(r"<ref[^>]*/>", "", text)
  text = re.sub(r"<ref[^>]*>.*?</ref>", "", text, flags=re.S)
  text = _remove_nested(text, "{{", "}}")
  text = _remove_nested(text, "{|", "|}")
  text = re.sub(r"<[^>]+>", "", text)
  text = re.sub(r"(?m)^=+.*?=+\s*$", "", text)
  text = re.sub(r"'{2,}", "", text)
  text = re.sub(r"\[(?:https?|ftp)://\S+\s*([^\]]*)\]", r"\1", text)
  return html.unescape(text)


def _namespace_link(target: str) -> bool:
  prefix = target.lstrip(":").split(":", 1)
  return len(prefix) == 2 and (prefix[0].strip().lower() in NAMESPACE_PREFIXES
                              or re.fullmatch(r"[a-z]{2,3}(-[a-z]+)?", prefix[0].strip()))


def resolve_links(paragraph: str, counts: Counts) -> tuple[str, list[tuple[int, str]]]:
  """Plain paragraph and (character offset, normalised title) of each article link.

  "In [[Human–computer interaction|HCI]], ..." -> ("In HCI, ...", [(3, "Human–computer
  interaction")]). File/Category/interwiki links are dropped whole (captions
  with nested links included); "[[#Section|x]]" keeps "x" and links nothing.
  """
  out, links, i = [], [], 0
  while i < len(paragraph):
    start = paragraph.find("[[", i)
    if start < 0:
      out.append(paragraph[i:])
      break
    out.append(paragraph[i:start])
    depth, j = 0, start
    while j < len(paragraph):
      if paragraph.startswith("[[", j):
        depth, j = depth + 1, j + 2
      elif paragraph.startswith("]]", j):
        depth, j = depth - 1, j + 2
        if not depth:
          break
      else:
        j += 1
    inner = paragraph[start + 2:j - 2] if depth == 0 else paragraph[start + 2:]
    i = j
    target, _, anchor = inner.partition("|")
    counts.links["read"] += 1
    if _namespace_link(target):
      counts.links["skipped_namespace"] += 1
      continue
    anchor = anchor or target.split("#", 1)[0] or target.lstrip("#")
    title = entity_files.normalize_title(target)
    if not title:
      counts.links["skipped_section_only"] += 1
    else:
      links.append((sum(map(len, out)), title))
    out.append(anchor)
  return "".join(out), links


def page_sentences(title: str, wikitext: str, counts: Counts, *,
                   min_words: int = 4) -> Iterator[Sentence]:
  """The sentences of one article's wikitext with the titles they link."""
  for paragraph in strip_markup(wikitext).split("\n"):
    plain, links = resolve_links(paragraph.lstrip("*#:; "), counts)
    offset = 0
    for piece in SENTENCE_END.split(plain):
      begin = plain.index(piece, offset)
      offset = begin + len(piece)
      inside = tuple(dict.fromkeys(t for at, t in links if begin <= at < offset))
      text = " ".join(piece.split())
      if not text:
        continue
      counts.sentences["read"] += 1
      if len(text.split()) < min_words:
        counts.sentences["skipped_too_short"] += 1
        counts.links["skipped_in_short_sentence"] += len(inside)
        continue
      yield Sentence(title, text, inside)


def article_sentences(dump: str, counts: Counts, *, min_words: int = 4) -> Iterator[Sentence]:
  """Sentences of every article page; redirects and other namespaces are counted, skipped."""
  for title, namespace, redirect, text in iter_pages(dump):
    counts.pages["read"] += 1
    reason = "redirect" if redirect else "namespace" if namespace != 0 else None
    reason = reason or (None if text.strip() else "empty")
    if reason:
      counts.pages[f"skipped_{reason}"] += 1
      continue
    counts.pages["kept"] += 1
    yield from page_sentences(title, text, counts, min_words=min_words)


def stable_unit(*parts) -> float:
  """A uniform number in [0, 1) from its arguments alone (stateless seeding)."""
  digest = hashlib.sha256("\x1f".join(map(str, parts)).encode()).digest()
  return int.from_bytes(digest[:8], "little") / 2.0**64


def chosen_type(entity: str, types: Mapping[str, Sequence[str]], seed: int) -> str | None:
  """One of `entity`'s types, picked by a stateless draw on (seed, entity); None if it has none."""
  options = types.get(entity, ())
  return options[int(stable_unit(seed, "type", entity) * len(options))] if options else None


def hard_negatives(entity: str, page_entities: set[str], by_type: Mapping[str, Sequence[str]],
                   entity_type: str | None, count: int, seed: int) -> list[str]:
  """`count` entities of type `entity_type` not on the page (linked there, or the page itself).

  Ordered by a hash of (seed, entity, candidate): stateless, so the same dump
  and seed give the same negatives whatever the reading order.
  """
  candidates = [e for e in by_type.get(entity_type, ()) if e != entity and e not in page_entities]
  candidates.sort(key=lambda e: stable_unit(seed, entity, e))
  return candidates[:count]


def extract(dump: str, *, min_links: int = PAPER_MIN_LINKS, interlanguage: str | None = None,
            types: str | None = None, num_hard_negatives: int = 1, heldout_fraction: float = 0.0,
            seed: int = 0, lang: str = "eng", min_words: int = 4):
  """Examples, the entity vocabulary and the counts of one dump (two streaming passes).

  Args:
    dump: a MediaWiki pages-articles XML file (.bz2 or plain).
    min_links: keep entities linked more than this many times (in kept sentences).
    interlanguage: optional title -> language-independent id table (module doc).
    types: optional entity -> types table (one line per type); enables hard negatives.
    num_hard_negatives: H per example when `types` is given (0 without it).
    heldout_fraction: share of sentences (by a seeded hash of the text) in the
      "validation" split; a validation example whose entity has no training
      example moves to "train" (counted), so held-out entities are all seen.
    seed: the stateless seed of the split and of the hard negatives.
    lang: canonical language code of the dump's text.
    min_words: shorter sentences are skipped (counted).
  Returns:
    (examples: list of dicts, entities: list of (key, count, chosen type or ""),
     counts: Counts).
  """
  ids = entity_files.read_table(interlanguage, "id") if interlanguage else None
  types_of = entity_files.read_multi_table(types, "type") if types else {}
  key = (lambda t: ids.get(t)) if ids is not None else (lambda t: t)
  linked = collections.Counter(k for s in article_sentences(dump, Counts(), min_words=min_words)
                               for k in map(key, s.titles) if k is not None)
  vocab = sorted((k for k, n in linked.items() if n > min_links), key=lambda k: (-linked[k], k))
  kept = set(vocab)
  by_type = collections.defaultdict(list)  # a type -> every kept entity that has it
  for k in vocab:
    for t in types_of.get(k, ()):
      by_type[t].append(k)
  type_of = {k: chosen_type(k, types_of, seed) for k in vocab}
  counts, sentences, page_entities = Counts(), [], collections.defaultdict(set)
  for sentence in article_sentences(dump, counts, min_words=min_words):
    entities = []
    for title in sentence.titles:
      k = key(title)
      reason = ("no_interlanguage_id" if k is None else
                "below_threshold" if k not in kept else None)
      counts.links[f"skipped_{reason}" if reason else "kept"] += 1
      if reason is None:
        entities.append(k)
    if not entities:
      counts.sentences["skipped_no_kept_entity"] += 1
      continue
    counts.sentences["kept"] += 1
    page_title = key(entity_files.normalize_title(sentence.page))
    page_entities[sentence.page].update([*entities, page_title])
    sentences.append((sentence, entities))
  hard = num_hard_negatives if types else 0
  examples = []
  for sentence, entities in sentences:
    split = "validation" if stable_unit(seed, "split", sentence.text) < heldout_fraction else "train"
    for entity in entities:
      negatives = hard_negatives(entity, page_entities[sentence.page], by_type, type_of[entity],
                                 hard, seed)
      counts.examples["hard_negative_slots_padded"] += hard - len(negatives)
      examples.append({"text": sentence.text, "lang": lang, "entity": entity,
                       "hard_negatives": negatives + [None] * (hard - len(negatives)),
                       "page": sentence.page, "split": split})
  trained = {e["entity"] for e in examples if e["split"] == "train"}
  for example in examples:
    if example["split"] == "validation" and example["entity"] not in trained:
      example["split"] = "train"
      counts.examples["validation_moved_to_train_unseen_entity"] += 1
  counts.examples.update(e["split"] for e in examples)
  return examples, [(k, linked[k], type_of[k] or "") for k in vocab], counts


def check_not_empty(dump: str, num_examples: int, counts: Counts, min_links: int | None) -> None:
  """Raises cli.UserError (one line: the input, its counts, the flag) when nothing was kept.

  An empty directory would only fail later, deep in training (an empty
  entity table); this stops at the step that produced it.
  """
  if num_examples:
    return
  links, sentences = counts.as_dict()["links"], counts.as_dict()["sentences"]
  raise cli.UserError(
      f"{dump}: 0 examples (pages {sum(counts.pages.values())}, links {links}, sentences "
      f"{sentences}): no entity is linked more than --min_links={min_links} times; lower "
      "--min_links (the shipped sample needs --min_links=0) or give a bigger dump.")


def write(output: str, examples, entities, counts: Counts, num_hard_negatives: int, *,
          entity_keys: str = entity_files.KEYS_TITLE, min_links: int | None = None) -> None:
  """OUTPUT/examples.jsonl, entities.tsv and meta.json (see the module docstring)."""
  out = files.as_path(output)
  out.mkdir(parents=True, exist_ok=True)
  with files.open(out / "examples.jsonl", "w") as f:
    for example in examples:
      f.write(json.dumps(example, ensure_ascii=False) + "\n")
  with files.open(out / "entities.tsv", "w") as f:
    f.writelines(f"{k}\t{n}\t{t}\n" for k, n, t in entities)
  meta = {"num_entities": len(entities), "num_hard_negatives": num_hard_negatives,
          "entity_keys": entity_keys, "min_links": min_links, "counts": counts.as_dict()}
  (out / "meta.json").write_text(json.dumps(meta, indent=1) + "\n")


def load_split(directory: str, split: str) -> tuple[list[str], list[str], np.ndarray]:
  """(texts, langs, entities int32 [N, 1 + H]) of one split; rows of the entity table.

  Column 0 is the linked entity, columns 1..H its hard negatives; PADDING (-1)
  marks a hard-negative slot without a candidate.
  """
  rows = {k: i for i, k in enumerate(entity_files.load_entity_keys(directory))}
  hard = entity_files.load_meta(directory)["num_hard_negatives"]
  texts, langs, ids = [], [], []
  with files.open(files.join(directory, "examples.jsonl")) as f:
    for line in f:
      example = json.loads(line)
      if example["split"] != split:
        continue
      texts.append(example["text"])
      langs.append(example["lang"])
      keys = [example["entity"], *example["hard_negatives"]]
      ids.append([rows.get(k, PADDING) if k is not None else PADDING for k in keys])
  return texts, langs, np.asarray(ids, np.int32).reshape(len(texts), 1 + hard)


def build(dump: str, output: str, *, min_links: int = PAPER_MIN_LINKS,
          interlanguage: str | None = None, types: str | None = None,
          num_hard_negatives: int = 1, heldout_fraction: float = 0.2, seed: int = 0,
          lang: str = "eng") -> str:
  """Extracts `dump` into `output` (examples.jsonl, entities.tsv, meta.json); a summary."""
  examples, entities, counts = extract(
      dump, min_links=min_links, interlanguage=interlanguage, types=types,
      num_hard_negatives=num_hard_negatives, heldout_fraction=heldout_fraction, seed=seed,
      lang=lang)
  check_not_empty(dump, len(examples), counts, min_links)
  write(output, examples, entities, counts, num_hard_negatives if types else 0,
        entity_keys=entity_files.KEYS_ID if interlanguage else entity_files.KEYS_TITLE,
        min_links=min_links)
  lines = [f"{len(examples)} examples, {len(entities)} entities -> {output}"]
  lines += [f"  {unit}: {values}" for unit, values in counts.as_dict().items()]
  return "\n".join(lines)
