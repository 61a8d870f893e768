r"""Tokenizes a run's data ahead: train without TensorFlow.

  python -m vmsst.pretokenize --gin_file=gin/runs/vmsst_cpu.gin --output=DIR \
      [--examples=N] [--gin.X=Y ...]
  python -m vmsst.train --gin_file=gin/runs/vmsst_cpu.gin --gin.train.pretokenized="'DIR'"

Run where seqio and TensorFlow are installed. It parses the run file as
`python -m vmsst.train` does, registers its tasks (teacher stage first) and
writes the first N examples (default: the run's train_steps × batch_size) of
the very stream `train` would read through seqio for the run's seed, as the
shards that vmsst_tasks.pipeline.pretokenized reads with numpy alone (its docstring
has the format and why). The writer lives here, beside the loop, because it
needs the loop's gin names; the data layer keeps only the reader.
"""

import json
from typing import Any

import numpy as np

from vmsst.base import cli
from vmsst.base import console
from vmsst.base import files
from vmsst.base import run_directory
from vmsst_tasks.pipeline import pretokenized


def write_stream(mixture_name: str, output: str, *, examples: int, sequence_length: int,
                 seed: int, shard_examples: int = pretokenized.SHARD_EXAMPLES) -> dict[str, Any]:
  """Writes the first `examples` examples of the mixture's training stream into `output`.

  The stream is the one `train` reads through seqio for `seed`
  (input_pipeline.train_iterator with one host, host_data="slice"); the
  mixture must be registered. Returns stream.json's content.
  """
  import seqio  # pylint: disable=import-outside-toplevel
  from vmsst_tasks.pipeline import input_pipeline  # pylint: disable=import-outside-toplevel
  from vmsst_tasks.registry import data_counts  # pylint: disable=import-outside-toplevel
  chunk = min(examples, 4096)
  batches = input_pipeline.train_iterator(
      mixture_name, batch_size=chunk, sequence_length=sequence_length, seed=seed, start_step=0,
      host_data="slice", process_index=0, process_count=1)
  files.makedirs(output)
  pending, written, shard = [], 0, 0
  while written < examples:
    pending.append(next(batches))
    held = sum(len(p["tokens_a"]) for p in pending)
    if held >= shard_examples or written + held >= examples:
      merged = {k: np.concatenate([p[k] for p in pending]) for k in pending[0]}
      take = min(shard_examples, examples - written)
      pretokenized.write_shard(output, shard, {k: v[:take] for k, v in merged.items()})
      pending = [{k: v[take:] for k, v in merged.items()}] if held > take else []
      written, shard = written + take, shard + 1
  vocabulary = seqio.get_mixture_or_task(mixture_name).output_features["tokens_a"].vocabulary
  files.copy(vocabulary.sentencepiece_model_file, run_directory.of(output).vocabulary)
  data_counts.report_data_counts(mixture_name, output=run_directory.of(output).data_counts)
  sample = next(batches)
  meta = {"mixture": mixture_name, "sequence_length": sequence_length, "seed": seed,
          "examples": examples, "shard_examples": shard_examples, "shards": shard,
          "vocab_size": int(vocabulary.vocab_size),
          "features": {k: [str(v.dtype), list(v.shape[1:])] for k, v in sample.items()}}
  files.write_text(files.join(output, pretokenized.STREAM_FILE), json.dumps(meta, indent=1) + "\n")
  return meta


def write_run_stream(gin_files, bindings, search_paths, *, output: str,
                     examples: int | None = None) -> dict[str, Any]:
  """The command: parses the run, registers its tasks (teacher stage first), writes its stream.

  `examples` defaults to the run's whole stream, train_steps × batch_size.
  """
  from vmsst.training import configurables  # pylint: disable=import-outside-toplevel
  from vmsst.base.gin_utils import gin  # pylint: disable=import-outside-toplevel
  from vmsst.teachers import cache as teacher_cache  # pylint: disable=import-outside-toplevel
  from vmsst.evaluation import in_training  # pylint: disable=import-outside-toplevel
  from vmsst.training import preflight  # pylint: disable=import-outside-toplevel
  configurables.parse_gin(gin_files, bindings, search_paths)
  preflight.check_paths()

  def bound(name):
    value = gin.query_parameter(f"train.{name}")
    if isinstance(value, gin.config.ConfigurableReference):
      return value.scoped_configurable_fn() if value.evaluate else value.scoped_configurable_fn
    return value

  evaluator = None
  try:
    evaluator = bound("evaluator")
  except ValueError:
    pass
  teacher_cache.fill_stage(bound("register_tasks"), in_training.as_list(evaluator))
  try:
    seed = bound("seed")
  except ValueError:
    seed = 0
  total = examples or bound("train_steps") * bound("batch_size")
  if total <= 0:
    raise cli.UserError(f"--examples={total}: write at least one example.")
  return write_stream(bound("mixture_name"), output, examples=total,
                      sequence_length=bound("sequence_length"), seed=seed)


def main(argv) -> None:
  del argv
  from absl import flags  # pylint: disable=import-outside-toplevel
  options = flags.FLAGS
  meta = write_run_stream(options.gin_file, options.gin_bindings, options.gin_search_path,
                          output=options.output, examples=options.examples)
  mib = sum(files.size(files.join(options.output, n))
            for n in files.listdir(options.output)) / 2**20
  print(f"wrote {meta['examples']} examples of {meta['mixture']} (seed {meta['seed']}, length "
        f"{meta['sequence_length']}) in {meta['shards']} shards to {options.output} "
        f"({mib:.1f} MiB); train with --gin.train.pretokenized=\"'{options.output}'\"")


if __name__ == "__main__":
  console.quiet_startup()  # before TensorFlow and JAX load
  from absl import flags as _flags  # pylint: disable=g-import-not-at-top
  from vmsst.base import gin_utils as _gin_utils  # pylint: disable=g-import-not-at-top
  _gin_utils.define_flags()
  _flags.DEFINE_string("output", None, "Directory to write the stream into.", required=True)
  _flags.DEFINE_integer("examples", None, "Examples to write (default: the run's "
                        "train_steps × batch_size).")
  cli.show_in_help(names=(*_gin_utils.FLAG_NAMES, "output", "examples"))
  import sys  # pylint: disable=g-import-not-at-top
  cli.run(main, argv=_gin_utils.rewrite_gin_args(sys.argv))
