#!/bin/bash
# Made the runs of 2026-11-27T2309_old_vs_new.jsonl, from two scratch folders:
#   mkdir -p /tmp/f_ab/old /tmp/f_ab/new
#   git archive f20b9b1 | tar -x -C /tmp/f_ab/old   # before the float64 re-score
#   git archive aa1014c | tar -x -C /tmp/f_ab/new   # the re-score with the hashed twin search
#   ./2026-11-27T2309_old_vs_new.sh out.jsonl mine:jax:100000 old:1 new:1 new:2 old:2
#   ./2026-11-27T2309_old_vs_new.sh out.jsonl mine:jax:100000 new:3 old:3 old:4 new:4
# Alternated old/new runs of bench/mining.py --child=SPEC, each in its own process from a git archive.
out=$1; spec=$2; shift 2
for step in "$@"; do   # e.g. old:1 new:1 new:2 old:2
  code=${step%%:*}; round=${step##*:}
  load=$(cut -d' ' -f1-3 /proc/loadavg)
  res=$(cd /tmp/f_ab/$code && PYTHONPATH=/tmp/f_ab/$code nice -n 10 /work/main/.venv/bin/python bench/mining.py --child=$spec 2>/dev/null | tail -1)
  echo "{\"code\": \"$code\", \"spec\": \"$spec\", \"round\": $round, \"load_average\": [${load// /, }], \"result\": $res}" >> $out
done
