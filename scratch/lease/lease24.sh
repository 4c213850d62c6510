#!/usr/bin/env bash
# Lease 24 (issue 51), for the next session, started detached from a copy under /tmp (/tmp/L24tree).
# Step 1: the default run at four processes, as must-show 1 asks it (`compare --processes 4`, every default
# scenario, no report), at a tree where pinned_transfer alone took 102.6 s at four processes (lease 23). It says how
# far the default run is from six minutes at four processes, and where the rest goes: read it with
# `python results/probes/by_process.py <file>` (kernel_s: JAX's traced kernel clock). --budget bounds it only
# between scenarios (compare checks it before each one starts): a scenario started runs through.
# Step 2, where 250 s are left: JAX's kernel clock with 0.05 s of warm runs a row against the 0.2 s of WARM_S, on one
# side of a regress judged on the kernel clock (JAX only; pinned_transfer, where the trace cost most, and
# matmul_precision, whose GEMMs WARM_S was set for): does it move the clock, and what does each side's kernel_s say
# it saves? Read with `python results/probes/side_costs.py <folder>` and the files' kernel_s.
# Step 3, where 200 s are left: the shorter loops of lease 23 on one side of a regress over four scenarios that the
# device and the host pace (sync_points, launch_overhead, concurrent_kernels, copy_compute_overlap), four pairs: do
# they move process medians (lease 23: +2% on pinned_transfer's median row) and widen the spread (8.5% -> 9.7%)?
# $1: the device seconds the script may spend (the device time left at its start less a 200 s reserve); $2: the
# commit.
set -u
export PYTHONUNBUFFERED=1
O=/tmp/L24; mkdir -p $O/results
cd /tmp/L24tree || exit 1
start=$(date +%s)
left() { echo $(( ${1:-1000} - ($(date +%s) - start) )); }
echo "start $(date -u +%FT%TZ) at ${2:-unnamed}" > $O/steps.log
nvidia-smi > $O/nvidia-smi.txt 2>&1
B=$(( ${1:-1000} - 500 )); [ $B -gt 900 ] && B=900
echo "default at four processes: budget $B s" >> $O/steps.log
if [ $B -ge 300 ]; then
  python3 -m harness compare --processes 4 --no-report --budget $B --out $O/results/default4 > $O/default4.log 2>&1
  echo "default4 exit $? after $(( $(date +%s) - start )) s" >> $O/steps.log
fi
B=$(( $(left $1) - 60 )); [ $B -gt 200 ] && B=200
echo "kernel warm runs: budget $B s" >> $O/steps.log
if [ $B -ge 150 ]; then
  python3 -m harness regress --baseline-tree . --candidate-tree . --clock kernel --frameworks jax \
    --candidate-env 'TRIPTYCH_TIMING={"kernel_warm_s": 0.05}' --scenarios pinned_transfer,matmul_precision \
    --pairs 4 --max-pairs 4 --budget $B --out $O/results/kernel_warm > $O/kernel_warm.log 2>&1
  echo "kernel_warm exit $? after $(( $(date +%s) - start )) s" >> $O/steps.log
fi
B=$(( $(left $1) - 60 )); [ $B -gt 300 ] && B=300
echo "short loops: budget $B s" >> $O/steps.log
if [ $B -ge 140 ]; then
  python3 -m harness regress --baseline-tree . --candidate-tree . \
    --candidate-env 'TRIPTYCH_TIMING={"min_time_s": 0.02, "max_repeats": 40, "max_wall_s": 0.2, "warmup_s": 0}' \
    --scenarios sync_points,launch_overhead,concurrent_kernels,copy_compute_overlap --pairs 4 --max-pairs 4 \
    --budget $B --out $O/results/short > $O/short.log 2>&1
  echo "short exit $? after $(( $(date +%s) - start )) s" >> $O/steps.log
fi
echo done >> $O/steps.log
