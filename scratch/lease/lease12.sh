#!/usr/bin/env bash
# Lease 12 (issue 51), for the next session, started detached from a copy under /tmp (/tmp/L12tree):
# 1. the control with --same-cpu at a tree whose pin starts after each row's first call (cc58a15): torch's
#    1 MiB h2d_pin_then_copy should read about its unpinned 89 us, not lease 11's 128 ms, and the spread stay
#    near lease 11's (median row 0.05);
# 2. the planted run with --same-cpu: both plants different, nothing else, exit 1 (lease 11: 393 s);
# 3. with the time left, the three heaviest scenarios per row of the default run under py-spy at four
#    processes (where a row-process's fixed cost goes: issue 51's default run).
# If 1 and 2 hold, --same-cpu can become the interleaved regress's default.
# $1: seconds of device time left when it starts. Carry scratch/lease and scratch/wheels.
set -u
export PYTHONUNBUFFERED=1
O=/tmp/L12; mkdir -p $O/results $O/prof
cd /tmp/L12tree
start=$(date +%s)
echo "start $(date -u +%FT%TZ) at $(git rev-parse --short HEAD 2>/dev/null)" > $O/steps.log
nvidia-smi > $O/nvidia-smi.txt 2>&1
S=sync_points,launch_overhead,pinned_transfer
python3 -m harness regress --baseline-tree . --candidate-tree . --scenarios $S --same-cpu \
  --pairs 4 --max-pairs 10 --budget 400 --out $O/results/control > $O/control.log 2>&1
echo "control exit $? after $(( $(date +%s) - start )) s" >> $O/steps.log
F="TRIPTYCH_FAULT=launch_overhead:cupy:slow15:eager,pinned_transfer:torch:slow15:h2d_pinned_non_blocking"
python3 -m harness regress --baseline-tree . --candidate-tree . --candidate-env "$F" --scenarios $S \
  --same-cpu --pairs 4 --max-pairs 10 --budget 400 --out $O/results/planted > $O/planted.log 2>&1
echo "planted exit $? after $(( $(date +%s) - start )) s" >> $O/steps.log
P=$(( ${1:-1650} - ($(date +%s) - start) - 60 ))
echo "profile timeout $P s" >> $O/steps.log
if [ $P -ge 120 ]; then
  python3 -m pip install -q --no-index --no-deps --target /tmp/pyspy scratch/wheels/py_spy-*.whl >> $O/steps.log 2>&1
  timeout $P /tmp/pyspy/bin/py-spy record --nonblocking --idle --subprocesses -r 100 -f raw -o $O/prof/pyspy_raw.txt -- \
    python3 -m harness compare --scenarios donation,data_parallel,dlpack_handoff --processes 4 --no-report \
    --out $O/prof --seed 20261207 > $O/prof/compare.log 2>&1
  echo "profile exit $? after $(( $(date +%s) - start )) s" >> $O/steps.log
fi
echo done >> $O/steps.log
