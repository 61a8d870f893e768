"""Joining a multi-controller job: every process runs the same `python -m vmsst.train`.

Apart from the loop, which only reads `jax.process_index()` and
`jax.process_count()`: a test or a launcher joins a job without training.
"""

import jax
from absl import logging


def initialize_distributed(*, coordinator_address: str | None = None,
                           num_processes: int | None = None,
                           process_id: int | None = None) -> None:
  """Joins the multi-controller job: every process runs this same program.

  With no arguments JAX detects the job itself (TPU pod metadata, SLURM
  variables); on other clusters, or several processes on one machine, give
  all three. CPU processes exchange collectives over gloo (the setting only
  concerns the CPU client, so it is harmless on TPU and GPU).
  """
  given = [coordinator_address, num_processes, process_id]
  if any(v is not None for v in given) and any(v is None for v in given):
    raise ValueError("give all of --coordinator_address, --num_processes and --process_id, "
                     "or none of them (auto-detection on TPU pods and SLURM).")
  jax.config.update("jax_cpu_collectives_implementation", "gloo")
  jax.distributed.initialize(coordinator_address=coordinator_address,
                             num_processes=num_processes, process_id=process_id)
  logging.info("process %d of %d, %d local / %d global devices", jax.process_index(),
               jax.process_count(), jax.local_device_count(), jax.device_count())
