#!/usr/bin/env bash
# poll.sh DIR WAIT PREFIX: wait up to WAIT s for a line of DIR/steps.log to start with PREFIX (default "done"),
# print the step log and the last lines of each log under DIR, and copy DIR as $OUT/<its name>.tgz.
D=$1
for i in $(seq 1 "${2:-500}"); do grep -q "^${3:-done}" "$D/steps.log" 2>/dev/null && break; sleep 1; done
cat "$D/steps.log"; for f in $(find "$D" -name '*.log' ! -name steps.log | sort); do echo "== $f"; tail -n 8 "$f"; done
tar czf "$OUT/$(basename "$D").tgz" -C "$D" . 2>/dev/null; ls -la "$OUT"
