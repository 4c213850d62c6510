#!/usr/bin/env bash
# Lease 25 (issue 51), started detached from a copy under /tmp (/tmp/L25tree).
# Step 1: does the host's loop before each repeat lift host-paced rows? Lease 23's two --host-covariate runs read
# pinned_transfer's 4 KiB rows 31-42% above runs without the loop, on a host at its slower speed more often: the
# files could not tell which. Here one side times the loop and the other not (TRIPTYCH_TIMING host_beside), in
# interleaved pairs on one host at one time, so the verdicts answer it; judged plain (the header says why).
# Step 2, where 200 s are left: the shorter loops of lease 23 on one side over four scenarios the device and the host
# pace, four pairs: do they move process medians and widen the spread between processes?
# Step 3, where 200 s are left: JAX's kernel clock with 0.05 s of warm runs a row against WARM_S's 0.2 s (--clock
# kernel, JAX only): does it move the clock, and what does each side's kernel_s say it saves?
# Read with results/probes/side_costs.py <folder> and results/probes/host_covariate.py.
# $1: the device seconds the script may spend (the device time left at its start less a reserve); $2: the commit.
set -u
export PYTHONUNBUFFERED=1
O=/tmp/L25; mkdir -p $O/results
cd /tmp/L25tree || exit 1
start=$(date +%s)
left() { echo $(( ${1:-1000} - ($(date +%s) - start) )); }
echo "start $(date -u +%FT%TZ) at ${2:-unnamed}" > $O/steps.log
nvidia-smi > $O/nvidia-smi.txt 2>&1
B=$(( $(left $1) - 60 )); [ $B -gt 400 ] && B=400
echo "loop A/B: budget $B s" >> $O/steps.log
if [ $B -ge 200 ]; then
  python3 -m harness regress --baseline-tree . --candidate-tree . \
    --candidate-env 'TRIPTYCH_TIMING={"host_beside": true}' --scenarios pinned_transfer,launch_overhead,sync_points \
    --pairs 4 --max-pairs 10 --budget $B --out $O/results/loop_ab > $O/loop_ab.log 2>&1
  echo "loop_ab exit $? after $(( $(date +%s) - start )) s" >> $O/steps.log
fi
B=$(( $(left $1) - 60 )); [ $B -gt 300 ] && B=300
echo "short loops: budget $B s" >> $O/steps.log
if [ $B -ge 200 ]; then
  python3 -m harness regress --baseline-tree . --candidate-tree . \
    --candidate-env 'TRIPTYCH_TIMING={"min_time_s": 0.02, "max_repeats": 40, "max_wall_s": 0.2, "warmup_s": 0}' \
    --scenarios sync_points,launch_overhead,concurrent_kernels,copy_compute_overlap --pairs 4 --max-pairs 4 \
    --budget $B --out $O/results/short > $O/short.log 2>&1
  echo "short exit $? after $(( $(date +%s) - start )) s" >> $O/steps.log
fi
B=$(( $(left $1) - 60 )); [ $B -gt 200 ] && B=200
echo "kernel warm runs: budget $B s" >> $O/steps.log
if [ $B -ge 150 ]; then
  python3 -m harness regress --baseline-tree . --candidate-tree . --clock kernel --frameworks jax \
    --candidate-env 'TRIPTYCH_TIMING={"kernel_warm_s": 0.05}' --scenarios pinned_transfer,matmul_precision \
    --pairs 4 --max-pairs 4 --budget $B --out $O/results/kernel_warm > $O/kernel_warm.log 2>&1
  echo "kernel_warm exit $? after $(( $(date +%s) - start )) s" >> $O/steps.log
fi
echo done >> $O/steps.log
