"""Read = kept + skipped of every registered task, and the check that none is empty.

`train` calls both on its mixture before the first batch (and writes the
report to MODEL_DIR/data_counts.json), whichever families registered it: they
read the counts each source keeps (tasks/sources/pair_readers.py PairCounts).
"""

import collections
import json
from typing import Mapping

from absl import logging
import seqio

from vmsst_tasks.sources import pair_readers
from vmsst.base import cli
from vmsst.base import files
from vmsst.base import text_files


def _tasks_of(name: str) -> list[seqio.Task]:
  found = seqio.get_mixture_or_task(name)
  return found.tasks if isinstance(found, seqio.Mixture) else [found]


def report_data_counts(name: str, *, output: str | None = None) -> dict:
  """Logs read = kept + skipped of every task of a mixture (or task), and the total.

  One log line per task and split, then one total per split. In-memory
  sources (NTREX, Multi30k) were counted when registered; streamed ones (OPUS)
  count while training reads them and log their own line at the end of each
  pass, so here they are `null` until a pass has ended. Sources without counts
  (e.g. vmsst_wiki_entities) are `null` too.

  Args:
    name: a registered mixture or task.
    output: if given, the report is also written there: a run directory's (or a
      pre-tokenized stream's) data counts file (vmsst.base.run_directory).
  Returns:
    {"mixture": name, "tasks": {task: {split: counts | None}},
     "total": {split: counts}}, counts = PairCounts.as_dict().
  """
  per_task, totals = {}, collections.defaultdict(pair_readers.PairCounts)
  for task in _tasks_of(name):
    counts = getattr(task.source, "counts", None)
    if isinstance(counts, pair_readers.PairCounts):  # Streamed: the last pass, if any.
      counts = {"train": counts if counts.read else None}
    per_task[task.name] = {}
    for split in task.source.splits:
      split_counts = counts.get(split) if isinstance(counts, Mapping) else None
      if not isinstance(split_counts, pair_readers.PairCounts):  # Not a pair_readers.py reader.
        split_counts = None
      per_task[task.name][split] = split_counts and split_counts.as_dict()
      if split_counts is None:
        logging.info("%s[%s]: %s examples, no read/kept/skipped counts (yet: a streamed "
                     "source logs them at the end of each pass)", task.name, split,
                     task.source.num_input_examples(split))
        continue
      logging.info("%s", split_counts.report(f"{task.name}[{split}]"))
      totals[split] += split_counts
  for split, total in sorted(totals.items()):
    logging.info("%s", total.report(f"{name} total[{split}]"))
  report = {"mixture": name, "tasks": per_task,
            "total": {split: total.as_dict() for split, total in sorted(totals.items())}}
  if output is not None:
    files.write_text(output, json.dumps(report, indent=1) + "\n")
  return report


def check_training_data(name: str) -> None:
  """Raises cli.UserError when a task of the mixture (or the task) has no training example.

  One line naming the task, its input, its read/kept/skipped counts and what
  to change; run at registration and again by `train` before the first batch,
  so an empty input never reaches JAX (an empty axis deep in the first step).
  """
  for task in _tasks_of(name):
    counts = getattr(task.source, "counts", None)
    if isinstance(counts, Mapping):
      counts = counts.get("train")
    empty = (task.source.num_input_examples("train") == 0
             or (isinstance(counts, pair_readers.PairCounts) and counts.read and not counts.kept))
    if empty:
      raise cli.UserError(empty_input_message(
          task.name, getattr(task.source, "input_name", "its input"), counts))


def empty_input_message(task: str, input_name: str, counts: "pair_readers.PairCounts | None") -> str:
  """"<task>: no training example in <input> (read=.. kept=0 ...); <fix>"."""
  counted = isinstance(counts, pair_readers.PairCounts) and counts.read
  seen = counts.report("read") if counted else "0 lines"
  if counted and set(counts.skipped) == {"invalid_utf8"}:  # binary, or another encoding
    return (f"{task}: no training example in {input_name} ({seen}): every line pair holds "
            f"bytes that are not UTF-8 (a binary file, or another encoding); "
            f"{text_files.FIX_ENCODING}.")
  return (f"{task}: no training example in {input_name} ({seen}); check the input, or relax "
          "the filter that drops them (register_families.input_policy = @InputPolicy(), "
          "InputPolicy.max_chars; the Tatoeba filter: DATA_DIR).")
