"""Trust the clock: the harness's device-done medians against the frameworks' own benchmark tools.

For a few fixed device-bound kernels (a float32 GEMM, a large elementwise add, a large reduction),
each framework's worker times the kernel with the harness (wall clock with a full synchronize per
call) and with its own tool in the same process, like for like: one call timed alone
(Backend.own_benchmark: a tool that times one call between its own synchronizes, or with device events
around each call); a framework with no tool of its own gives none. Shown beside them, not judged: the
harness's device-event median, the CUPTI trace's time of the same kernel (the kernel clock's reading
where a framework has no events: harness/measure/kernel_clock.py), and torch's blocked_autorange, which runs ~100 calls back to back per
measurement (a GPU that idles between synchronized calls runs a GEMM a few percent slower than back to
back: a device effect that any caller who synchronizes after each call pays, not a fault of either clock).

The agreement is a measured figure, not one process's coin toss: PROCESSES worker processes each give a
ratio harness / tool per kernel, and Student's t interval (95%, n - 1 degrees of freedom) on their logs
bounds the true ratio. Most of the spread is between processes (harness/measure/noise.py); on a lent GPU host torch's
ratio moved by ~1.5-2% (standard deviation) from one process to the next, so four processes give a
half-width of ~3%. The verdict on a GPU:
- "disagree": the whole interval lies more than AGREE (3%) from 1. A true difference within 3% is called
  so with probability at most 2.5%.
- "too noisy": the interval's half-width exceeds MAX_HALF (5%): the run cannot tell a good clock from a
  bad one, and does not pass.
- "agree" otherwise. An agreeing row's measured geometric-mean ratio is within (1 + AGREE)(1 + MAX_HALF)
  - 1 = 8.2% of 1, so a clock measured 10% off never passes.
While a GPU row is "too noisy", one more process is added, up to MAX_PROCESSES, as Pinpoint adds attempts
while its answer is unknown: a shared host's speed drifts within a minute, so four processes are sometimes
too few to decide. Every row is judged again at each look. The measured bound above holds at every look;
the chances grow with the looks: for a true difference within 3%, "disagree" has at most 2.5% a look
(about 2.5% over all of them, simulated); a clock truly 10% off reads "agree" with about 2-3% at four
processes and 3-8% with the added ones, where the processes spread by 3-4% (simulated).
"""
from __future__ import annotations

import datetime as dt
import math
from pathlib import Path
from typing import Any, Sequence

import numpy as np
from rich.table import Table

from harness.workers import worker as W
from harness.measure.machine import host_env
from harness.report.report import fmt_s, make_console
from harness.results.results import write_atomic

AGREE = 0.03  # the systematic difference tolerated between the two clocks
MAX_HALF = 0.05  # the widest interval (relative half-width) that can still pass
PROCESSES = 4
MAX_PROCESSES = 10  # processes at most while a row is too noisy
CONFIDENCE = 0.95
SUMMED = ("harness_s", "harness_events_s", "trace_s", "tool_s", "tool_back_to_back_s")  # medians over the processes


def agreement(ratios: Sequence[float], confidence: float = CONFIDENCE) -> dict[str, Any]:
    """The verdict on per-process ratios harness / tool (the module's docstring): geometric mean, t interval."""
    from scipy.stats import t as student_t  # heavy (~0.3 s): only selfcheck's verdict needs it

    logs = np.log(np.asarray(ratios, dtype=np.float64))
    n = logs.size
    mean = float(logs.mean()) if n else math.nan
    out: dict[str, Any] = {"ratios": [float(r) for r in ratios], "ratio": math.exp(mean), "lo": None, "hi": None,
                           "half_width": None}
    if n < 2:
        out["verdict"] = "too few processes"
        return out
    half = float(student_t.ppf(0.5 + confidence / 2, n - 1)) * float(logs.std(ddof=1)) / math.sqrt(n)
    out.update(lo=math.exp(mean - half), hi=math.exp(mean + half), half_width=math.expm1(half))
    band = math.log1p(AGREE)
    if abs(mean) - half > band:
        out["verdict"] = "disagree"
    elif math.expm1(half) > MAX_HALF:
        out["verdict"] = "too noisy"
    else:
        out["verdict"] = "agree"
    return out


def summarize(per_process: list[list[dict[str, Any]]], fw: str) -> list[dict[str, Any]]:
    """One row per kernel from each process's rows (handlers.selfcheck): medians, ratios, verdict."""
    rows = []
    for kernel in [r["kernel"] for r in per_process[0]]:
        runs = [next(r for r in proc if r["kernel"] == kernel) for proc in per_process]
        first = runs[0]
        row: dict[str, Any] = {"framework": fw, "kernel": kernel, "on_gpu": first["on_gpu"], "tool": first["tool"],
                               "processes": len(runs)}
        for key in SUMMED:
            vals = [r.get(key) for r in runs if r.get(key) is not None]
            row[key] = float(np.median(vals)) if vals else None
        row["harness_rel_iqr"] = float(np.median([r["harness_rel_iqr"] for r in runs]))
        if first["tool_s"] is None:
            row["verdict"] = "no own tool" if first["on_gpu"] else "cpu (not judged)"
        else:
            row.update(agreement([r["harness_s"] / r["tool_s"] for r in runs]))
            if not first["on_gpu"]:
                row["verdict"] = "cpu (not judged)"
        rows.append(row)
    return rows


