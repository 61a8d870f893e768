"""n x 512 float32 unit rows (seed 0) to a .npy; with 'dups', rows 0 and 1% of the others are
overwritten by copies of other rows (row 0 = row n-1, so row 0 has a twin)."""
import sys
import numpy as np
from vmsst import files
n, dups, path = int(sys.argv[1]), sys.argv[2] == "dups", sys.argv[3]
rng = np.random.default_rng(0)
keys = np.empty((n, 512), np.float32)
for start in range(0, n, 65536):
  part = rng.standard_normal((min(65536, n - start), 512), np.float32)
  keys[start:start + len(part)] = part / np.linalg.norm(part, axis=1, keepdims=True)
if dups:
  keys[rng.choice(n, n // 100, replace=False)] = keys[rng.choice(n, n // 100)]
  keys[0] = keys[n - 1]
files.save_npy(path, keys)
