r"""Contrastive with and without mined hard negatives on CPU: same pairs, stream, steps and seed.

  .venv/bin/python bench/hard_negatives.py --work=/tmp/hard_negatives \
      --output=docs/results/hard_negatives [--steps=500] [--lines=4000] [--negatives=3] \
      [--seeds=0,1]
  .venv/bin/python bench/hard_negatives.py --render   # README.md again from results.json

1. vocabulary: `python -m vmsst.vocabulary` (8,000 pieces) into WORK/vocab;
2. corpus: the first --lines lines of Multi30k train (eng, deu, fra, ces; all
   six language pairs), written as OPUS TSV files WORK/corpus/multi30k.<a>-<b>.tsv;
3. baseline: gin/runs/contrastive_cpu.gin trained on those pairs through the
   `vmsst_hard_negatives` task with no negatives mined (K = 0: the same
   rows and seed as in 5; only the loss differs);
4. `python -m vmsst.hard_negatives --model_dir=<baseline>` mines K
   negatives per pair from that corpus (--margin, default none here: at
   this size the positive is rarely among an anchor's nearest, so a margin
   below it drops nearly every near candidate; the page gives the counts);
5. the same run with `Contrastive.hard_negatives = K` on the mined task.
Per seed (--seeds; each mines with its own baseline), both runs' held-out
retrieval (RetrievalEvaluator of base_cpu.gin: Multi30k test 2016 and NTREX
validation, at most 500 pairs each, both directions) is written to
OUTPUT/results.json and OUTPUT/README.md with this command. The mined run
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
from vmsst.evaluation import logged_curves  # pylint: disable=wrong-import-position

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
          steps: int, negatives: int, data_dir: pathlib.Path, seed: int) -> float:
  return run("vmsst.train", "--gin_file=gin/runs/contrastive_cpu.gin",
             f"--gin.MODEL_DIR='{model_dir}'", f"--gin.VOCAB_PATH='{vocab}'",
             f"--gin.DATA_DIR='{data_dir}'", f"--gin.TRAIN_STEPS={steps}",
             f"--gin.train.seed={seed}",
             "--gin.register_families.families=[@hard_negative_tasks]",
             f"--gin.hard_negative_tasks.negatives_dir='{negatives_dir}'",
             "--gin.train.mixture_name='vmsst_hard_negatives'",
             f"--gin.Contrastive.hard_negatives={negatives}")


def one_seed(run_dir: pathlib.Path, vocab: pathlib.Path, data_dir: pathlib.Path,
             seed: int) -> dict:
  """Baseline, mining with it, the mined run: {"seconds", "mining", "retrieval"}."""
  corpus, seeded = run_dir / "corpus", run_dir / f"seed{seed}"
  negatives_dir = seeded / f"negatives_k{FLAGS.negatives}"
  baseline, mined = seeded / "baseline", seeded / f"mined_k{FLAGS.negatives}"
  seconds = {"baseline": train(baseline, vocab, run_dir / "unmined", FLAGS.steps, 0, data_dir,
                               seed)}
  seconds["mining"] = run("vmsst.hard_negatives", f"--model_dir={baseline}",
                          f"--opus_dir={corpus}", f"--output={negatives_dir}",
                          f"--negatives={FLAGS.negatives}", f"--margin={FLAGS.margin}",
                          f"--margin_value={FLAGS.margin_value}",
                          f"--candidates={FLAGS.candidates}")
  seconds["hard_negatives"] = train(mined, vocab, negatives_dir, FLAGS.steps, FLAGS.negatives,
                                    data_dir, seed)
  return {"seconds": {k: round(v) for k, v in seconds.items()},
          "mining": json.loads((negatives_dir / "mining.json").read_text())["mined"],
          "retrieval": {name: logged_curves.final_values(logged_curves.read_curves(d))
                        for name, d in (("baseline", baseline), ("hard_negatives", mined))}}


COMMAND = (".venv/bin/python bench/hard_negatives.py --work=/tmp/hard_negatives "
           "--output=docs/results/hard_negatives --steps={steps} --lines={lines} "
           "--negatives={negatives} --margin={margin} --margin_value={margin_value} "
           "--candidates={candidates} --seeds={seed_list}")


def render(results: dict) -> str:
  """OUTPUT/README.md: held-out retrieval per set, with and without, per seed and mean."""
  runs = results["runs"]
  seeds = list(runs)
  first = runs[seeds[0]]["retrieval"]["baseline"]
  names = [n for n in first if n not in ("mean", "chance")]
  multi30k = [n for n in names if n.startswith("multi30k")]
  for run_ in runs.values():
    for r in run_["retrieval"].values():
      r["Multi30k mean (the corpus's languages)"] = sum(r[n] for n in multi30k) / len(multi30k)
  rows = names + ["mean", "Multi30k mean (the corpus's languages)"]
  value = lambda seed, which, name: runs[seed]["retrieval"][which][name]
  average = lambda which, name: sum(value(s, which, name) for s in seeds) / len(seeds)
  lines = ["# Contrastive with mined hard negatives against without (CPU)", "",
           "Generated by `bench/hard_negatives.py` (`--render` rewrites it from `results.json`);",
           "do not edit.", "",
           f"`gin/runs/contrastive_cpu.gin` (tiny size, batch 32, length 32), {results['steps']} "
           f"steps each, on the same {results['pairs']:,} training pairs (the first "
           f"{results['lines']:,} lines of Multi30k train, all six pairs of eng/deu/fra/ces) read "
           "through the same `vmsst_hard_negatives` task with the same seed; the only difference "
           f"is `Contrastive.hard_negatives = {results['negatives']}` (each pair's own negatives "
           "in its a→b softmax row). Each seed's negatives were mined by "
           f"`python -m vmsst.hard_negatives` with that seed's baseline run ("
           + ("no margin" if results["margin"] == "none"
              else f"{results['margin']} margin {results['margin_value']}")
           + f", {results['candidates']} candidates). "
           "Held-out retrieval: base_cpu.gin's RetrievalEvaluator "
           "(Multi30k test 2016 and NTREX validation, at most 500 pairs each, accuracy ×100, "
           f"mean of both directions; chance {first['chance']:.2f}). Seeds "
           f"{', '.join(seeds)}; 2 CPU cores shared with other jobs.", "",
           "| held-out set | without | with hard negatives | difference per seed |",
           "|---|---|---|---|"]
  for name in rows:
    per_seed = ", ".join(f"{value(s, 'hard_negatives', name) - value(s, 'baseline', name):+.2f}"
                         for s in seeds)
    lines.append(f"| {name} | {average('baseline', name):.2f} | "
                 f"{average('hard_negatives', name):.2f} | {per_seed} |")
  lines += ["", "Means over the seeds. Per seed:", ""]
  for seed in seeds:
    m, sec = runs[seed]["mining"], runs[seed]["seconds"]
    lines.append(f"- seed {seed}: mining kept {m['negatives']:,} negatives for {m['pairs']:,} "
                 f"pairs ({m['short']:,} with fewer than {results['negatives']}); of "
                 f"{m['candidates']:,} neighbours looked at, {m['translations']:,} were "
                 f"translations and {m['margin']:,} within the margin. Wall time (s): baseline "
                 f"{sec['baseline']}, mining {sec['mining']}, with hard negatives "
                 f"{sec['hard_negatives']}.")
  lines += relative_margin_note(results)
  lines += ["", "A step with hard negatives encodes (2 + K)·B sentences instead of 2B, and the "
            "mined run needs a miner first (here the baseline itself).", "",
            "Regenerate:", "", "```bash",
            COMMAND.format(seed_list=",".join(seeds), **results), "```", ""]
  return "\n".join(lines)


RELATIVE_NOTE = "relative_margin_mining.json"  # an earlier mining's mining.json, kept


def relative_margin_note(results: dict) -> list[str]:
  """Why this page's miner ran without a margin: the kept relative-margin mining's counts."""
  path = pathlib.Path(FLAGS.output) / RELATIVE_NOTE
  if results["margin"] != "none" or not path.exists():
    return []
  kept = json.loads(path.read_text())
  m = kept["mined"]
  return ["", f"Why no margin here: `{RELATIVE_NOTE}` is the same mining with "
          f"`--margin={kept['margin']} --margin_value={kept['margin_value']}` over a "
          f"{kept['steps']}-step baseline (seed 0): of {m['candidates']:,} neighbours it dropped "
          f"{m['margin']:,} as within the margin and kept {m['negatives']:,} negatives for "
          f"{m['pairs']:,} pairs. A model this small rarely ranks the positive above an "
          "anchor's nearest sentences, so a margin below the positive's score leaves almost "
          "nothing among them; the margin is for a miner that already retrieves well."]


def main(argv) -> None:
  del argv
  output = pathlib.Path(FLAGS.output)
  if FLAGS.render:
    (output / "README.md").write_text(render(json.loads((output / "results.json").read_text())))
    return
  work, data_dir = pathlib.Path(FLAGS.work).resolve(), pathlib.Path(FLAGS.data_dir).resolve()
  vocab = work / "vocab" / "spm.model"
  if not vocab.exists():
    run("vmsst.vocabulary", f"--data_dir={data_dir}", f"--output={work / 'vocab' / 'spm'}",
        "--vocab_size=8000")
  run_dir = work / f"lines{FLAGS.lines}_steps{FLAGS.steps}"
  pairs = write_corpus(data_dir, run_dir / "corpus", FLAGS.lines)
  unmined(run_dir / "corpus", run_dir / "unmined")
  results = {"steps": FLAGS.steps, "lines": FLAGS.lines, "pairs": pairs,
             "negatives": FLAGS.negatives, "margin": FLAGS.margin,
             "margin_value": FLAGS.margin_value, "candidates": FLAGS.candidates,
             "runs": {str(seed): one_seed(run_dir, vocab, data_dir, int(seed))
                      for seed in FLAGS.seeds}}
  output.mkdir(parents=True, exist_ok=True)
  (output / "results.json").write_text(json.dumps(results, indent=1) + "\n")
  (output / "README.md").write_text(render(results))


def _define_flags() -> None:
  flags.DEFINE_string("work", None, "Scratch directory (vocabulary, corpus, runs).")
  flags.DEFINE_bool("render", False, "Only rewrite OUTPUT/README.md from OUTPUT/results.json.")
  flags.DEFINE_string("output", str(ROOT / "docs/results/hard_negatives"),
                      "Where results.json goes.")
  flags.DEFINE_string("data_dir", str(ROOT.parent / "shared/data"), "The shared corpora.")
  flags.DEFINE_integer("steps", 500, "Training steps of each run.")
  flags.DEFINE_integer("lines", 4000, "Multi30k train lines per language.")
  flags.DEFINE_integer("negatives", 3, "K, mined negatives per pair.")
  flags.DEFINE_enum("margin", "none", ["relative", "absolute", "none"], "The miner's --margin.")
  flags.DEFINE_float("margin_value", 0.05, "The miner's --margin_value.")
  flags.DEFINE_integer("candidates", 30, "The miner's --candidates.")
  flags.DEFINE_list("seeds", ["0"], "Training seeds; each mines with its own baseline.")


if __name__ == "__main__":
  _define_flags()
  app.run(main)
