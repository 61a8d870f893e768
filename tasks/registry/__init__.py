"""vmsst's seqio tasks and mixtures, registered one family at a time.

Nothing registers on import. A run file names the families it trains on:

  train.register_tasks = @register_families
  register_families.data_dir = %DATA_DIR
  register_families.vocabulary_path = %VOCAB_PATH
  register_families.families = [@pair_tasks, @opus_tasks]
  opus_tasks.opus_dir = %OPUS_DIR

and `train` calls it before its data. Each family is one function of one
module here, taking the shared inputs (common.RegistrationInputs) and only
its own arguments; registering again replaces the same names. Families and
the names they register:

  pair_tasks (pairs.py)      vmsst_ntrex128, vmsst_multi30k: NTREX-128 pivot pairs
                             (eng/spa <-> 123 languages) and Multi30k en/de/fr/cs
                             (all 6 pairs per line), train/validation;
                             vmsst_ntrex_multi30k, their mixture (rates = training
                             pairs; the CPU runs)
  opus_tasks (opus.py)       vmsst_opus.<a>.<b>, one per language pair of an OPUS
                             directory (train only; '-' of codes written '_', e.g.
                             vmsst_opus.eng.zho_CN); vmsst_opus, their mixture
                             (rates = line counts); vmsst_opus_paper, the paper's
                             mixture over the same files (tasks/sources/opus_paper.py),
                             when the run trains on it
  distillation_tasks         vmsst_distill_ntrex128, vmsst_distill_multi30k: the pair
    (distillation.py)        tasks' pairs with the source language (eng) on a side,
                             turned so side a is the source, plus `teacher` = the
                             teacher's embedding of side a, read from the teacher
                             cache, never encoded here (vmsst/teacher_cache);
                             vmsst_distill_ntrex_multi30k samples them at equal rates
  entity_tasks (entities.py) vmsst_wiki_entities: sentences of a Wikipedia dump with
                             their linked entity (tasks/wiki_entities.py output), the
                             sentence on both sides, plus `entities`; train/validation
  triplet_tasks              vmsst_triplets: English (anchor, positive, negative)
    (triplets.py)            triplets (tasks/sources/triplet_sets.py; STSb-built or TSV) as
                             a = anchor, b = positive, plus `tokens_negative`
  hard_negative_tasks        vmsst_hard_negatives: training pairs with K negatives
    (hard_negatives.py)      mined for them (python -m vmsst.hard_negatives), plus
                             `tokens_negative` [K·L]
  tfds_tasks (tfds.py)       vmsst_tfds.<builder>.<config>: prepared TFDS translation
                             datasets (tasks/sources/tfds_readers.py), train (/validation)

common.py holds what they share (features, the Tatoeba test sentences no task
trains on, the pair task and mixture registration); data_counts.py the
read/kept/skipped report and the empty-input check `train` runs on its
mixture. Examples of every task, after preprocessing (tasks/registry/preprocessors.py):
  tokens_a, tokens_b  int32 [<=L]  SentencePiece ids ending in EOS
  lang_a, lang_b      int32 []     language id (index in vmsst.base.languages.LANGUAGES)
  teacher             float32 [T]  (vmsst_distill_* only) teacher embedding of side a
  tokens_negative     int32 [L]    (vmsst_triplets only) the triplet's negative, padded
  entities            int32 [1+H]  (vmsst_wiki_entities only) entity-table rows: the
                                   linked entity, then H hard negatives (-1: none)

families.py holds `register_families` (what run files bind) and
`register_tasks` (every family whose argument is given, in one Python call:
what seqio's cache job registers, tasks/cache_registration.py).
"""

from vmsst_tasks.registry.families import Family, register_families, register_tasks

__all__ = ["Family", "register_families", "register_tasks"]
