#!/usr/bin/env bash
# Lease 17 (issue 51), started detached from a copy under /tmp (/tmp/L17tree): the planted and the control run as
# a user runs them (no pin, a point at a time), the planted one first with up to 450 s and the control with what is
# left (up to 300 s; none under 150: four refused starts had spent the session's device time), at a tree whose requests time the
# host's Python loop just before and after each row's repeats (TimingConfig.host_beside). Lease 16's probe found
# a process's loop and its launches moving together, over time and across processes: the files let
# results/probes/host_covariate.py ask whether that loop, as a covariate of each pair, narrows the intervals.
# $1: seconds of device time left when it starts (the control's budget shrinks to fit); $2: the commit.
set -u
export PYTHONUNBUFFERED=1
O=/tmp/L17; mkdir -p $O/results
cd /tmp/L17tree
start=$(date +%s)
echo "start $(date -u +%FT%TZ) at ${2:-unnamed}" > $O/steps.log
nvidia-smi > $O/nvidia-smi.txt 2>&1
S=sync_points,launch_overhead,pinned_transfer
F="TRIPTYCH_FAULT=launch_overhead:cupy:slow15:eager,pinned_transfer:torch:slow15:h2d_pinned_non_blocking"
B=$(( ${1:-700} - 90 )); [ $B -gt 450 ] && B=450
echo "planted budget $B s" >> $O/steps.log
python3 -m harness regress --baseline-tree . --candidate-tree . --candidate-env "$F" --scenarios $S \
  --pairs 4 --max-pairs 10 --budget $B --out $O/results/planted > $O/planted.log 2>&1
echo "planted exit $? after $(( $(date +%s) - start )) s" >> $O/steps.log
B=$(( ${1:-700} - ($(date +%s) - start) - 60 )); [ $B -gt 300 ] && B=300
echo "control budget $B s" >> $O/steps.log
if [ $B -ge 150 ]; then
  python3 -m harness regress --baseline-tree . --candidate-tree . --scenarios $S \
    --pairs 4 --max-pairs 10 --budget $B --out $O/results/control > $O/control.log 2>&1
  echo "control exit $? after $(( $(date +%s) - start )) s" >> $O/steps.log
fi
echo done >> $O/steps.log
