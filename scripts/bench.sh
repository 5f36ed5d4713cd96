#!/usr/bin/env bash
# make bench / make bench-full: every comparison of issue 40 in one table (bench/summary.py).
#   scripts/bench.sh          quick sizes (20,000 jobs): a few minutes
#   scripts/bench.sh --full   the issue's sizes (1,000,000 jobs): hours
# Starts the lab if it is down and stops it afterwards, as the tests do: a lab brought up
# by hand stays up. Exits as bench.summary does: 0 when every target holds.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1

PY=.venv/bin/python
LABCTL=(env -u PYTHONPATH "$PY" lab/labctl.py)
started_lab=no

if "${LABCTL[@]}" status >/dev/null 2>&1; then
  echo "== lab already up; it stays up after the benchmarks"
else
  echo "== starting the lab"
  started_lab=yes
  "${LABCTL[@]}" start || exit 1
fi

stop_lab() {
  if [ "$started_lab" = yes ]; then
    echo "== stopping the lab"
    "${LABCTL[@]}" stop || echo "!! the lab did not stop cleanly" >&2
  fi
}
trap stop_lab EXIT

# The benchmarks reach Slurm's clients and the database through the lab's environment.
eval "$("${LABCTL[@]}" env)"
"$PY" -m bench.summary "$@"
