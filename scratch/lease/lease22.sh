#!/usr/bin/env bash
# Lease 22 (issue 51), for the next session, started detached from a copy under /tmp (/tmp/L22tree). Lease 19's
# planted and control regress again, now that --host-covariate regresses the pairs on each process's median of
# the short loops before its repeats (24fe168; the loop twice, the faster kept, since eb48d87) and added pairs go
# to the cheapest points first (d11300c): offline on lease 21's eight pairs of launch_overhead it called CuPy's
# eager plant +18.9% [+11.8%, +26.4%] and nothing else. The planted run must call both plants (torch's
# h2d_pinned_non_blocking, CuPy's eager) and nothing else different, exit 1; the control nothing, exit 0. Read both
# with `python results/probes/host_covariate.py --looks 4 <folder>`.
# Budgets of 540 s, not lease 19's 450: a run overran its budget by about 35 s there, so each still ends inside one
# ten-minute call (issue 51's must-show), and the planted run's last stage reaches launch_overhead's eighth pair.
# Before the copy: keep results/20261206T221108Z_nvidia-h100-80gb-hbm3_full.json in the index (git add -f) when the
# rest of results/ is left out, so that on an H100 the forecast says before the first pair what the budget buys.
# $1: the device seconds the script may spend: the device time left at its start less a reserve (300 s) for the
# polls and the give-back; the control's budget shrinks to fit, and step 3 runs only where enough is left. $2: the commit.
set -u
export PYTHONUNBUFFERED=1
O=/tmp/L22; mkdir -p $O/results
cd /tmp/L22tree
start=$(date +%s)
echo "start $(date -u +%FT%TZ) at ${2:-unnamed}" > $O/steps.log
nvidia-smi > $O/nvidia-smi.txt 2>&1
S=sync_points,launch_overhead,pinned_transfer
F="TRIPTYCH_FAULT=launch_overhead:cupy:slow15:eager,pinned_transfer:torch:slow15:h2d_pinned_non_blocking"
B=$(( (${1:-1000} - 120) / 2 )); [ $B -gt 540 ] && B=540
echo "planted budget $B s" >> $O/steps.log
python3 -m harness regress --baseline-tree . --candidate-tree . --candidate-env "$F" --scenarios $S \
  --host-covariate --pairs 4 --max-pairs 10 --budget $B --out $O/results/planted > $O/planted.log 2>&1
echo "planted exit $? after $(( $(date +%s) - start )) s" >> $O/steps.log
B=$(( ${1:-1000} - ($(date +%s) - start) - 60 )); [ $B -gt 540 ] && B=540
echo "control budget $B s" >> $O/steps.log
if [ $B -ge 150 ]; then
  python3 -m harness regress --baseline-tree . --candidate-tree . --scenarios $S \
    --host-covariate --pairs 4 --max-pairs 10 --budget $B --out $O/results/control > $O/control.log 2>&1
  echo "control exit $? after $(( $(date +%s) - start )) s" >> $O/steps.log
fi
# Step 3, where 200 s of $1 are left after the control (each run ends 35-40 s past its budget, so about $1 >= 1420):
# what the full preset's 0.05 s of time-based warm-up buys (lease 19: first call and warm-up were 27% of a pair's
# requests). At 200-240 s, pinned_transfer gets three or four pairs. The candidate warms up by count alone (TRIPTYCH_TIMING, 1b2f4d0); a row
# called different needs the warm-up, and each side's files give a pair's cost both ways.
B=$(( ${1:-1000} - ($(date +%s) - start) - 60 )); [ $B -gt 240 ] && B=240
echo "warm-up budget $B s" >> $O/steps.log
if [ $B -ge 200 ]; then
  python3 -m harness regress --baseline-tree . --candidate-tree . --candidate-env 'TRIPTYCH_TIMING={"warmup_s": 0}' \
    --scenarios pinned_transfer --pairs 4 --max-pairs 4 --budget $B --out $O/results/warmup > $O/warmup.log 2>&1
  echo "warm-up exit $? after $(( $(date +%s) - start )) s" >> $O/steps.log
fi
echo done >> $O/steps.log
