"""One with_twins call over n x 512 float32 keys (1% of rows copies of others, or none), in RAM
or memory-mapped from a .npy: seconds and memory above the keys (peak RSS after reset).

Made 2026-11-27T2322_twin_rows.jsonl, with ca8 = `git archive ca822d0` (np.unique over whole
rows) and new = `git archive aa1014c` unpacked in /tmp/f_ab/, keys from 2026-11-27T2322_make_keys.py:
  for run in "100000 ram none" "100000 ram dups" "100000 mmap dups" "1000000 mmap dups"; do
    set -- $run; for code in ca8 new new ca8; do
      PYTHONPATH=/tmp/f_ab/$code nice -n 10 .venv/bin/python 2026-11-27T2322_twin_rows.py \
          $1 $2 $3 /tmp/f_ab/keys_$1_$3.npy; done; done
(each line of the .jsonl adds the code and /proc/loadavg before the run).
"""
import json, sys, time
import numpy as np
from vmsst import files
from vmsst.mining import neighbors

def rss(field):
  for line in open("/proc/self/status"):
    if line.startswith(field):
      return int(line.split()[1]) / 1024

n, where, dups, path = int(sys.argv[1]), sys.argv[2], sys.argv[3] == "dups", sys.argv[4]
if where == "ram":
  keys = files.load_npy(path)
else:
  keys = files.load_npy(path, mmap=True)
open("/proc/self/clear_refs", "w").write("5")
before = rss("VmRSS:")
start = time.perf_counter()
out = neighbors.with_twins(np.zeros((1, 8), np.int64), keys, 4)
seconds = time.perf_counter() - start
print(json.dumps({"n": n, "keys": where, "dups": dups, "seconds": seconds,
                  "peak_above_start_mb": rss("VmHWM:") - before, "rss_before_mb": before,
                  "row_0_candidates": sorted(set(out[0].tolist()) - {-1})}))
