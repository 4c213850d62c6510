#!/usr/bin/env bash
# Wait up to $1 s for /tmp/L12/steps.log to say done (or $2 to appear in it), then copy what there is under $OUT.
for i in $(seq 1 "${1:-500}"); do grep -q "^${2:-done}" /tmp/L12/steps.log 2>/dev/null && break; sleep 1; done
cat /tmp/L12/steps.log; for f in control.log planted.log prof/compare.log; do echo "== $f"; tail -n 6 /tmp/L12/$f 2>/dev/null; done
tar czf "$OUT/lease12.tgz" -C /tmp/L12 . 2>/dev/null; ls -la "$OUT"
