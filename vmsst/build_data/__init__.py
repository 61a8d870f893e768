"""Builders of benchmark data: tasks in a benchmark's format written from real sentences.

Kept apart from vmsst/evaluation/ (which only reads and scores) so a reader
knows which modules write data. Each builder has a command,
`python -m vmsst.build_<benchmark> --data_dir=... --output=DIR`, whose output
folder the matching `vmsst.evaluation` suite reads.

  bucc.py                BUCC-2018-format mining task from STSb-multi-mt
  clustering.py          MewsC-16-format clustering set from the STSb
  flores.py              FLORES-layout task from NTREX-128's held-out documents
  question_retrieval.py  question-retrieval sets from STSb-multi-mt and STS16
  builder_main.py        the commands' shared `main`: checks, build, counts
"""
