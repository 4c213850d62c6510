#!/usr/bin/env bash
# Lease 9 (issue 51), started detached from a copy under /tmp (/tmp/L9tree) that a later call's tree cannot replace:
# 1. the probe of JAX's kernel clock read in memory (scratch/lease/probe9.py) against the trace.json path;
# 2. the five regress scenarios' compare under py-spy, as 2026-12-06's profile (results/profiles/20261206T001208Z_pyspy):
#    the before/after of a pass's fixed cost;
# 3. the control of lease 7's planted run: the same three scenarios and command, no plants;
# 4. a null plant: TRIPTYCH_FAULT planted on a scenario the run does not time (the pageable rows of lease 7).
# $1: seconds of device time left when it starts.
set -u
export PYTHONUNBUFFERED=1
O=/tmp/L9; mkdir -p $O/results $O/prof
cd /tmp/L9tree
start=$(date +%s)
echo "start $(date -u +%FT%TZ) at $(git rev-parse --short HEAD 2>/dev/null)" > $O/steps.log
nvidia-smi > $O/nvidia-smi.txt 2>&1
python3 -m pip install -q --no-index --no-deps --target /tmp/pyspy scratch/wheels/py_spy-*.whl >> $O/steps.log 2>&1
python3 scratch/lease/probe9.py > $O/probe9.jsonl 2> $O/probe9.err
echo "probe exit $? after $(( $(date +%s) - start )) s" >> $O/steps.log
/tmp/pyspy/bin/py-spy record --nonblocking --idle --subprocesses -r 100 -f raw -o $O/prof/pyspy_raw.txt -- \
  python3 -m harness compare --scenarios sync_points,launch_overhead,pinned_transfer,concurrent_kernels,collectives \
  --processes 2 --no-report --out $O/prof --seed 20261205 > $O/prof/compare.log 2>&1
echo "profile exit $? after $(( $(date +%s) - start )) s" >> $O/steps.log
S=sync_points,launch_overhead,pinned_transfer
python3 -m harness regress --baseline-tree . --candidate-tree . --scenarios $S --pairs 4 --max-pairs 10 --budget 500 \
  --out $O/results > $O/control.log 2>&1
echo "control exit $? after $(( $(date +%s) - start )) s" >> $O/steps.log
B=$(( ${1:-1500} - ($(date +%s) - start) - 90 )); [ $B -gt 240 ] && B=240
echo "null budget $B s" >> $O/steps.log
[ $B -ge 100 ] && python3 -m harness regress --baseline-tree . --candidate-tree . --scenarios pinned_transfer --pairs 4 \
  --max-pairs 10 --budget $B --candidate-env "TRIPTYCH_FAULT=collectives:torch:slow15:out_of_place" --out $O/results \
  > $O/null.log 2>&1
echo "null exit $? after $(( $(date +%s) - start )) s" >> $O/steps.log
echo done >> $O/steps.log
