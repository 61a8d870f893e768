"""`python -m vmsst`: the command index (each command's `--help` has its flags and an example)."""

import sys

# (command, what it does); kept in the order a new user meets them.
COMMANDS = (
    ("vmsst.vocabulary", "train the SentencePiece vocabulary a run reads (VOCAB_PATH)"),
    ("vmsst.train", "train a model from a gin run file (gin/runs/*.gin) into MODEL_DIR"),
    ("vmsst.teacher_cache", "encode a distillation run's teacher vectors ahead of training"),
    ("vmsst.evaluate", "benchmark suites on a model: results.json, report.md, plots"),
    ("vmsst.embed", "embed a file of sentences, one per line, into a float32 .npy"),
    ("vmsst.score", "score sentence pairs (a<TAB>b lines) by cosine"),
    ("vmsst.mine", "mine translation pairs from two monolingual files (margin)"),
    ("vmsst.export", "export a checkpoint as a SavedModel (text in, embeddings out)"),
    ("vmsst.compare", "train and evaluate several objectives; the paper's Table 1"),
    ("vmsst.mt5_import", "convert an mT5 checkpoint into initial parameters (init_params)"),
    ("vmsst.compile", "compile a run for a TPU slice here: HBM, FLOPs per chip"),
    ("vmsst.memory_report", "the same on forced CPU devices, remat/scan variants"),
    ("vmsst.learning_curves", "plot held-out retrieval against step and wall-clock"),
    ("vmsst.model_json", "write model.json for an older model directory"),
)


def index() -> str:
  """The command index, one command a line."""
  width = max(len(name) for name, _ in COMMANDS) + len("python -m ")
  lines = ["vmsst: multilingual sentence embeddings. Commands (python -m <command> --help):"]
  lines += [f"  {'python -m ' + name:{width}}  {what}" for name, what in COMMANDS]
  lines.append("From Python: vmsst.Encoder.from_checkpoint(MODEL_DIR).encode(sentences).")
  return "\n".join(lines)


if __name__ == "__main__":
  print(index())
  sys.exit(0 if len(sys.argv) == 1 or sys.argv[1] in ("-h", "--help", "help") else 2)
