#!/usr/bin/env bash
# Lease 10 (issue 51), started detached from a copy under /tmp (/tmp/L10tree):
# 1. the planted regress of leases 7 and 9, now with the pairs taking turns call by call (harness/workers/turns.py);
# 2. the same without plants (the control);
# 3. probe10 (JAX's kernel clock with 0.2, 0.05 and 0 s of warm runs after a timed loop) with the time left.
# $1: seconds of device time left when it starts.
set -u
export PYTHONUNBUFFERED=1
O=/tmp/L10; mkdir -p $O/results
cd /tmp/L10tree
start=$(date +%s)
echo "start $(date -u +%FT%TZ) at $(git rev-parse --short HEAD 2>/dev/null)" > $O/steps.log
nvidia-smi > $O/nvidia-smi.txt 2>&1
S=sync_points,launch_overhead,pinned_transfer
F="TRIPTYCH_FAULT=launch_overhead:cupy:slow15:eager,pinned_transfer:torch:slow15:h2d_pinned_non_blocking"
python3 -m harness regress --baseline-tree . --candidate-tree . --candidate-env "$F" --scenarios $S \
  --pairs 4 --max-pairs 10 --budget 500 --out $O/results/planted > $O/planted.log 2>&1
echo "planted exit $? after $(( $(date +%s) - start )) s" >> $O/steps.log
B=$(( ${1:-1650} - ($(date +%s) - start) - 60 )); [ $B -gt 500 ] && B=500
echo "control budget $B s" >> $O/steps.log
[ $B -ge 200 ] && python3 -m harness regress --baseline-tree . --candidate-tree . --scenarios $S \
  --pairs 4 --max-pairs 10 --budget $B --out $O/results/control > $O/control.log 2>&1
echo "control exit $? after $(( $(date +%s) - start )) s" >> $O/steps.log
P=$(( ${1:-1650} - ($(date +%s) - start) - 30 )); [ $P -gt 240 ] && P=240
[ $P -ge 90 ] && PYTHONPATH=. timeout $P python3 scratch/lease/probe10.py 3 > $O/probe10.jsonl 2> $O/probe10.err
echo "probe exit $? after $(( $(date +%s) - start )) s" >> $O/steps.log
echo done >> $O/steps.log
