"""A pytest plugin that records every test report as it happens, so a long run's durations are
on disk before it ends (`--durations` prints them only at the end).

    PYTHONPATH=docs/results/tests TIMING_LOG=FILE make test ARGS="-p timing_plugin"

Appends `time, worker, nodeid, when, outcome, duration` (tab-separated) to TIMING_LOG for each
setup, call and teardown report; xdist's controller (worker `-`) repeats its workers' lines.
"""

import os
import time


def pytest_runtest_logreport(report):
  path = os.environ.get("TIMING_LOG")
  if not path:
    return
  with open(path, "a", encoding="utf-8") as log:
    log.write(f"{time.time():.1f}\t{os.environ.get('PYTEST_XDIST_WORKER', '-')}\t{report.nodeid}\t"
              f"{report.when}\t{report.outcome}\t{report.duration:.2f}\n")
