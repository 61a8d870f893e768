"""Sums a timing_plugin.py log per test file (the workers' lines only), longest first.

    python docs/results/tests/durations_by_file.py TIMING_LOG > durations_by_file.tsv
"""

import collections
import sys


def main(path: str) -> None:
  seconds, tests = collections.Counter(), collections.Counter()
  with open(path, encoding="utf-8") as log:
    for line in log:
      _, worker, nodeid, when, _, duration = line.rstrip("\n").split("\t")
      if worker != "-":
        seconds[nodeid.split("::")[0]] += float(duration)
        tests[nodeid.split("::")[0]] += when == "call"
  total = sum(seconds.values())
  print("file\ttests\tseconds\tshare")
  for name, value in seconds.most_common():
    print(f"{name}\t{tests[name]}\t{value:.0f}\t{value / total:.1%}")


if __name__ == "__main__":
  main(sys.argv[1])
