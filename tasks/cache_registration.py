"""Registers the vmsst tasks on import, for seqio's cache job (`--module_import`), from a variable.

  VMSST_REGISTER_TASKS='{"data_dir": "../shared/data", "vocabulary_path": "runs/vocab/spm.model",
                         "opus_dir": "/data/opus"}' \\
  python -m seqio.scripts.cache_tasks_main --module_import=vmsst_tasks.cache_registration \\
      --tasks='vmsst_opus\\..*,vmsst_opus_paper\\..*' --output_cache_dir=CACHE \\
      --pipeline_options=--runner=DirectRunner

seqio's job (Apache Beam: the DirectRunner here, Dataflow or Flink on a
cluster) imports `--module_import` in the launcher and in every worker
before it looks a task up, and vmsst registers nothing on import elsewhere
(tasks/registry/): this module is that one import, and does nothing else.
The variable holds `registry.register_tasks`' keyword arguments as JSON (the
one-call form over the task families: opus_dir selects the OPUS family, ...);
each worker needs it too (Dataflow: set it in the worker image). Training
then reads the cache with `train_iterator.use_cached = True` and
`train_iterator.cache_dirs = ['CACHE']` (tasks/pipeline/input_pipeline.py).
"""

import json
import os

from vmsst_tasks import registry

ENV = "VMSST_REGISTER_TASKS"

if os.environ.get(ENV):
  registry.register_tasks(**json.loads(os.environ[ENV]))
