"""Entity-contrastive learning (EASE, Nishikawa et al., 2022) over μ_sem.

  loss = self-contrast (at τ) + λ · entity-contrast (at τ_e)

λ (`entity_weight`) and τ_e (`entity_temperature`) are the entity term's own:
EASE tunes them apart from SimCSE's τ = 0.05 (its App. A; the values are in the
authors' code, gin/models/entity_contrastive.gin cites them).

Self-contrast (SimCSE): each sentence is encoded twice with dropout on (the
two halves of one [2B] forward pass draw different masks), and the two views
are paired by symmetric InfoNCE at τ; copies of one sentence in the batch are
not negatives (vmsst.model.losses' duplicate masking).

Entity contrast: sentence i links entity e_i (row of an entity table E,
projected by a learned W into the sentence space). Its logits are

  [ cos(s_i, W e_j)/τ_e  for the B in-batch entities j
  | cos(s_i, W h_jk)/τ_e + w·[j = i]  for the B·H hard negatives h_jk (k = 1..H) ]

and the target is column i. The hard negatives form their own block of
columns, every sentence scoring every hard negative of the batch as in
SimCSE's hard-negative setup; w (`hard_negative_weight`, default 0) is added
to the logits of sentence i's own hard negatives, as the authors' code does
(SimCSE's "hard negative weight", a log-weight). Masked out
(logit −1e9): in-batch columns j ≠ i with e_j = e_i or with the same sentence
(another link of sentence i is not a negative of it), hard negatives equal to
e_i, and padding ids (−1). Rows whose entity is −1 are left out of the mean.

The batch carries `entities` int32 [B, 1 + H] (column 0 the linked entity,
then H hard negatives; tasks/wiki_entities.py). Under jit with NamedShardings
the batch is one global array, so the in-batch entities are those of every
device, in the same row order as the sentences.
"""

import collections
import functools
import json
from typing import Callable, Mapping

from absl import logging
import flax.linen as nn
from vmsst.base import files
from vmsst.base.gin_utils import gin
import jax
import jax.numpy as jnp
import numpy as np

from vmsst.base import cli
from vmsst.base import entity_files
from vmsst.model import losses
from vmsst.model import models
from vmsst.model import tokens as tokens_lib
from vmsst.objectives import nested as nested_lib

ENTITIES = "entities"
MASKED = -1e9
# Table rows are padded to a multiple of this (never-linked rows), so any
# model axis dividing it splits the "vocab" axis evenly (jit's NamedShardings
# need divisible shapes; t5x pads its vocabulary alike).
ROW_MULTIPLE = 128


