"""Trust the clock: the harness's device-done medians against the frameworks' own benchmark tools.

For a few fixed device-bound kernels (a float32 GEMM, a large elementwise add, a large reduction),
each framework's worker times the kernel with the harness (wall clock with a full synchronize per
call) and with its own tool in the same process, like for like: one call timed alone
(torch.utils.benchmark's Timer.timeit(1), between the Timer's own synchronizes; cupyx.profiler.benchmark's
device events around each call). On a GPU the two must agree within 3%; JAX has no tool of its own.
Shown beside them, not judged: the harness's device-event median, and torch's blocked_autorange, which
runs ~100 calls back to back per measurement. On the H200 a GPU that idles between synchronized calls
ran a 4096 GEMM 2-3.5% slower than back to back (CUDA events; 2026-12-02): a device effect that any
caller who synchronizes after each call pays, not a fault of either clock.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

from harness import worker as W

AGREE = 0.03


def run_selfcheck(frameworks: list[str], out: Path | None) -> int:
    from rich.table import Table

    from harness.report import make_console
    from harness.machine import host_env
    from harness.results import write_atomic

    console = make_console()
    table = Table(title="selfcheck: harness device-done median vs the framework's own tool", show_lines=False)
    columns = ("framework", "kernel", "harness", "IQR", "events", "own tool", "tool median", "difference", "verdict",
               "tool back-to-back")
    for c in columns:
        table.add_column(c)

    def note_row(fw: str, verdict: str) -> None:  # a framework with no kernel rows: only its verdict
        cells = ["—"] * len(columns)
        cells[0], cells[columns.index("verdict")] = fw, verdict
        table.add_row(*cells)

    rows: list[dict[str, Any]] = []
    frameworks_env: dict[str, Any] = {}
    ok = True
    for fw in frameworks:
        w = W.ProcessWorker(fw)
        try:
            info = w.request("hello", timeout=600)
            frameworks_env[fw] = {k: info.get(k) for k in ("available", "why", "env")}
            if not info["available"]:
                note_row(fw, f"skipped: {info['why']}")
                continue
            result = w.request("selfcheck", timeout=900)
        except (W.WorkerError, W.WorkerLost) as e:
            note_row(fw, f"[red]{e}[/red]")
            ok = False
            continue
        finally:
            w.close()
        ok &= _add_rows(fw, result, table, rows)
    console.print(table)
    if out is not None:
        import datetime as dt

        doc = {"schema": "triptych.selfcheck/1", "created": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
               "size": "selfcheck", "agree_within": AGREE, "rows": rows,
               "environment": {"host": host_env(), "frameworks": frameworks_env,
                               "gpu": next((e["env"].get("gpu") for e in frameworks_env.values()
                                            if (e.get("env") or {}).get("gpu")), None)}}
        path = write_atomic(doc, out, name=f"selfcheck_{dt.datetime.now(dt.timezone.utc):%Y%m%dT%H%M%SZ}.json")
        console.print(f"selfcheck: {path}")
    return 0 if ok else 1


def _add_rows(fw: str, result: list[dict[str, Any]], table: Any, rows: list[dict[str, Any]]) -> bool:
    """One table row per kernel; False where a GPU kernel's two clocks disagree."""
    from harness.report import fmt_s

    ok = True
    for r in result:
        r["framework"] = fw
        rows.append(r)
        if r["tool_s"] is None:
            verdict = "no own tool" if r["on_gpu"] else "cpu (not judged)"
            diff = "—"
        else:
            d = r["harness_s"] / r["tool_s"] - 1
            diff = f"{100 * d:+.1f}%"
            if r["on_gpu"]:
                good = abs(d) <= AGREE
                ok &= good
                verdict = "[green]agree[/green]" if good else "[red]DISAGREE[/red]"
            else:
                verdict = "cpu (not judged)"
        table.add_row(fw, r["kernel"], fmt_s(r["harness_s"]), f"±{100 * r['harness_rel_iqr']:.1f}%",
                      fmt_s(r.get("harness_events_s")), r["tool"] or "—", fmt_s(r["tool_s"]), diff, verdict,
                      fmt_s(r.get("tool_back_to_back_s")))
    return ok