def measure(fw: str, processes: int = PROCESSES, max_processes: int = MAX_PROCESSES
            ) -> tuple[dict[str, Any], list[dict[str, Any]], list[list[dict]]]:
    """(hello's answer, summarized rows, each process's raw rows): the selfcheck in `processes` fresh
    workers, one after another (one GPU), then one more while a judged row is too noisy, up to
    `max_processes`. Raises WorkerError / WorkerLost as the workers do."""
    info: dict[str, Any] = {}
    per_process: list[list[dict[str, Any]]] = []
    rows: list[dict[str, Any]] = []
    while len(per_process) < max(processes, 1) or (len(per_process) < max_processes and _too_noisy(rows)):
        w = W.ProcessWorker(fw)
        try:
            answer = w.request("hello", timeout=600)
            info = info or answer
            if not answer["available"]:
                if per_process:  # it ran in the processes before: gone now is a failure, not a skip
                    raise W.WorkerError(f"{fw} became unavailable after {len(per_process)} process(es): "
                                        f"{answer.get('why', '')}")
                return answer, [], []
            per_process.append(w.request("selfcheck", timeout=900))
        finally:
            w.close()
        rows = summarize(per_process, fw) if len(per_process) >= processes else []
    return info, rows, per_process


def _too_noisy(rows: list[dict[str, Any]]) -> bool:
    return any(r["on_gpu"] and r.get("verdict") == "too noisy" for r in rows)


def run_selfcheck(frameworks: list[str], out: Path | None, processes: int = PROCESSES,
                  max_processes: int = MAX_PROCESSES) -> int:


    console = make_console()
    table = Table(title=f"selfcheck: harness device-done median vs the framework's own tool, {processes} processes "
                        f"(up to {max_processes} while a row is too noisy)",
                  show_lines=False)
    columns = ("framework", "kernel", "harness", "IQR", "events", "CUPTI trace", "own tool", "tool median", "harness/tool",
               f"{CONFIDENCE:.0%} interval", "processes", "verdict", "tool back-to-back")
    for c in columns:
        table.add_column(c)

    def note_row(fw: str, verdict: str) -> None:  # a framework with no kernel rows: only its verdict
        cells = ["—"] * len(columns)
        cells[0], cells[columns.index("verdict")] = fw, verdict
        table.add_row(*cells)

    rows: list[dict[str, Any]] = []
    raw: dict[str, list[list[dict[str, Any]]]] = {}
    frameworks_env: dict[str, Any] = {}
    ok = True
    for fw in frameworks:
        try:
            info, fw_rows, raw[fw] = measure(fw, processes, max_processes)
        except (W.WorkerError, W.WorkerLost) as e:
            note_row(fw, f"[red]{e}[/red]")
            ok = False
            continue
        frameworks_env[fw] = {k: info.get(k) for k in ("available", "why", "env")}
        if not info["available"]:
            note_row(fw, f"skipped: {info['why']}")
            continue
        ok &= _add_rows(fw_rows, table, rows)
    console.print(table)
    if out is not None:
        doc = {"schema": "triptych.selfcheck/2", "created": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
               "size": "selfcheck", "agree_within": AGREE, "max_half_width": MAX_HALF, "confidence": CONFIDENCE,
               "processes": processes, "max_processes": max_processes, "rows": rows, "per_process": raw,
               "environment": {"host": host_env(), "frameworks": frameworks_env,
                               "gpu": next((e["env"].get("gpu") for e in frameworks_env.values()
                                            if (e.get("env") or {}).get("gpu")), None)}}
        path = write_atomic(doc, out, name=f"selfcheck_{dt.datetime.now(dt.timezone.utc):%Y%m%dT%H%M%SZ}.json")
        console.print(f"selfcheck: {path}")
    return 0 if ok else 1


def _add_rows(result: list[dict[str, Any]], table: Any, rows: list[dict[str, Any]]) -> bool:
    """One table row per kernel; False where a GPU kernel's two clocks do not agree."""
    colour = {"agree": "green", "disagree": "red", "too noisy": "red", "too few processes": "red"}
    ok = True
    for r in result:
        rows.append(r)
        judged = r["on_gpu"] and r["tool_s"] is not None
        ok &= not judged or r["verdict"] == "agree"
        ratio = "—" if r.get("ratio") is None else f"{r['ratio']:.3f}"
        interval = "—" if r.get("lo") is None else f"{r['lo']:.3f}–{r['hi']:.3f}"
        verdict = f"[{colour[r['verdict']]}]{r['verdict']}[/{colour[r['verdict']]}]" if judged else r["verdict"]
        table.add_row(r["framework"], r["kernel"], fmt_s(r["harness_s"]), f"±{100 * r['harness_rel_iqr']:.1f}%",
                      fmt_s(r.get("harness_events_s")), fmt_s(r.get("trace_s")), r["tool"] or "—", fmt_s(r["tool_s"]),
                      ratio, interval,
                      str(r["processes"]), verdict,
                      fmt_s(r.get("tool_back_to_back_s")))
    return ok
