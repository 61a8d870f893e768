"""Sums a py-spy raw profile of the whole suite per Python function, over every process.

    pip install py-spy   # in a venv of its own
    py-spy record --subprocesses -r 10 -f raw -o suite.txt -- make test
    python docs/results/tests/profile_by_function.py suite.txt [--top=60] [--match=TEXT ...]

Each function is counted once per sampled stack (inclusive time, as a flame graph's width),
in seconds at the sampling rate. py-spy samples Python threads: time in native threads of
their own (XLA's compute threads) is not in it, and its raw lines can hold a process's
command line over several lines, which are joined here.
"""

import argparse
import collections
import re

_LINE_END = re.compile(r" (\d+)\n$")
_FRAME = re.compile(r"(.*) \((.*?):\d+\)$")


def stacks(path: str):
  """(frames, samples) per raw line, multi-line command lines joined."""
  pending = ""
  with open(path, encoding="utf-8", errors="replace") as raw:
    for line in raw:
      pending += line
      if _LINE_END.search(pending):
        stack, count = pending.rstrip("\n").rsplit(" ", 1)
        pending = ""
        yield stack.split(";"), int(count)


def by_function(path: str) -> collections.Counter:
  totals = collections.Counter()
  for frames, count in stacks(path):
    seen = set()
    for frame in frames:
      found = _FRAME.match(frame)
      if not found:
        continue  # a process frame
      key = f"{found.group(1)} ({found.group(2).split('site-packages/')[-1]})"
      if key not in seen:
        seen.add(key)
        totals[key] += count
  return totals


def main() -> None:
  parser = argparse.ArgumentParser()
  parser.add_argument("profile")
  parser.add_argument("--rate", type=float, default=10.0, help="py-spy's -r")
  parser.add_argument("--top", type=int, default=60)
  parser.add_argument("--match", nargs="*", default=(), help="only functions naming one of these")
  args = parser.parse_args()
  shown = 0
  for key, count in by_function(args.profile).most_common():
    if args.match and not any(text in key for text in args.match):
      continue
    print(f"{count / args.rate:8.0f} s  {key}")
    shown += 1
    if shown == args.top:
      break


if __name__ == "__main__":
  main()
