#!/usr/bin/env bash
# Lease 11 (issue 51), for the next session, started detached from a copy under /tmp (/tmp/L11tree):
# 1. the control with each pair on one CPU (--same-cpu, a point at a time): does a pair's two processes'
#    host-paced figure agree when both run on one CPU? (lease 10: up to 1.4x apart taking turns on their own CPUs);
# 2. the planted regress with --same-cpu (budget at most 500 s);
# 3. probe10 (JAX's kernel clock with 0.2, 0.05 and 0 s of warm runs; WARM_S is now read when the trace runs,
#    1acc4df), with the time left (moved last after four refused starts had spent device time).
# $1: seconds of device time left when it starts.
set -u
export PYTHONUNBUFFERED=1
O=/tmp/L11; mkdir -p $O/results
cd /tmp/L11tree
start=$(date +%s)
echo "start $(date -u +%FT%TZ) at $(git rev-parse --short HEAD 2>/dev/null)" > $O/steps.log
nvidia-smi > $O/nvidia-smi.txt 2>&1
S=sync_points,launch_overhead,pinned_transfer
python3 -m harness regress --baseline-tree . --candidate-tree . --scenarios $S --same-cpu \
  --pairs 4 --max-pairs 10 --budget 500 --out $O/results/control > $O/control.log 2>&1
echo "control exit $? after $(( $(date +%s) - start )) s" >> $O/steps.log
B=$(( ${1:-1650} - ($(date +%s) - start) - 70 )); [ $B -gt 500 ] && B=500
echo "planted budget $B s" >> $O/steps.log
F="TRIPTYCH_FAULT=launch_overhead:cupy:slow15:eager,pinned_transfer:torch:slow15:h2d_pinned_non_blocking"
[ $B -ge 200 ] && python3 -m harness regress --baseline-tree . --candidate-tree . --candidate-env "$F" --scenarios $S \
  --same-cpu --pairs 4 --max-pairs 10 --budget $B --out $O/results/planted > $O/planted.log 2>&1
echo "planted exit $? after $(( $(date +%s) - start )) s" >> $O/steps.log
P=$(( ${1:-1650} - ($(date +%s) - start) - 40 )); [ $P -gt 240 ] && P=240
echo "probe timeout $P s" >> $O/steps.log
[ $P -ge 60 ] && PYTHONPATH=. timeout $P python3 scratch/lease/probe10.py 3 > $O/probe10.jsonl 2> $O/probe10.err
echo "probe exit $? after $(( $(date +%s) - start )) s" >> $O/steps.log
echo done >> $O/steps.log
