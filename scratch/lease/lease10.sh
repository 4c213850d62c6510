#!/usr/bin/env bash
# Lease 10 (issue 51), for the next session, started detached from a copy under /tmp (/tmp/L10tree):
# 1. the default run at this tree: the equivalence phase side by side, the kernel clock read in memory, hazards on a
#    sample, against lease 7's 778 s (equivalence 86 s, JAX's requests outside rows 148 s);
# 2. probe10: JAX's kernel clock with 0.2, 0.05 and 0 s of warm runs inside the trace, after a timed loop each;
# 3. the planted regress of lease 7 with what time is left (its forecast now comes after the first pairs where
#    no earlier result is there: copy the default run's result into the --out folder first, so it has one).
# $1: seconds of device time left when it starts.
set -u
export PYTHONUNBUFFERED=1
O=/tmp/L10; mkdir -p $O/results
cd /tmp/L10tree
start=$(date +%s)
echo "start $(date -u +%FT%TZ) at $(git rev-parse --short HEAD 2>/dev/null)" > $O/steps.log
nvidia-smi > $O/nvidia-smi.txt 2>&1
make compare PYTHON=python3 ARGS="--out $O/results" > $O/compare.log 2>&1
echo "compare exit $? after $(( $(date +%s) - start )) s" >> $O/steps.log
PYTHONPATH=. timeout 240 python3 scratch/lease/probe10.py 3 > $O/probe10.jsonl 2> $O/probe10.err
echo "probe exit $? after $(( $(date +%s) - start )) s" >> $O/steps.log
B=$(( ${1:-1500} - ($(date +%s) - start) - 90 )); [ $B -gt 500 ] && B=500
echo "planted budget $B s" >> $O/steps.log
S=sync_points,launch_overhead,pinned_transfer
F="TRIPTYCH_FAULT=launch_overhead:cupy:slow15:eager,pinned_transfer:torch:slow15:h2d_pinned_non_blocking"
[ $B -ge 200 ] && python3 -m harness regress --baseline-tree . --candidate-tree . --candidate-env "$F" --scenarios $S \
  --pairs 4 --max-pairs 10 --budget $B --out $O/results > $O/planted.log 2>&1
echo "planted exit $? after $(( $(date +%s) - start )) s" >> $O/steps.log
echo done >> $O/steps.log
