#!/usr/bin/env bash
# Lease 16 (issue 51), for the next session, started detached from a copy under /tmp (/tmp/L16tree):
# 1. probe16 (about 6 minutes; and fresh processes one after another, each alone, timing CuPy's launches and torch's): does the Python loop a request times as it starts say how fast a host-paced
#    row runs, and is a slow spell the host's (every process at once) or a process's own? Lease 14 read CuPy
#    eager 1.5x apart after equal loops (results/journal.md, 2026-12-07, midday). Two and four CuPy processes,
#    two torch processes, side by side.
# 2. with the time left, the default run at four processes, issue 51's first must-show, as a user runs it:
#    make compare PYTHON=python3 ARGS="--processes 4" (its log has each step's time where it is cut short).
# $1: seconds of device time left when it starts; $2: the commit the copy is of. Carry scratch/lease.
set -u
export PYTHONUNBUFFERED=1
O=/tmp/L16; mkdir -p $O/results
cd /tmp/L16tree
start=$(date +%s)
left() { echo $(( ${1:-600} - ($(date +%s) - start) - 60 )); }
echo "start $(date -u +%FT%TZ) at ${2:-unnamed}" > $O/steps.log
nvidia-smi > $O/nvidia-smi.txt 2>&1
for run in "cupy 2 45" "cupy 4 45" "--serial both 20 3" "pin --serial both 16 3"; do
  pin=; case $run in pin*) pin=3; run=${run#pin };; esac
  name=$(echo "$run" | tr -d '-' | tr ' ' '_')${pin:+_cpu$pin}
  PROBE_CPU=$pin PYTHONPATH=. timeout 200 python3 scratch/lease/probe16.py $run > "$O/probe16_$name.jsonl" 2>&1
  echo "probe16 $run${pin:+ on CPU $pin} exit $? after $(( $(date +%s) - start )) s" >> $O/steps.log
done
P=$(left "$1")
echo "compare timeout $P s" >> $O/steps.log
if [ $P -ge 120 ]; then
  timeout $P make compare PYTHON=python3 ARGS="--processes 4 --out $O/results" > $O/compare.log 2>&1
  echo "compare exit $? after $(( $(date +%s) - start )) s" >> $O/steps.log
fi
echo done >> $O/steps.log
