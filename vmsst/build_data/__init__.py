"""Builders of benchmark data: tasks in a benchmark's format written from real sentences.

Kept apart from vmsst/evaluation/ (which only reads and scores) so a reader
knows which modules write data: each is a command,
`python -m vmsst.build_data.<benchmark> --data_dir=... --output=DIR`, whose
output folder the matching `vmsst.evaluation` suite reads.
"""
