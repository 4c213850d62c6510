#!/usr/bin/env bash
# Lease 15 (issue 51), started detached from a copy under /tmp (/tmp/L15tree): the cuts made after lease 12's
# profile (the compiled-Python folder, the mapped reference, data_parallel's transpose in copy_, the CuPy store's
# stop and the parallel group close), on a GPU host. First lease 12's profile command at this tree: donation,
# data_parallel and dlpack_handoff at four processes under py-spy, seed 20261207, the like-for-like "after".
# Then, if the device time left allows, the same run without py-spy, for its wall time. The first run fills the
# compiled-Python folder; the second reads it, as a user's second run would.
# $1: seconds of device time left when it starts; $2: the commit the copy is of. Carry scratch/lease and
# scratch/wheels.
set -u
export PYTHONUNBUFFERED=1
O=/tmp/L15; mkdir -p $O/prof $O/plain
cd /tmp/L15tree
start=$(date +%s)
left() { echo $(( ${1:-600} - ($(date +%s) - start) - 45 )); }
echo "start $(date -u +%FT%TZ) at ${2:-unnamed}" > $O/steps.log
nvidia-smi > $O/nvidia-smi.txt 2>&1
python3 -m pip install -q --no-index --no-deps --target /tmp/pyspy scratch/wheels/py_spy-*.whl >> $O/steps.log 2>&1
P=$(left "$1"); [ $P -gt 420 ] && P=420
echo "profile timeout $P s" >> $O/steps.log
timeout $P /tmp/pyspy/bin/py-spy record --nonblocking --idle --subprocesses -r 100 -f raw -o $O/prof/pyspy_raw.txt -- \
  python3 -m harness compare --scenarios donation,data_parallel,dlpack_handoff --processes 4 --no-report \
  --out $O/prof --seed 20261207 > $O/prof/compare.log 2>&1
echo "profile exit $? after $(( $(date +%s) - start )) s" >> $O/steps.log
P=$(left "$1")
echo "plain timeout $P s" >> $O/steps.log
if [ $P -ge 150 ]; then
  timeout $P python3 -m harness compare --scenarios donation,data_parallel,dlpack_handoff --processes 4 --no-report \
    --out $O/plain --seed 20261207 > $O/plain/compare.log 2>&1
  echo "plain exit $? after $(( $(date +%s) - start )) s" >> $O/steps.log
fi
gzip -f $O/prof/pyspy_raw.txt 2>/dev/null
echo done >> $O/steps.log
