r"""Builds a FLORES-layout multi-parallel task from NTREX-128's held-out documents.

    python -m vmsst.build_flores --data_dir=../shared/data --output=runs/eval_tasks

FLORES-200 is not in ../shared/data, but NTREX-128 has its shape: one file per
language, line i of every file translating the same English news sentence.
The ~10% of NTREX documents that training holds out (vmsst_tasks.sources.pair_readers.
ntrex_validation_documents, the documents behind the in-training NTREX
retrieval sets) are written as

    <output>/flores/devtest/<code>.devtest     one sentence per line, aligned

with `<code>` the project's language code (`eng`, `deu`, `zho-CN`, `srp-Cyrl`),
which `vmsst.evaluation.flores.canonical` reads back unchanged. The `flores`
suite (`python -m vmsst.evaluate --suite=flores --data_dir=<output>`) then
reports xsim to and from English for all 128 languages, which Tatoeba's 56
cannot: NTREX covers the teacher's 16 languages and the 112 it lacks, so
`bench/distillation_languages.py` reads it to test whether a distilled
student extends its teacher. The English rewrites (eng-GB/IN/US) and the
second Spanish reference are left out as in training (pair_readers.ntrex_files).
A line that is not valid UTF-8 in any language drops that line from every
file (the files must stay aligned); the count is printed and in README.md.
"""

import json
import pathlib

from vmsst.base import cli
from vmsst.base import files
from vmsst_tasks.sources import pair_readers

TASK_DIR = "flores"
SPLIT = "devtest"


def build(data_dir: str | pathlib.Path, output: str | pathlib.Path) -> dict:
  """Writes the task; returns {"languages", "lines", "dropped_lines", "documents"}.

  Raises:
    FileNotFoundError: no NTREX-128 under data_dir.
    ValueError: a file whose line count differs from DOCUMENT_IDS.tsv.
  """
  documents = pair_readers.ntrex_documents(data_dir)
  held_out = pair_readers.ntrex_validation_documents(data_dir)
  ntrex = pair_readers.ntrex_files(data_dir)
  keep = [i for i, doc in enumerate(documents) if doc in held_out]
  texts = {}
  for code, path in ntrex.items():
    lines = list(pair_readers.decode_lines(path, strict=False))
    if len(lines) != len(documents):
      raise ValueError(f"NTREX {path} has {len(lines)} lines, DOCUMENT_IDS.tsv "
                       f"{len(documents)}; download the corpus again.")
    texts[code] = lines
  bad = {i for i in keep for lines in texts.values()
         if isinstance(lines[i], pair_readers.Skip) or not lines[i].strip()}
  rows = [i for i in keep if i not in bad]
  folder = files.as_path(files.join(output, TASK_DIR, SPLIT))
  files.rmtree(folder)
  folder.mkdir(parents=True)
  for code, lines in texts.items():
    (folder / f"{code}.{SPLIT}").write_text("".join(lines[i] + "\n" for i in rows),
                                            encoding="utf-8")
  counts = {"languages": len(texts), "lines": len(rows), "dropped_lines": len(bad),
            "documents": len(held_out)}
  (folder.parent / "README.md").write_text(
      "# NTREX-128 held-out documents in the FLORES layout\n\n"
      "Not FLORES data: built by `python -m vmsst.build_flores` (see its docstring) "
      f"from {files.join(data_dir, pair_readers.NTREX_DIR)}, the documents vmsst training holds "
      "out. Licence: NTREX-128's (CC BY-SA 4.0, see its LICENSE.md).\n\n"
      f"Counts: `{json.dumps(counts)}`\n", encoding="utf-8")
  return counts


if __name__ == "__main__":
  cli.old_name("vmsst.build_data.flores")
