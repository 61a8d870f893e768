"""Canonical language codes and the language ids the network embeds.

Every example carries canonical codes, so a language gets exactly one id no
matter which corpus spelled it how (OPUS `zh_cn`, ISO 639-1 `de`, Tatoeba `lvs`).
The canonical form is the NTREX-128 file suffix: an ISO 639-3 code, with a
script or region subtag where NTREX distinguishes variants (`zho-CN`,
`aze-Latn`, `por-BR`). Languages outside NTREX use their ISO 639-3 code.

Language ids are indices into `LANGUAGES` (`language_index`): the network has
its own [len(LANGUAGES), d] table for them (`language_embed`, see
vmsst/model/network.py), outside the token vocabulary, so any SentencePiece model
works unchanged (mT5's included, as the paper uses for every model, §5).
A model directory from before that (its checkpoint has no `language_embed`; its
vocabulary one `<2xxx>` piece per language, `language_token`) is not read: restoring
one is an error naming the fix (vmsst/encoding/restore.py).

Merges (one id for what other corpora split), chosen because a retrieval
model needs one language embedding per written standard that data arrives in:
  * macrolanguage / individual-language pairs: `lvs`->`lav`, `swh`->`swa`,
    `zsm`->`msa`, `ekk`->`est`, `pes`->`fas`, `ara`->`arb`, `cmn`->`zho-CN` ...
  * Tagalog `tgl`/`tl` -> Filipino `fil` (Filipino is standardised Tagalog).
  * regional English (`eng-GB`, `en_US` ...) -> `eng`. The NTREX eng-GB/IN/US
    files are rewrites of the source and are excluded by the NTREX reader, not
    here.
Kept apart: `srp` (script-unspecified Serbian, e.g. Tatoeba, OPUS `sr`) and
NTREX's `srp-Cyrl` / `srp-Latn`; `por`/`por-BR`, `spa`/`spa-MX`, `fra`/`fra-CA`,
`zho-CN`/`zho-TW`, `yue`.

Adding a language: put its canonical code in `_EXTRA_LANGUAGES` (and spellings
in `_ALIASES`). The vocabulary needs no retraining, but the language table grows
by a row and the codes sorted after the new one move up an index, so models
trained before cannot be resumed or restored with it (their `language_embed`
shape differs, which checkpoint restore reports); start a new run.
"""

# NTREX-128 reference languages (file suffixes), minus the eng-GB/IN/US rewrites.
NTREX_LANGUAGES = (
    "afr amh arb aze-Latn bak bel bem ben bod bos bul cat ces ckb-Arab cym dan deu div "
    "dzo ell eng est eus ewe fao fas fij fil fin fra fra-CA fuc gle glg guj hau heb hin "
    "hmn hrv hun hye ibo ind isl ita jpn kan kat kaz khm kin kir kmr kor lao lav lit ltz "
    "mal mar mey mkd mlg mlt mon mri msa mya nde nep nld nno nob nso nya orm pan pol por "
    "por-BR prs pus ron rus shi sin slk slv smo sna-Latn snd-Arab som spa spa-MX sqi "
    "srp-Cyrl srp-Latn ssw swa swe tah tam tat tel tgk-Cyrl tha tir ton tsn tuk tur uig "
    "ukr urd uzb ven vie wol xho yor yue zho-CN zho-TW zul"
).split()

# NTREX files that are English rewrites of the source, not translations.
NTREX_ENGLISH_REWRITES = ("eng-GB", "eng-IN", "eng-US")

# All 112 Tatoeba v1 (LASER) codes as they appear in file names. 56 are in
# ../shared/data/tatoeba; the other 56 are held out but still need a symbol.
TATOEBA_CODES = (
    "afr amh ang ara arq arz ast awa aze bel ben ber bos bre bul cat cbk ceb ces cha cmn "
    "cor csb cym dan deu dsb dtp ell epo est eus fao fin fra fry gla gle glg gsw heb hin "
    "hrv hsb hun hye ido ile ina ind isl ita jav jpn kab kat kaz khm kor kur kzj lat lfn "
    "lit lvs mal mar max mhr mkd mon nds nld nno nob nov oci orv pam pes pms pol por ron "
    "rus slk slv spa sqi srp swe swg swh tam tat tel tgl tha tuk tur tzl uig ukr urd uzb "
    "vie war wuu xho yid yue zsm"
).split()

