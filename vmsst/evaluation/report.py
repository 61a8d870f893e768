"""results.json -> report.md and plots, for one encoder or a comparison.

The Score table follows the layout of the VMSST paper's Table 1 (the paper's
Score, §6.2, then its six components and, apart, the question-retrieval
stand-in; `paper_score.py`); each suite then contributes its own table.
"""

import pathlib
from typing import Mapping

import numpy as np

from vmsst.evaluation import plots
from vmsst.evaluation import paper_score as score_lib
from vmsst.evaluation import suites as suites_lib


def _cell(value: float | None) -> str:
  return "–" if value is None else f"{value:.1f}"


def score_table(rows: Mapping[str, dict]) -> str:
  """Markdown Table 1 (the paper's Score, §6.2): one row per encoder (name -> results.json dict)."""
  lines = ["| model | " + " | ".join(score_lib.HEADER) + " |",
           "|---|" + "---:|" * len(score_lib.HEADER)]
  summaries = [score_lib.paper_score(results) for results in rows.values()]
  for name, summary in zip(rows, summaries):
    cells = [_cell(v) for v in score_lib.row(summary)]
    lines.append(f"| {name} | **{cells[0]}** | " + " | ".join(cells[1:]) + " |")
  notes = score_lib.notes_markdown(summaries)
  return "\n".join(lines) + ("\n\n" + notes if notes else "")


def score_plot(rows: Mapping[str, dict], path: pathlib.Path) -> None:
  """Grouped bars: each encoder's Score and components (PNG)."""
  labels = score_lib.HEADER
  width = 0.8 / max(1, len(rows))
  fig = plots.figure((1.3 * len(labels) + 1, 3.4))
  ax = fig.add_subplot()
  for i, (name, results) in enumerate(rows.items()):
    values = score_lib.row(score_lib.paper_score(results))
    ax.bar(np.arange(len(labels)) + i * width, [v or 0.0 for v in values], width, label=name)
  ax.set_xticks(np.arange(len(labels)) + width * (len(rows) - 1) / 2, labels)
  ax.set_ylabel("×100")
  ax.legend(fontsize=8)
  plots.save(fig, path)


def truncation_note(meta: dict) -> str:
  """One line: each suite's sentences cut to the model's length, or "" (the encoder cannot say).

  E.g. "Sentences cut to 32 pieces, EOS included (--max_seq_length): tatoeba
  12 of 400, stsb 0 of 2,000 distinct sentences per suite."
  """
  counts = meta.get("truncated") or {}
  if not counts:
    return ""
  lengths = sorted({c["max_seq_length"] for c in counts.values()})
  parts = [f"{name} {c['truncated']:,} of {c['sentences']:,}" for name, c in counts.items()]
  return (f"Sentences cut to {'/'.join(map(str, lengths))} pieces, EOS included "
          f"(--max_seq_length): {', '.join(parts)} distinct sentences per suite.")


def render(results: dict, plot_files: Mapping[str, str]) -> str:
  """report.md for one encoder: Score, then one section per suite run."""
  meta = results["_meta"]
  sections = [f"# Evaluation of `{meta['encoder']}`", "",
              f"Data: {', '.join(meta['data_dirs'])}. Suites run: {', '.join(meta['suites'])}."]
  if meta.get("skipped"):
    sections.append("Skipped (no data): " + "; ".join(
        f"{name} ({why})" for name, why in meta["skipped"].items()) + ".")
  note = truncation_note(meta)
  if note:
    sections.append(note)
  five = score_lib.five_family_score(results)["score"]
  sections += ["", "## Score (Table 1 layout)", "", score_table({meta["encoder"]: results}), "",
               f"Five-family score (Spearman STS, with Q. retrieval; this codebase's earlier "
               f"summary, not the paper's): {_cell(five)}."]
  for name in meta["suites"]:
    suite = suites_lib.SUITES[name]
    sections += ["", f"## {suite.title}", "", suite.table(results[name])]
    if name in plot_files:
      sections += ["", f"![{name}]({plot_files[name]})"]
  return "\n".join(sections) + "\n"
