#!/usr/bin/env bash
# Lease 14 (issue 51), for the next session, started detached from a copy under /tmp (/tmp/L14tree): the
# control and the planted run with --same-cpu at a tree whose pair's workers of a framework live on one CPU
# from their start, one OpenMP thread (1eb8f9a or later), each with a budget of 450 s (lease 11 had 500), so that
# they reach lease 11's 6-10 pairs. Lease 13 ran only the planted run, at 290 s and 4 pairs: it could not
# decide. If both hold (nothing different in the control; both plants and nothing else in the planted run),
# --same-cpu can become the interleaved regress's default. A look at the workers' CPUs goes to cpus.log. First,
# probe14.py (about a minute): what compiling Python from source costs a worker there, against the run's
# compiled-module folder (ae7413e).
# $1: seconds of device time left when it starts (the planted run's budget shrinks to fit); $2: the commit the
# copy is of (the device copy's .git can be stale: lease 13 named 0ac19e3 at f070f46). No carry needed.
set -u
export PYTHONUNBUFFERED=1
O=/tmp/L14; mkdir -p $O/results
cd /tmp/L14tree
start=$(date +%s)
echo "start $(date -u +%FT%TZ) at ${2:-unnamed}" > $O/steps.log
nvidia-smi > $O/nvidia-smi.txt 2>&1
( sleep 120; for p in $(pgrep -f "TRIPTYCH_SIDE"); do
    echo "$p $(tr '\0' ' ' < /proc/$p/cmdline | tail -c 12) | $(cat /proc/$p/task/*/status 2>/dev/null | grep Cpus_allowed_list | sort | uniq -c | tr -s ' \n' ' ')"
  done > $O/cpus.log 2>&1 ) &
PYTHONPATH=. timeout 100 python3 scratch/lease/probe14.py 2 > $O/probe14.jsonl 2>&1
echo "probe14 exit $? after $(( $(date +%s) - start )) s" >> $O/steps.log
S=sync_points,launch_overhead,pinned_transfer
python3 -m harness regress --baseline-tree . --candidate-tree . --scenarios $S --same-cpu \
  --pairs 4 --max-pairs 10 --budget 450 --out $O/results/control > $O/control.log 2>&1
echo "control exit $? after $(( $(date +%s) - start )) s" >> $O/steps.log
B=$(( ${1:-1650} - ($(date +%s) - start) - 90 )); [ $B -gt 450 ] && B=450
echo "planted budget $B s" >> $O/steps.log
F="TRIPTYCH_FAULT=launch_overhead:cupy:slow15:eager,pinned_transfer:torch:slow15:h2d_pinned_non_blocking"
python3 -m harness regress --baseline-tree . --candidate-tree . --candidate-env "$F" --scenarios $S \
  --same-cpu --pairs 4 --max-pairs 10 --budget $B --out $O/results/planted > $O/planted.log 2>&1
echo "planted exit $? after $(( $(date +%s) - start )) s" >> $O/steps.log
echo done >> $O/steps.log
