"""`python -m vmsst`: the command index; `python -m vmsst <command> [flags]` runs one.

Each command's `--help` has its flags and an example. `<command>` is a name
of the index with or without its package (`embed`, `vmsst.embed`,
`build_data.bucc`, `vmsst_tasks.triplets`, `triplets`).
"""

import runpy
import sys

from vmsst import cli

# (command, what it does); kept in the order a new user meets them.
COMMANDS = (
    ("vmsst.vocabulary", "train the SentencePiece vocabulary (VOCAB_PATH)"),
    ("vmsst.train", "train a model from a run file (gin/runs/*.gin)"),
    ("vmsst.pretokenize", "a run's tokenized stream: train without TensorFlow"),
    ("vmsst.teacher_cache", "a distillation run's teacher vectors, ahead"),
    ("vmsst.evaluate", "benchmark suites: results.json, report.md, plots"),
    ("vmsst.embed", "embed a file, one sentence a line, into a .npy"),
    ("vmsst.score", "score sentence pairs (a<TAB>b lines) by cosine"),
    ("vmsst.mine", "mine translation pairs from two files (margin)"),
    ("vmsst.calibrate", "a model's int8 calibration for --precision"),
    ("vmsst.hard_negatives", "hard negatives for a corpus's pairs (contrastive)"),
    ("vmsst.mine_beam", "mining as an Apache Beam pipeline (Dataflow)"),
    ("vmsst.export", "SavedModel, sentence-transformers or huggingface"),
    ("vmsst.compare", "train and evaluate objectives: the paper's Table 1"),
    ("vmsst.mt5_import", "an mT5 checkpoint as initial parameters"),
    ("vmsst.compile", "a run compiled for a TPU slice here: HBM, FLOPs"),
    ("vmsst.memory_report", "the same on forced CPU devices (XLA:CPU)"),
    ("vmsst.learning_curves", "held-out retrieval against step and wall-clock"),
    ("vmsst.model_json", "write model.json for an older model directory"),
    ("vmsst.evaluation.preservation", "query-tower tuning: before vs after"),
    ("vmsst.build_data.bucc", "BUCC-format mining tasks from real translations"),
    ("vmsst.build_data.question_retrieval", "a question-retrieval KB (STSb-multi-mt, STS16)"),
    ("vmsst.build_data.clustering", "a MewsC-16-format clustering set from STSb"),
    ("vmsst.build_data.flores", "NTREX-128 held-out documents, FLORES layout"),
    ("vmsst_tasks.opus_download", "download the paper's OPUS corpora (Moses)"),
    ("vmsst_tasks.triplets", "English triplets from STSb (query-tower tuning)"),
    ("vmsst_tasks.wiki_entities", "sentences + linked entities from a MediaWiki dump"),
)


def index() -> str:
  """The command index, one command a line."""
  width = max(len(name) for name, _ in COMMANDS) + len("python -m ")
  lines = ["vmsst: multilingual sentence embeddings. Commands (python -m <command> --help):"]
  lines += [f"  {'python -m ' + name:{width}}  {what}" for name, what in COMMANDS]
  lines.append("From Python: vmsst.Encoder.from_checkpoint(MODEL_DIR).encode(sentences).")
  return "\n".join(lines)


def find(name: str) -> str | None:
  """The command of the index `name` means (its module), or None."""
  for command, _ in COMMANDS:
    if name in (command, command.split(".", 1)[1], command.rsplit(".", 1)[1]):
      return command
  return None


def main(argv: list[str]) -> int:
  """Prints the index, or runs `argv[1]` as `python -m <its module>` with the other arguments."""
  if len(argv) == 1 or argv[1] in ("-h", "--help", "help"):
    print(index())
    return 0
  command = find(argv[1])
  if command is None:
    hint = cli.did_you_mean(argv[1], [c.rsplit(".", 1)[1] for c, _ in COMMANDS])
    print(f"error: no command {argv[1]}; {hint + ' ' if hint else ''}`python -m vmsst` lists "
          "them.", file=sys.stderr)
    return cli.USAGE_EXIT_CODE
  sys.argv = [command, *argv[2:]]
  cli.quiet_startup()  # as the command's own `__main__` would, before it imports TensorFlow
  runpy.run_module(command, run_name="__main__", alter_sys=True)
  return 0


if __name__ == "__main__":
  sys.exit(main(sys.argv))
