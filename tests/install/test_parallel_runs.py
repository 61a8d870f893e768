"""The Makefile's pytest-xdist flags (`PARALLEL`): a worker that dies ends the run, never hangs it.

Why: a test that kills its worker from native code (an XLA abort) is handed by `--dist
loadfile` to the restarted worker again, which dies on it too; once every worker has, xdist
waits forever and CI runs into its limit. `--max-worker-restart=0` reports the crash as
that test's failure (with the test's name) and ends the run, failed.
"""

import pathlib
import re
import shlex
import subprocess
import sys

REPO = pathlib.Path(__file__).resolve().parents[2]

CRASHING = '''
import os
import time

def test_first():
  time.sleep(0.5)

def test_dies():
  os.abort()

def test_after():
  pass
'''

QUIET = '''
import time

def test_one():
  time.sleep(1)

def test_two():
  pass
'''


def parallel_flags() -> list[str]:
  """The flags the Makefile's test targets give pytest for xdist."""
  found = re.search(r"^PARALLEL := (.*)$", (REPO / "Makefile").read_text(), re.MULTILINE)
  assert found, "Makefile: no PARALLEL := line"
  return shlex.split(found.group(1))


def test_a_worker_killed_by_a_signal_fails_its_test_and_the_run_ends(tmp_path):
  (tmp_path / "test_crashing.py").write_text(CRASHING)
  for name in ("test_b.py", "test_c.py", "test_d.py"):
    (tmp_path / name).write_text(QUIET)
  done = subprocess.run(
      [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:faulthandler",
       "--rootdir", str(tmp_path), *parallel_flags(), str(tmp_path)],
      cwd=tmp_path, capture_output=True, text=True, timeout=240, check=False)
  out = done.stdout + done.stderr
  assert done.returncode == 1, out[-3000:]
  assert "crashed while running 'test_crashing.py::test_dies'" in out, out[-3000:]
  assert re.search(r"\b1 failed\b", out), out[-3000:]