# ISO 639-1 code -> canonical code, for every ISO 639-1 language (OPUS names
# files with these). Deprecated 2-letter codes OPUS still uses are included.
_ISO_639_1 = dict(pair.split(":") for pair in (
    "aa:aar ab:abk ae:ave af:afr ak:aka am:amh an:arg ar:arb as:asm av:ava ay:aym "
    "az:aze-Latn ba:bak be:bel bg:bul bi:bis bm:bam bn:ben bo:bod br:bre bs:bos ca:cat "
    "ce:che ch:cha co:cos cr:cre cs:ces cu:chu cv:chv cy:cym da:dan de:deu dv:div dz:dzo "
    "ee:ewe el:ell en:eng eo:epo es:spa et:est eu:eus fa:fas ff:fuc fi:fin fj:fij fo:fao "
    "fr:fra fy:fry ga:gle gd:gla gl:glg gn:grn gu:guj gv:glv ha:hau he:heb hi:hin ho:hmo "
    "hr:hrv ht:hat hu:hun hy:hye hz:her ia:ina id:ind ie:ile ig:ibo ii:iii ik:ipk io:ido "
    "is:isl it:ita iu:iku ja:jpn jv:jav ka:kat kg:kon ki:kik kj:kua kk:kaz kl:kal km:khm "
    "kn:kan ko:kor kr:kau ks:kas ku:kmr kv:kom kw:cor ky:kir la:lat lb:ltz lg:lug li:lim "
    "ln:lin lo:lao lt:lit lu:lub lv:lav mg:mlg mh:mah mi:mri mk:mkd ml:mal mn:mon mr:mar "
    "ms:msa mt:mlt my:mya na:nau nb:nob nd:nde ne:nep ng:ndo nl:nld nn:nno no:nob nr:nbl "
    "nv:nav ny:nya oc:oci oj:oji om:orm or:ori os:oss pa:pan pi:pli pl:pol ps:pus pt:por "
    "qu:que rm:roh rn:run ro:ron ru:rus rw:kin sa:san sc:srd sd:snd-Arab se:sme sg:sag "
    "si:sin sk:slk sl:slv sm:smo sn:sna-Latn so:som sq:sqi sr:srp ss:ssw st:sot su:sun "
    "sv:swe sw:swa ta:tam te:tel tg:tgk-Cyrl th:tha ti:tir tk:tuk tl:fil tn:tsn to:ton "
    "tr:tur ts:tso tt:tat tw:twi ty:tah ug:uig uk:ukr ur:urd uz:uzb ve:ven vi:vie vo:vol "
    "wa:wln wo:wol xh:xho yi:yid yo:yor za:zha zh:zho-CN zu:zul "
    "iw:heb in:ind ji:yid jw:jav mo:ron sh:hbs"
).split())

# Other spellings (keys lower-case, '_' read as '-') -> canonical code.
_ALIASES = {
    **_ISO_639_1,
    # OPUS regional / script variants.
    "zh-cn": "zho-CN", "zh-hans": "zho-CN", "zh-tw": "zho-TW", "zh-hant": "zho-TW",
    "pt-br": "por-BR", "pt-pt": "por", "es-mx": "spa-MX", "es-es": "spa", "fr-ca": "fra-CA",
    "fr-fr": "fra", "sr-cyrl": "srp-Cyrl", "sr-latn": "srp-Latn", "az-latn": "aze-Latn",
    "en-gb": "eng", "en-us": "eng", "en-in": "eng", "en-au": "eng", "en-ca": "eng",
    "eng-gb": "eng", "eng-us": "eng", "eng-in": "eng",
    # ISO 639-3 macrolanguage / individual-language and script-less spellings.
    "ara": "arb", "cmn": "zho-CN", "zho": "zho-CN", "pes": "fas", "lvs": "lav", "swh": "swa",
    "zsm": "msa", "ekk": "est", "uzn": "uzb", "khk": "mon", "npi": "nep", "als": "sqi",
    "gaz": "orm", "pbt": "pus", "plt": "mlg", "ydd": "yid", "ory": "ori", "kur": "kmr",
    "aze": "aze-Latn", "azj": "aze-Latn", "tgk": "tgk-Cyrl", "snd": "snd-Arab",
    "sna": "sna-Latn", "ckb": "ckb-Arab", "tgl": "fil", "nor": "nob", "ful": "fuc",
}

