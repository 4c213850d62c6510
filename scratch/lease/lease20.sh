#!/usr/bin/env bash
# Lease 20 (issue 51), started detached from a copy under /tmp (/tmp/L20tree), with what is left of a session's
# device time after lease 19. Does the loop beside each repeat (TimingConfig.host_beside, regress.at_host_speed)
# find the host-paced plant that the row loop did not (lease 19: CuPy's eager +24.8% [-6.2%, +66.2%])? The two
# host-paced scenarios, CuPy's eager planted 15% slower, --host-covariate, the budget short enough to finish.
# Every other row is unchanged: none may be called different. $1: the regress budget in seconds; $2: the commit.
set -u
export PYTHONUNBUFFERED=1
O=/tmp/L20; mkdir -p $O/results
cd /tmp/L20tree
start=$(date +%s)
echo "start $(date -u +%FT%TZ) at ${2:-unnamed}" > $O/steps.log
nvidia-smi > $O/nvidia-smi.txt 2>&1
python3 -m harness regress --baseline-tree . --candidate-tree . --candidate-env TRIPTYCH_FAULT=launch_overhead:cupy:slow15:eager \
  --scenarios launch_overhead,sync_points --host-covariate --pairs 4 --max-pairs 10 --budget ${1:-150} \
  --out $O/results/planted > $O/planted.log 2>&1
echo "planted exit $? after $(( $(date +%s) - start )) s" >> $O/steps.log
echo done >> $O/steps.log
