#!/usr/bin/env bash
# Lease 26 (issue 51), started detached from a copy under /tmp (/tmp/L26tree).
# Step 1: why the host's loop before each repeat lifts a 4 KiB copy by 12-17% (lease 25): the copy after the loop,
# after a spin and after a sleep as long (results/probes/loop_gap.py, under a minute). A lift after the spin and
# the sleep too says the idle time does it; one after the loop alone, the loop's own work.
# Step 2, where 600 s are left: the default run at four processes, every default scenario, with its report, as a
# user runs it (must-show 1), at a tree where pinned_transfer alone took 102.6 s at four processes (lease 23); read
# it with results/probes/by_process.py. Its first two processes do what a two-process run's do, so it also gives
# today's two-process run. --budget bounds it between scenarios only: a scenario started runs through; at up to
# 1,400 s it can finish (two processes took 778 s at 2b946ee; a later process costs about half a first).
# The device tool carries at most 64 MiB of tree, and results/ is more: before the call, un-index results/ (`git rm -r
# -q --cached results`, `/results/` in .git/info/exclude) and force-add the compare files the forecast reads
# (results/20261206T221108Z_nvidia-h100-80gb-hbm3_full.json, and results/20261207T213031Z_..._full.json for
# pinned_transfer at four processes) and step 1's probe, results/probes/loop_gap.py, which is not carried
# otherwise; after it, `git reset -q results` and drop the exclude line. In lease 25 the forecast had the first
# file alone, an older one without kernel_s: it said 3-4 pairs "or more" where rows got 6-12.
# $1: the device seconds the script may spend (the device time left at its start less a reserve); $2: the commit.
set -u
export PYTHONUNBUFFERED=1
O=/tmp/L26; mkdir -p $O/results
cd /tmp/L26tree || exit 1
start=$(date +%s)
left() { echo $(( ${1:-1000} - ($(date +%s) - start) )); }
echo "start $(date -u +%FT%TZ) at ${2:-unnamed}" > $O/steps.log
nvidia-smi > $O/nvidia-smi.txt 2>&1
[ -f results/probes/loop_gap.py ] || echo "loop_gap.py was not carried" >> $O/steps.log
timeout 120 python3 results/probes/loop_gap.py $O/loop_gap.jsonl 8 300 > $O/loop_gap.log 2>&1
echo "loop_gap exit $? after $(( $(date +%s) - start )) s" >> $O/steps.log
B=$(( $(left $1) - 150 )); [ $B -gt 1400 ] && B=1400
echo "default at four processes: budget $B s" >> $O/steps.log
if [ $B -ge 400 ]; then
  python3 -m harness compare --processes 4 --budget $B --out $O/results/default4 > $O/default4.log 2>&1
  echo "default4 exit $? after $(( $(date +%s) - start )) s" >> $O/steps.log
fi
echo done >> $O/steps.log
