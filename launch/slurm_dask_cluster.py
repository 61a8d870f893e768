"""A Dask cluster on SLURM for launch/slurm_mine.sh: dask-jobqueue's SLURMCluster, up until killed.

Its scheduler runs in this process; each worker is an sbatch job of one Dask worker
process. The scheduler's address is written to --scheduler_file, which Beam's Dask runner
reads (`--dask_scheduler_file`); killing this process cancels the worker jobs.
"""

import argparse
import time


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__)
  parser.add_argument("--workers", type=int, required=True, help="Worker jobs.")
  parser.add_argument("--cores", type=int, required=True, help="Threads and CPUs a job.")
  parser.add_argument("--memory", required=True, help="Memory a job, e.g. 32GB.")
  parser.add_argument("--walltime", required=True, help="A job's limit, e.g. 24:00:00.")
  parser.add_argument("--partition", default=None, help="sbatch -p.")
  parser.add_argument("--account", default=None, help="sbatch -A.")
  parser.add_argument("--python", required=True, help="The workers' python (vmsst installed).")
  parser.add_argument("--scheduler_file", required=True, help="Where the address goes.")
  parser.add_argument("--job_script", action="store_true",
                      help="Print a worker job's sbatch script and exit; submits nothing.")
  args = parser.parse_args()
  from dask_jobqueue import SLURMCluster  # pylint: disable=import-outside-toplevel
  cluster = SLURMCluster(cores=args.cores, processes=1, memory=args.memory,
                         walltime=args.walltime, queue=args.partition, account=args.account,
                         python=args.python)
  if args.job_script:
    print(cluster.job_script())
    return cluster.close()
  cluster.scale(jobs=args.workers)
  cluster.get_client().write_scheduler_file(args.scheduler_file)
  while True:  # the scheduler lives as long as this process
    time.sleep(3600)


if __name__ == "__main__":
  main()
