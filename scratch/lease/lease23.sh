#!/usr/bin/env bash
# Lease 23 (issue 51), for the next session, started detached from a copy under /tmp (/tmp/L23tree). Lease 22 as it
# was written (no machine came for it: six starts refused on 2026-12-07 evening): the planted and control regress
# with --host-covariate over sync_points, launch_overhead and pinned_transfer, 540 s each. The planted run must call
# both plants (torch's h2d_pinned_non_blocking at 64 MiB, CuPy's eager) and nothing else different, exit 1; the
# control nothing, exit 0. Read both with `python results/probes/host_covariate.py --looks 4 <folder>` and
# `python results/probes/side_costs.py <folder>`.
# Step 3, where 230 s of $1 are left: a compare at four processes of the scenario with the most rows and untimed
# work (pinned_transfer, 90 rows; 103 s at two processes on 2026-12-06, so about 200-220 s at four), read with
# `python results/probes/by_process.py <file>`: what a row's third and fourth process cost against its first two,
# now that each process keeps its loop_s, warm_s and check_s (76df4e4). No --budget: compare's is checked only
# before a scenario starts, so it would not bound one scenario.
# Before the copy: keep results/20261206T221108Z_nvidia-h100-80gb-hbm3_full.json in the index (git add -f) when the
# rest of results/ is left out, so that on an H100 the forecast says before the first pair what the budget buys.
# $1: the device seconds the script may spend: the device time left at its start less a reserve (200 s) for the
# last poll and the give-back; the control's budget shrinks to fit, and step 3 runs only where enough is left (each
# regress ends 35-40 s past its budget: step 3 needs $1 >= about 1400). $2: the commit.
set -u
export PYTHONUNBUFFERED=1
O=/tmp/L23; mkdir -p $O/results
cd /tmp/L23tree || exit 1
start=$(date +%s)
echo "start $(date -u +%FT%TZ) at ${2:-unnamed}" > $O/steps.log
nvidia-smi > $O/nvidia-smi.txt 2>&1
S=sync_points,launch_overhead,pinned_transfer
F="TRIPTYCH_FAULT=launch_overhead:cupy:slow15:eager,pinned_transfer:torch:slow15:h2d_pinned_non_blocking"
B=$(( (${1:-1000} - 120) / 2 )); [ $B -gt 540 ] && B=540
echo "planted budget $B s" >> $O/steps.log
if [ $B -ge 150 ]; then
  python3 -m harness regress --baseline-tree . --candidate-tree . --candidate-env "$F" --scenarios $S \
    --host-covariate --pairs 4 --max-pairs 10 --budget $B --out $O/results/planted > $O/planted.log 2>&1
  echo "planted exit $? after $(( $(date +%s) - start )) s" >> $O/steps.log
fi
B=$(( ${1:-1000} - ($(date +%s) - start) - 60 )); [ $B -gt 540 ] && B=540
echo "control budget $B s" >> $O/steps.log
if [ $B -ge 150 ]; then
  python3 -m harness regress --baseline-tree . --candidate-tree . --scenarios $S \
    --host-covariate --pairs 4 --max-pairs 10 --budget $B --out $O/results/control > $O/control.log 2>&1
  echo "control exit $? after $(( $(date +%s) - start )) s" >> $O/steps.log
fi
B=$(( ${1:-1000} - ($(date +%s) - start) ))
echo "four-process: $B s left" >> $O/steps.log
if [ $B -ge 230 ]; then
  python3 -m harness compare --scenarios pinned_transfer --processes 4 --no-report --out $O/results/four \
    > $O/four.log 2>&1
  echo "four-process exit $? after $(( $(date +%s) - start )) s" >> $O/steps.log
fi
echo done >> $O/steps.log
