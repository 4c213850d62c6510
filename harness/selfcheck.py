"""Trust the clock: the harness's device-done medians against the frameworks' own benchmark tools.

For a few fixed device-bound kernels (a float32 GEMM, a large elementwise add, a large reduction),
each framework's worker times the kernel with the harness (wall clock with a full synchronize per
call) and with its own tool (torch.utils.benchmark; cupyx.profiler.benchmark's device events) in
the same process. On a GPU the two must agree within 3%; JAX has no tool of its own to compare with.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from harness import worker as W

AGREE = 0.03


def run_selfcheck(frameworks: list[str], out: Path | None) -> int:
    from rich.table import Table

    from harness.report import fmt_s, make_console
    from harness.runner import host_env
    from harness.results import write_atomic

    console = make_console()
    table = Table(title="selfcheck: harness device-done median vs the framework's own tool", show_lines=False)
    for c in ("framework", "kernel", "harness", "IQR", "own tool", "tool median", "difference", "verdict"):
        table.add_column(c)
    rows: list[dict[str, Any]] = []
    frameworks_env: dict[str, Any] = {}
    ok = True
    for fw in frameworks:
        w = W.ProcessWorker(fw)
        try:
            info = w.request("hello", timeout=600)
            frameworks_env[fw] = {k: info.get(k) for k in ("available", "why", "env")}
            if not info["available"]:
                table.add_row(fw, "—", "—", "—", "—", "—", "—", f"skipped: {info['why']}")
                continue
            result = w.request("selfcheck", timeout=900)
        except (W.WorkerError, W.WorkerLost) as e:
            table.add_row(fw, "—", "—", "—", "—", "—", "—", f"[red]{e}[/red]")
            ok = False
            continue
        finally:
            w.close()
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
                          r["tool"] or "—", fmt_s(r["tool_s"]), diff, verdict)
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


def selfcheck_rows(fw: str) -> list[dict[str, Any]]:
    """Inside the framework's worker: both clocks on each kernel."""
    from harness import backends
    from harness.timing import SELFCHECK, measure

    b = backends.get(fw).load()
    out = []
    for name, call in b.clock_kernels().items():
        m = measure(call, b, SELFCHECK)
        tool = b.own_benchmark(call)
        out.append({"kernel": name, "on_gpu": b.on_gpu, "harness_s": m.device_done.median,
                    "harness_rel_iqr": m.device_done.rel_iqr, "tool": tool[0] if tool else None,
                    "tool_s": tool[1] if tool else None})
    b.free_memory()
    return out


__all__ = ["run_selfcheck", "selfcheck_rows", "json"]
