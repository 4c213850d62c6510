#!/usr/bin/env bash
# Wait up to $1 s for /tmp/L14/steps.log to say done (or $2 to appear in it), then copy what there is under $OUT.
for i in $(seq 1 "${1:-500}"); do grep -q "^${2:-done}" /tmp/L14/steps.log 2>/dev/null && break; sleep 1; done
cat /tmp/L14/steps.log; for f in probe14.jsonl control.log planted.log cpus.log; do echo "== $f"; tail -n 6 /tmp/L14/$f 2>/dev/null; done
tar czf "$OUT/lease14.tgz" -C /tmp/L14 . 2>/dev/null; ls -la "$OUT"
