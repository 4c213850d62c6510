#!/usr/bin/env bash
# Lease 13 (issue 51), started detached from a copy under /tmp (/tmp/L13tree), with the 511 s of device time
# this session has left after lease 12: one planted run with --same-cpu at a tree whose pair's two workers
# of a framework live on one CPU from their start (interleave.pair_cpu), OMP_NUM_THREADS=1 unless set.
# Lease 11 (the whole request pinned) found both plants, spread 0.025; lease 12 (each row pinned after its
# first call) lost CuPy's eager plant, spread 0.141, but read torch's 1 MiB h2d_pin_then_copy at 90 us, not
# 128 ms. This run should show both: the plants found and nothing else, the spread low, the 1 MiB row near
# 90 us. A one-off look at the workers' CPUs (every thread of a worker on one CPU) goes to cpus.log.
# $1: the regress budget in seconds. No carry needed.
set -u
export PYTHONUNBUFFERED=1
O=/tmp/L13; mkdir -p $O/results
cd /tmp/L13tree
start=$(date +%s)
echo "start $(date -u +%FT%TZ) at $(git rev-parse --short HEAD 2>/dev/null)" > $O/steps.log
nvidia-smi > $O/nvidia-smi.txt 2>&1
( sleep 120; for p in $(pgrep -f "TRIPTYCH|multiprocessing.connection" ); do
    echo "$p $(tr '\0' ' ' < /proc/$p/cmdline | cut -c1-60) | $(cat /proc/$p/task/*/status 2>/dev/null | grep Cpus_allowed_list | sort | uniq -c | tr -s ' \n' ' ')"
  done > $O/cpus.log 2>&1 ) &
S=sync_points,launch_overhead,pinned_transfer
F="TRIPTYCH_FAULT=launch_overhead:cupy:slow15:eager,pinned_transfer:torch:slow15:h2d_pinned_non_blocking"
python3 -m harness regress --baseline-tree . --candidate-tree . --candidate-env "$F" --scenarios $S \
  --same-cpu --pairs 4 --max-pairs 10 --budget ${1:-300} --out $O/results/planted > $O/planted.log 2>&1
echo "planted exit $? after $(( $(date +%s) - start )) s" >> $O/steps.log
echo done >> $O/steps.log
