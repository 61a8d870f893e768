r"""Contrastive with and without mined hard negatives on CPU: same pairs, stream, steps and seed.

  .venv/bin/python bench/hard_negatives.py --work=/tmp/hard_negatives \
      --output=docs/results/hard_negatives [--steps=300] [--lines=4000] [--negatives=3]

1. vocabulary: `python -m vmsst.vocabulary` (8,000 pieces) into WORK/vocab;
2. corpus: the first --lines lines of Multi30k train (eng, deu, fra, ces; all
   six language pairs), written as OPUS TSV files WORK/corpus/multi30k.<a>-<b>.tsv;
3. baseline: gin/runs/contrastive_cpu.gin trained on those pairs through the
   `vmsst_hard_negatives` task with no negatives mined (K = 0: the task's
   rows, order and shuffle are the same as in 5, only the loss differs);
4. `python -m vmsst.hard_negatives --model_dir=<baseline>` mines K
   negatives per pair (relative margin 0.05) from that corpus;
5. the same run with `Contrastive.hard_negatives = K` on the mined task.
Both runs' held-out retrieval (RetrievalEvaluator of base_cpu.gin: Multi30k
test 2016 and NTREX validation, 500 pairs each, both directions) is written
to OUTPUT/results.json and OUTPUT/README.md with this command. The mined run
also paid for the baseline that mined its negatives, and encodes (2 + K)·B
sentences a step instead of 2B: its wall time is reported next to the other's.
"""

import json
import pathlib
import subprocess
import sys
import time

from absl import app
from absl import flags

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from vmsst import files  # pylint: disable=wrong-import-position
from vmsst import learning_curves  # pylint: disable=wrong-import-position

FLAGS = flags.FLAGS
PYTHON = sys.executable
MULTI30K = {"eng": "en", "deu": "de", "fra": "fr", "ces": "cs"}


def run(*args: str) -> float:
  """Runs `python -m ARGS` from the repository root; its wall time in seconds."""
  start = time.time()
  print("+", " ".join(args), flush=True)
  subprocess.run([PYTHON, "-m", *args], cwd=ROOT, check=True)
  return time.time() - start


def write_corpus(data_dir: pathlib.Path, corpus: pathlib.Path, lines: int) -> int:
  """Multi30k train's first `lines` lines as one TSV per language pair; returns the pairs."""
  from vmsst import text_files  # pylint: disable=import-outside-toplevel
  text = {code: text_files.read_lines(data_dir / "multi30k" / f"train.{short}.gz")[:lines]
          for code, short in MULTI30K.items()}
  codes, total = list(MULTI30K), 0
  files.makedirs(str(corpus))
  for i, a in enumerate(codes):
    for b in codes[i + 1:]:
      rows = [f"{x}\t{y}\n" for x, y in zip(text[a], text[b]) if x.strip() and y.strip()]
      files.write_text(str(corpus / f"multi30k.{a}-{b}.tsv"), "".join(rows))
      total += len(rows)
  return total


def unmined(corpus: pathlib.Path, output: pathlib.Path) -> None:
  """The corpus's pairs in the hard-negatives format with nothing mined (the baseline's task)."""
  from vmsst_tasks import hard_negatives  # pylint: disable=import-outside-toplevel
  from vmsst_tasks import opus_sources  # pylint: disable=import-outside-toplevel
  pairs = list(opus_sources.opus_pairs(opus_sources.discover_opus(str(corpus))))
  rows = [hard_negatives.Row(p.text_a, p.text_b, p.lang_a, p.lang_b, ()) for p in pairs]
  hard_negatives.write(str(output), rows, 1, {"corpus": str(corpus), "mined": None})


def train(model_dir: pathlib.Path, vocab: pathlib.Path, negatives_dir: pathlib.Path,
          steps: int, negatives: int, data_dir: pathlib.Path) -> float:
  return run("vmsst.train", "--gin_file=gin/runs/contrastive_cpu.gin",
             f"--gin.MODEL_DIR='{model_dir}'", f"--gin.VOCAB_PATH='{vocab}'",
             f"--gin.DATA_DIR='{data_dir}'", f"--gin.TRAIN_STEPS={steps}",
             "--gin.register_families.families=[@hard_negative_tasks]",
             f"--gin.hard_negative_tasks.negatives_dir='{negatives_dir}'",
             "--gin.train.mixture_name='vmsst_hard_negatives'",
             f"--gin.Contrastive.hard_negatives={negatives}")


def main(argv) -> None:
  del argv
  args = FLAGS
  work, data_dir = pathlib.Path(args.work).resolve(), pathlib.Path(args.data_dir).resolve()
  vocab = work / "vocab" / "spm.model"
  if not vocab.exists():
    run("vmsst.vocabulary", f"--data_dir={data_dir}", f"--output={work / 'vocab' / 'spm'}",
        "--vocab_size=8000")
  run_dir = work / f"lines{args.lines}_steps{args.steps}"
  corpus, negatives_dir = run_dir / "corpus", run_dir / f"negatives_k{args.negatives}"
  pairs = write_corpus(data_dir, corpus, args.lines)
  unmined(corpus, run_dir / "unmined")
  seconds = {}
  baseline, mined = run_dir / "baseline", run_dir / f"mined_k{args.negatives}"
  seconds["baseline"] = train(baseline, vocab, run_dir / "unmined", args.steps, 0, data_dir)
  seconds["mining"] = run("vmsst.hard_negatives", f"--model_dir={baseline}",
                          f"--opus_dir={corpus}", f"--output={negatives_dir}",
                          f"--negatives={args.negatives}")
  seconds["hard_negatives"] = train(mined, vocab, negatives_dir, args.steps, args.negatives,
                                    data_dir)
  results = {"steps": args.steps, "pairs": pairs, "negatives": args.negatives,
             "seconds": {k: round(v) for k, v in seconds.items()},
             "mining": json.loads((negatives_dir / "mining.json").read_text())["mined"],
             "retrieval": {name: learning_curves.final_values(learning_curves.read_curves(d))
                           for name, d in (("baseline", baseline), ("hard_negatives", mined))}}
  output = pathlib.Path(args.output)
  output.mkdir(parents=True, exist_ok=True)
  (output / "results.json").write_text(json.dumps(results, indent=1) + "\n")
  print(json.dumps(results, indent=1))


if __name__ == "__main__":
  flags.DEFINE_string("work", None, "Scratch directory (vocabulary, corpus, runs).", required=True)
  flags.DEFINE_string("output", str(ROOT / "docs/results/hard_negatives"),
                      "Where results.json goes.")
  flags.DEFINE_string("data_dir", str(ROOT.parent / "shared/data"), "The shared corpora.")
  flags.DEFINE_integer("steps", 300, "Training steps of each run.")
  flags.DEFINE_integer("lines", 4000, "Multi30k train lines per language.")
  flags.DEFINE_integer("negatives", 3, "K, mined negatives per pair.")
  app.run(main)
