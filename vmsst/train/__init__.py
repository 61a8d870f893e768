"""Training: `python -m vmsst.train --gin_file=RUN.gin`, and the loop it runs.

- `loop.py`: `train`, the one gin-configurable loop (mesh → state → teacher
  vectors → data → loop); what tests, `vmsst.compare` and the commands that
  read a run file import.
- `flags.py`: the command's flags (absl only), shared by every command that
  takes a run file.
- `distributed.py`: joining a multi-host job (`--distributed`).
- `preflight.py`: what `train` checks before any data loads, and on a resume.
- `pretokenize.py`: `python -m vmsst.train.pretokenize`, a run's stream
  written ahead for `train.pretokenized` (training without TensorFlow).
- `__main__.py`: the command itself.

Empty on purpose: `python -m vmsst.train` imports this package before
`__main__.py`, which checks `--gin_file` before the loop's seconds of
TensorFlow and JAX imports, and a command that only needs the flags imports
`flags` alone.
"""
