"""`python -m vmsst.train`'s own flags: joining a multi-host job, resuming with changes.

The run-file flags train shares with compile, compare, teacher_cache,
pretokenize and mt5_import (`--gin_file`, `--gin_bindings` or `--gin.X=Y`,
`--gin_search_path`) are vmsst.base.gin_utils.define_flags'. It imports absl
alone: a command defines its flags, and checks them (`cli.check_early`),
before the loop's seconds of TensorFlow and JAX imports.
"""

from absl import flags

DISTRIBUTED = flags.DEFINE_bool(
    "distributed", False,
    "Call jax.distributed.initialize() first (multi-host pods; run the same "
    "command on every host). Alone, JAX detects the peers on TPU pods and "
    "under SLURM; elsewhere give the three flags below.")
COORDINATOR_ADDRESS = flags.DEFINE_string(
    "coordinator_address", None,
    "host:port of process 0's coordination service (implies --distributed).")
NUM_PROCESSES = flags.DEFINE_integer("num_processes", None,
                                     "Processes in the job (implies --distributed).")
PROCESS_ID = flags.DEFINE_integer("process_id", None,
                                  "This process's index in [0, num_processes) "
                                  "(implies --distributed).")
PEER_TIMEOUT_SECONDS = flags.DEFINE_float(
    "peer_timeout_seconds", 60.0,
    "Multi-host: a peer process silent this long is lost; the others then exit "
    "(status 69) with one line naming it, instead of waiting in a collective.")
RESUME_WITH_CHANGES = flags.DEFINE_bool(
    "resume_with_changes", False,
    "Resume MODEL_DIR although settings changed since its config.gin (they are "
    "listed otherwise, and the run refused); the earlier config.gin is kept as "
    "config-<step>.gin and model.json records each step range.")