class EntityTable(nn.Module):
  """ids int32 [...] -> W·E[ids] float32 [..., d]; id −1 (padding) gives W·E[0], masked later.

  E [N', entity_dim] has the token table's logical axes ("vocab", "embed"), so
  it shards over the model axis like the vocabulary (N' = N rounded up to
  ROW_MULTIPLE); W [entity_dim, d] is the learned projection (no bias) EASE
  puts between entity and sentence.
  """

  num_entities: int
  entity_dim: int
  emb_dim: int
  # Random table -> initial table (EASE's pretrained entity vectors where known).
  initial_rows: Callable[[jax.Array], jax.Array] | None = None

  def _initial_table(self, key, shape, dtype):
    table = nn.initializers.normal(1.0)(key, shape, dtype)
    return table if self.initial_rows is None else self.initial_rows(table)

  @nn.compact
  def __call__(self, ids: jax.Array) -> jax.Array:
    table = self.param("embedding", nn.with_logical_partitioning(
        self._initial_table, ("vocab", "embed")),
                       (-(-self.num_entities // ROW_MULTIPLE) * ROW_MULTIPLE, self.entity_dim),
                       jnp.float32)
    projection = self.param("projection", nn.with_logical_partitioning(
        nn.initializers.lecun_normal(), ("embed", None)), (self.entity_dim, self.emb_dim),
                            jnp.float32)
    return jnp.take(table, jnp.maximum(ids, 0), axis=0) @ projection


def entity_contrast(sentences: jax.Array, entity_vectors: jax.Array, ids: jax.Array,
                    same_sentence: jax.Array, temperature: float,
                    hard_negative_weight: float = 0.0) -> tuple[jax.Array, jax.Array]:
  """Cross-entropy of each sentence against its entity, in-batch and hard negatives.

  Args:
    sentences: s, float [B, d].
    entity_vectors: W·E[ids], float [B, 1 + H, d] (column 0 the positives).
    ids: int32 [B, 1 + H], −1 for padding.
    same_sentence: bool [B, B], rows i and j hold the same sentence.
    temperature: τ_e.
    hard_negative_weight: w added to the logits of row i's own H hard negatives.
  Returns:
    (loss: mean over rows with an entity, float32 []; accuracy: argmax = i, float32 []).
  """
  s = losses.l2_normalize(sentences.astype(jnp.float32))
  e = losses.l2_normalize(entity_vectors.astype(jnp.float32))
  batch, slots = ids.shape
  positive = ids[:, 0]
  eye = jnp.eye(batch, dtype=bool)
  in_batch = (s @ e[:, 0].T) / temperature
  clash = (positive[:, None] == positive[None, :]) | same_sentence | (positive[None, :] < 0)
  in_batch = jnp.where(clash & ~eye, MASKED, in_batch)
  hard_ids = ids[:, 1:].reshape(-1)  # [B·H], row-major: (j, k) -> j·H + k
  hard = (s @ e[:, 1:].reshape(-1, e.shape[-1]).T) / temperature
  owner = jnp.arange(hard_ids.shape[0]) // max(slots - 1, 1)  # the row whose negative it is
  hard = hard + hard_negative_weight * (owner[None, :] == jnp.arange(batch)[:, None])
  hard = jnp.where((hard_ids[None, :] < 0) | (hard_ids[None, :] == positive[:, None]), MASKED,
                   hard)
  logits = jnp.concatenate([in_batch, hard], axis=-1) if slots > 1 else in_batch
  valid = (positive >= 0).astype(jnp.float32)
  nll = -losses.diagonal(jax.nn.log_softmax(logits, axis=-1)[:, :batch])
  hits = (jnp.argmax(logits, axis=-1) == jnp.arange(batch)).astype(jnp.float32)
  rows = jnp.sum(valid).clip(1.0)
  return jnp.sum(nll * valid) / rows, jnp.sum(hits * valid) / rows


def entity_dir_meta(entity_dir: str) -> tuple[int, int]:
  """(N entities, H hard negatives) from the pipeline's OUTPUT/meta.json."""
  path = files.as_path(entity_dir) / "meta.json"
  if not path.exists():
    raise FileNotFoundError(f"{path} not found: run python -m vmsst_tasks.wiki_entities "
                            f"--dump=... --output={entity_dir} first.")
  meta = json.loads(path.read_text())
  if not meta["num_entities"]:  # an empty table fails deep in JAX (jnp.take of an empty axis)
    raise cli.UserError(
        f"{entity_dir} holds no entity and no example (its meta.json counts: "
        f"{meta.get('counts')}); run python -m vmsst_tasks.wiki_entities again with a lower "
        "--min_links, or fix ENTITY_DIR.")
  return int(meta["num_entities"]), int(meta["num_hard_negatives"])


WIKIPEDIA2VEC_ENTITY = "ENTITY/"  # prefix of entity lines in Wikipedia2Vec's text export


def load_entity_vectors(path: str, keys: list[str], dim: int, *,
                        title_to_key: Mapping[str, str] | None = None
                        ) -> tuple[np.ndarray, np.ndarray, dict[str, int]]:
  """Pretrained entity vectors for rows `keys`: (float32 [N, dim], found bool [N], counts).

  `.npy`: an [N, dim] array aligned with entities.tsv (row i = key i).

  Otherwise Wikipedia2Vec's text export (`wikipedia2vec save_text`, word2vec
  format): a "count dim" header, word lines "word v_1 ... v_dim" and entity
  lines "ENTITY/Title_with_underscores v_1 ... v_dim". Only entity lines are
  read: a word never fills an entity row (the word "1984" is not the entity
  "ENTITY/1984"). Titles are normalised as entity_files normalises link
  targets, so they meet the vocabulary's keys in the same space. A vocabulary
  keyed by interlanguage ids (`--interlanguage`) needs `title_to_key`, the
  vectors' language's title -> id table; a title without an id is counted.
  The first line of a key wins; keys absent from the file are not found.

  Returns:
    counts: rows_matched, rows_unmatched (keep the random init), entity_lines,
    entity_lines_unused (not in the vocabulary, or no id), entity_lines_duplicate,
    word_lines_skipped.
  """
  if not files.exists(path):
    raise FileNotFoundError(f"{path} not found (EntityContrastive.entity_vectors): a "
                            "Wikipedia2Vec text export (`wikipedia2vec save_text`) or an .npy "
                            "aligned with entities.tsv; unset it to start from random vectors.")
  if path.endswith(".npy"):
    matrix = files.load_npy(path).astype(np.float32)
    if matrix.shape != (len(keys), dim):
      raise ValueError(f"{path}: shape {matrix.shape}, expected {(len(keys), dim)} (one row per "
                       "line of entities.tsv, width EntityContrastive.entity_dim).")
    return matrix, np.ones(len(keys), bool), {"rows_matched": len(keys), "rows_unmatched": 0}
  rows = {k: i for i, k in enumerate(keys)}
  matrix, found = np.zeros((len(keys), dim), np.float32), np.zeros(len(keys), bool)
  counts = collections.Counter(entity_lines=0, entity_lines_unused=0, entity_lines_duplicate=0,
                               word_lines_skipped=0)
  with files.open(path) as f:
    for number, line in enumerate(f, 1):
      fields = line.rstrip().rsplit(" ", dim)
      if number == 1 and len(line.split()) == 2 and all(x.isdigit() for x in line.split()):
        continue  # the "count dim" header
      if len(fields) != dim + 1:
        raise ValueError(f"{path}:{number}: {len(fields) - 1} values, expected {dim} "
                         "(EntityContrastive.entity_dim); fix the file or the binding.")
      if not fields[0].startswith(WIKIPEDIA2VEC_ENTITY):
        counts["word_lines_skipped"] += 1
        continue
      counts["entity_lines"] += 1
      key = entity_files.normalize_title(fields[0].removeprefix(WIKIPEDIA2VEC_ENTITY))
      if title_to_key is not None:
        key = title_to_key.get(key)
      row = rows.get(key)
      if row is None:
        counts["entity_lines_unused"] += 1
      elif found[row]:
        counts["entity_lines_duplicate"] += 1
      else:
        matrix[row], found[row] = np.asarray(fields[1:], np.float32), True
  counts.update(rows_matched=int(found.sum()), rows_unmatched=int(len(keys) - found.sum()))
  return matrix, found, dict(counts)


def entity_vector_keys(entity_dir: str, title_ids: str | None) -> Mapping[str, str] | None:
  """The title -> key table load_entity_vectors needs for `entity_dir`'s vocabulary.

  Title-keyed vocabularies need none (None); one keyed by interlanguage ids
  needs `title_ids`, and naming it for a title-keyed one is a mistake too.
  """
  by_id = entity_files.load_meta(entity_dir).get("entity_keys") == entity_files.KEYS_ID
  if by_id and not title_ids:
    raise ValueError(
        f"{entity_dir} keys its entities by interlanguage id (tasks.wiki_entities "
        "--interlanguage), so Wikipedia2Vec's titles match none of them: set "
        "EntityContrastive.entity_vector_ids to the vectors' language's `title<TAB>id` table "
        "(for an English Wikipedia2Vec file, the English --interlanguage table).")
  if title_ids and not by_id:
    raise ValueError(f"EntityContrastive.entity_vector_ids is set but {entity_dir} keys its "
                     "entities by title (no --interlanguage): unset it.")
  return entity_files.read_table(title_ids, "id") if by_id else None


@gin.configurable
class EntityContrastive(models.EmbeddingModel):
  """Sentence encoder trained by dropout self-contrast plus entity contrast (EASE)."""

  init_paths = staticmethod(models.init_semantic_path)

  def __init__(self, network_config, *, entity_dir: str | None = None, num_entities: int = 0,
               num_hard_negatives: int = 0, entity_dim: int | None = None,
               temperature: float = 0.05, entity_temperature: float = 0.05,
               entity_weight: float = 1.0, hard_negative_weight: float = 0.0,
               entity_vectors: str | None = None, entity_vector_ids: str | None = None,
               nested: nested_lib.NestedDims | None = None):
    """Args:
      network_config: the shared network; its dropout_rate must be > 0 (the
        two views differ only by dropout; EASE/SimCSE use 0.1).
      entity_dir: tasks.wiki_entities output; sets num_entities and
        num_hard_negatives from its meta.json (and keys for entity_vectors).
      num_entities, num_hard_negatives: N and H without an entity_dir.
      entity_dim: width of E (default d); must match entity_vectors.
      temperature: τ of the self-contrast term (SimCSE's 0.05).
      entity_temperature: τ_e of the entity term (EASE tunes it apart from τ).
      entity_weight: λ, the entity term's weight.
      hard_negative_weight: w added to the logits of a sentence's own hard
        negatives (0: plain extra negatives).
      entity_vectors: optional initial E (see load_entity_vectors), e.g. a
        Wikipedia2Vec text export, EASE's default (§3.3).
      entity_vector_ids: the vectors' language's `title<TAB>id` table, needed
        when entity_dir is keyed by interlanguage ids (entity_vector_keys).
      nested: Matryoshka sizes (objectives/nested.py): both terms on each
        k-prefix of the sentence and projected entity vectors (cosine
        renormalises them), weighted; None: the full vectors only.
    """
    super().__init__(network_config)
    if network_config.dropout_rate <= 0:
      raise ValueError("EntityContrastive needs NetworkConfig.dropout_rate > 0: its two "
                       "sentence views differ only by dropout (gin: 0.1).")
    self.entity_dir, self.entity_vectors = entity_dir, entity_vectors
    self.entity_vector_ids = entity_vector_ids
    self.temperature, self.entity_temperature = temperature, entity_temperature
    self.entity_weight, self.hard_negative_weight = entity_weight, hard_negative_weight
    self._sizes = None if entity_dir else (num_entities, num_hard_negatives)
    self._entity_dim = entity_dim or network_config.emb_dim
    self.nested = nested_lib.checked(nested, network_config.emb_dim, "EntityContrastive")

  @functools.cached_property
  def table(self) -> EntityTable:
    """Built on first use, so a gin file naming an entity_dir that the pipeline
    has not written yet still parses (the error then names the command)."""
    num_entities = (self._sizes or entity_dir_meta(self.entity_dir))[0]
    return EntityTable(num_entities, self._entity_dim, self.network_config.emb_dim,
                       initial_rows=self._pretrained_rows if self.entity_vectors else None)

  @property
  def num_hard_negatives(self) -> int:
    return (self._sizes or entity_dir_meta(self.entity_dir))[1]

  def extra_features(self, batch_size, length):
    """`entities` int32 [B, 1 + H]: the linked entity, then H hard negatives, −1 padding."""
    del length
    return {"entities": jax.ShapeDtypeStruct((batch_size, 1 + self.num_hard_negatives),
                                             jnp.int32)}

  def extra_modules(self):
    """The entity table E and its projection W, under `entities`."""
    return {ENTITIES: (self.table, (jnp.zeros((1,), jnp.int32),))}

  def _pretrained_rows(self, initial: jax.Array) -> jax.Array:
    """The random table `initial` with the rows entity_vectors has; the match is logged."""
    if not self.entity_dir:
      raise ValueError("EntityContrastive.entity_vectors needs entity_dir (its entities.tsv "
                       "names the table's rows).")
    matrix, found, counts = load_entity_vectors(
        self.entity_vectors, entity_files.load_entity_keys(self.entity_dir),
        self.table.entity_dim,
        title_to_key=entity_vector_keys(self.entity_dir, self.entity_vector_ids))
    logging.info("entity table from %s: %d rows matched, %d unmatched (keep their random init); "
                 "%s", self.entity_vectors, counts["rows_matched"], counts["rows_unmatched"],
                 counts)
    if not found.any():
      logging.warning("entity table: no row of %s/entities.tsv is in %s; check that both name "
                      "entities the same way.", self.entity_dir, self.entity_vectors)
    rows = len(found)
    return initial.at[:rows].set(jnp.where(found[:, None], matrix, initial[:rows]))

  def entity_vectors_of(self, params, ids: jax.Array) -> jax.Array:
    """W·E[ids], float32 [..., d]."""
    return self.table.apply({"params": params[ENTITIES]}, ids)

  def loss_fn(self, params, batch, dropout_rng, step=0):
    if ENTITIES not in batch:
      raise KeyError("EntityContrastive needs batch['entities']: train on a vmsst_wiki_entities "
                     "task (gin/runs/entity_contrastive_cpu.gin).")
    tokens = jnp.concatenate([batch["tokens_a"], batch["tokens_a"]], axis=0)
    mask = jnp.concatenate([batch["mask_a"], batch["mask_a"]], axis=0)
    view_1, view_2 = models.split_halves(self.semantic(params, tokens, mask, dropout_rng)[0])
    same = losses.same_sequence_matrix(batch["tokens_a"])
    loss, metrics = nested_lib.nested_loss(self.nested, view_1.shape[-1], lambda k: self.terms(
        params, nested_lib.prefix(view_1, k), nested_lib.prefix(view_2, k), batch[ENTITIES],
        same, k))
    return loss, metrics | {"loss": loss}

  def terms(self, params, view_1, view_2, ids, same, k: int):
    """(self-contrast + λ · entity contrast, metrics) of the two views [B, k] and the
    k-prefix of the entities' vectors (k a nested width, or the full d)."""
    self_loss, self_accuracy = losses.symmetric_info_nce(view_1, view_2, self.temperature,
                                                         same, same)
    entity_vectors = nested_lib.prefix(self.entity_vectors_of(params, ids), k)
    entity_loss, entity_accuracy = entity_contrast(
        view_1, entity_vectors, ids, same, self.entity_temperature, self.hard_negative_weight)
    loss = self_loss + self.entity_weight * entity_loss
    return loss, {"loss": loss, "self_contrast_loss": self_loss,
                  "self_contrast_accuracy": self_accuracy, "entity_loss": entity_loss,
                  "entity_accuracy": entity_accuracy}


def entity_retrieval(model: EntityContrastive, params, texts: list[str], entities: np.ndarray, *,
                     vocabulary, sequence_length: int, batch_size: int = 32) -> dict[str, float]:
  """Held-out sentence -> entity retrieval over the whole entity table, ×100.

  Each sentence's N cosines to W·E (the N real rows) are ranked; its linked
  entity must come first (accuracy) or early (mean reciprocal rank).

  Args:
    texts: held-out sentences; entities: int32 [n], the row each links.
  Returns:
    {"accuracy", "mrr", "chance" (100 / N), "sentences"}.
  """
  encode = jax.jit(lambda tokens, mask: model.encode(params, tokens, mask))
  sentences = tokens_lib.embed_sentences(encode, vocabulary, list(texts), sequence_length,
                                         batch_size)
  table = np.asarray(model.entity_vectors_of(params, jnp.arange(model.table.num_entities)))
  sim = (np.asarray(losses.l2_normalize(jnp.asarray(sentences)))
         @ np.asarray(losses.l2_normalize(jnp.asarray(table))).T)
  gold = sim[np.arange(len(texts)), entities]
  rank = 1 + np.sum(sim > gold[:, None], axis=-1)
  return {"accuracy": 100.0 * float(np.mean(rank == 1)), "mrr": 100.0 * float(np.mean(1 / rank)),
          "chance": 100.0 / model.table.num_entities, "sentences": float(len(texts))}