# Canonical codes that are neither NTREX codes nor ISO 639-1 targets: Tatoeba
# languages without an ISO 639-1 code and languages common in OPUS.
_EXTRA_LANGUAGES = (
    "ang arq arz ast awa ber cbk ceb csb dsb dtp gsw hbs hsb kab kzj lfn max mhr nds nov "
    "orv pam pms swg tzl war wuu"
).split()


def _all_languages() -> tuple[str, ...]:
  """Union of every source's canonical codes, sorted so the tuple is stable."""
  codes = set(NTREX_LANGUAGES) | set(_ISO_639_1.values()) | set(_EXTRA_LANGUAGES)
  codes |= {"eng", "deu", "fra", "ces"}  # Multi30k.
  codes |= {_ALIASES.get(c, c) for c in TATOEBA_CODES}
  return tuple(sorted(codes))


LANGUAGES: tuple[str, ...] = _all_languages()
_BY_LOWER = {code.lower(): code for code in LANGUAGES}


def canonical_language(code: str) -> str:
  """Maps any supported spelling of a language to its canonical code.

  Examples: "de" -> "deu", "zh_cn" -> "zho-CN", "pt_BR" -> "por-BR",
  "lvs" -> "lav", "deu" -> "deu", "aze-latn" -> "aze-Latn".

  Raises:
    ValueError: the code is unknown; the message says how to add it.
  """
  key = code.strip().replace("_", "-").lower()
  if key in _ALIASES:
    return _ALIASES[key]
  if key in _BY_LOWER:
    return _BY_LOWER[key]
  raise ValueError(
      f"Unknown language code {code!r}. If it is a real language, add its canonical "
      "ISO 639-3 code to _EXTRA_LANGUAGES in vmsst/base/languages.py (or map this spelling "
      "to an existing code in _ALIASES); it then gets a language id (a row of the "
      "network's language table).")


ENGLISH = "eng"  # the pivot of the retrieval benchmarks, and side a of the paper runs


def pair_side(language: str, side_a_languages) -> str:
  """The pair side ("a" or "b") whose tower embeds `language` in a two-tower model.

  "a" for a language of `side_a_languages` (canonical codes, English in the
  paper runs), "b" for any other, including codes with no language id
  (Tatoeba's `ang`): the rule MomentumContrast trains by and every consumer
  outside training (evaluation, embed, mine, the SavedModel) picks towers by.
  """
  try:
    code = canonical_language(language)
  except ValueError:  # no id here, so not among side a's (canonical) languages
    return "b"
  return "a" if code in side_a_languages else "b"


LANGUAGE_INDEX: dict[str, int] = {code: index for index, code in enumerate(LANGUAGES)}


def language_index(code: str) -> int:
  """The language id the network embeds: the code's index in LANGUAGES.

  Examples: "deu" -> LANGUAGES.index("deu"), and "de" the same.

  Raises:
    ValueError: the code is unknown (see `canonical_language`).
  """
  return LANGUAGE_INDEX[canonical_language(code)]


def language_token(code: str) -> str:
  """The `<2xxx>` piece a legacy vocabulary holds for a language, e.g. "de" -> "<2deu>".

  Vocabularies are no longer trained with these pieces (language ids have
  their own table); this names them in vocabularies that were.
  """
  return f"<2{canonical_language(code)}>"
