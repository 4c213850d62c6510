#!/usr/bin/env bash
# Lease 19 (issue 51), for the next session, started detached from a copy under /tmp (/tmp/L19tree). Lease 18, which
# six refused starts left unrun: lease 17's planted and control regress, both with --host-covariate, each with up to
# 450 s, so that the control's rows reach the 6 pairs the covariate needs (lease 17's control reached 4). Decides
# whether --host-covariate can become the default: the planted run must call both plants (torch's
# h2d_pinned_non_blocking, CuPy's eager) and nothing else different, the control nothing. Read both with
# `python results/probes/host_covariate.py --looks 4 <folder>`. Then, where time is left, donation's checks.
# $1: seconds of device time left when it starts (the control's budget shrinks to fit); $2: the commit.
set -u
export PYTHONUNBUFFERED=1
O=/tmp/L19; mkdir -p $O/results
cd /tmp/L19tree
start=$(date +%s)
echo "start $(date -u +%FT%TZ) at ${2:-unnamed}" > $O/steps.log
nvidia-smi > $O/nvidia-smi.txt 2>&1
S=sync_points,launch_overhead,pinned_transfer
F="TRIPTYCH_FAULT=launch_overhead:cupy:slow15:eager,pinned_transfer:torch:slow15:h2d_pinned_non_blocking"
B=$(( (${1:-1000} - 120) / 2 )); [ $B -gt 450 ] && B=450
echo "planted budget $B s" >> $O/steps.log
python3 -m harness regress --baseline-tree . --candidate-tree . --candidate-env "$F" --scenarios $S \
  --host-covariate --pairs 4 --max-pairs 10 --budget $B --out $O/results/planted > $O/planted.log 2>&1
echo "planted exit $? after $(( $(date +%s) - start )) s" >> $O/steps.log
B=$(( ${1:-1000} - ($(date +%s) - start) - 60 )); [ $B -gt 450 ] && B=450
echo "control budget $B s" >> $O/steps.log
if [ $B -ge 150 ]; then
  python3 -m harness regress --baseline-tree . --candidate-tree . --scenarios $S \
    --host-covariate --pairs 4 --max-pairs 10 --budget $B --out $O/results/control > $O/control.log 2>&1
  echo "control exit $? after $(( $(date +%s) - start )) s" >> $O/steps.log
fi
# Step 3, where 150 s are left: donation's checks at this tree. Since cd6256c, variants judged alike share a
# verdict (harness/check/outputs.py judged_alike): torch's and JAX's in_place rows' first processes should drop
# to their second's (about 4.5 s against 0.5-0.8 s of phase_s in results/20261207T005022Z_*); since c385eb9 the
# first check of new_buffer makes one float64 pass, not two.
B=$(( ${1:-1000} - ($(date +%s) - start) ))
if [ $B -ge 150 ]; then
  python3 -m harness compare --scenarios donation --processes 2 --no-equivalence --no-report --seed 20261207 \
    --out $O/results/checks > $O/checks.log 2>&1
  echo "checks exit $? after $(( $(date +%s) - start )) s" >> $O/steps.log
fi
echo done >> $O/steps.log
