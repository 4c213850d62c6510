"""The kernel clock: what a call costs the device, read from a CUDA activity trace (CUPTI).

A row has three clocks. Host-return is what the call costs the host, device-done what the user waits for
(the host's dispatch and wake-up included), and the kernel clock what the call occupies the device: per
call, from its first kernel or copy to the end of its last, idle gaps between them included. Why: a ratio
about the device's work (a GEMM's TF32 speed-up, in place against a new buffer) must not count one
framework's dispatch; and the gaps count in all three, as CUDA events count them (a loop that reads a value
every step leaves the device idle between its kernels: that idle time is the loop's too).

- A framework with CUDA events (Backend.has_events) times it with events around every timed call.
- One without events (JAX) reads the trace its profiler collects: REPEATS untimed runs per row and process,
  after the point's timed ones (so that no profiler meets a timed call), each of `calls` back-to-back calls
  between one `before` and one wait, as a timed sample is. Inside the trace, WARM_S of the same runs come
  first: a power-capped GPU clocks down under a timed loop's load, and a run after an idle gap reads faster.
  All the rows of a request share one profiler session (measure), read once: a session's start, its trace's
  export and its parse are paid once a request, not once a row.
- `selfcheck` traces its fixed kernels in every framework beside their events (trace_call): the cross-check,
  in processes of its own, since a torch.profiler session leaves the process's launches slower.

Each run is wrapped in a host range named MARK + its index in the session, and each row's warm and traced runs
in one named ROW + the row's index (Backend.kernel_trace's annotate); the trace's device intervals are given to
the range in which they start (the device runs a call's work between its dispatch and the wait that ends the
range), so that `before`'s own device work (a poison's copies) and the warm runs count for no run. Nothing
here imports a framework.
"""
from __future__ import annotations

import bisect
from typing import Any, Callable, Iterable, Sequence, TypedDict

from harness.backends.base import KERNEL_RANGES, Annotate, ChromeTrace, Unavailable, warm
from harness.measure.timeline import rehearsed

MARK = KERNEL_RANGES + "clock "  # + the run's index in the session: the host range around one traced run
ROW = KERNEL_RANGES + "row "  # + the row's index in the session: the range around its warm and traced runs
REPEATS = 3  # traced runs per row and process
# Seconds of untraced runs inside the trace before the traced ones: the device's load of a timed loop. Why: a
# card at its power cap clocks down under a loop, and a GEMM traced after an idle gap read about 15% under the
# loop's own events; with none, a TF32 GEMM read 8% fast after its loop, with 0.05 s it wavered (results/journal.md).
WARM_S = 0.2
# Kineto's (torch.profiler) categories of device work in a Chrome trace
KINETO_DEVICE = ("kernel", "gpu_memcpy", "gpu_memset")


class NoKernelClock(Exception):
    """No kernel clock for this row; str(self) is the one-line reason."""


class Reading(TypedDict, total=False):
    """A kernel clock read by traced runs: seconds per call, one per run, and the tool; or why none."""

    samples: list[float]
    source: str
    why: str

def span_s(intervals: Iterable[tuple[float, float]]) -> float:
    """From the first start to the last end of [start, end) intervals; 0 for none."""
    got = list(intervals)
    return max(b for _, b in got) - min(a for a, _ in got) if got else 0.0


def device_intervals(trace: ChromeTrace) -> list[tuple[float, float]]:
    """The device's work in a Chrome trace, [start, end) in the trace's microseconds: Kineto's kernels,
    copies and memsets (torch.profiler); jax.profiler's events on a '/device:GPU' process's 'Stream'
    threads; without a GPU, XLA's ops on the CPU client's threads (what XLA:CPU runs as the device)."""
    events = trace.get("traceEvents", []) if isinstance(trace, dict) else []
    work = [e for e in events if isinstance(e, dict) and e.get("ph") == "X" and "ts" in e and "dur" in e]
    spans = [e for e in work if e.get("cat") in KINETO_DEVICE]
    if not spans:
        procs = {e.get("pid"): (e.get("args") or {}).get("name", "") for e in events
                 if isinstance(e, dict) and e.get("ph") == "M" and e.get("name") == "process_name"}
        threads = {(e.get("pid"), e.get("tid")): (e.get("args") or {}).get("name", "") for e in events
                   if isinstance(e, dict) and e.get("ph") == "M" and e.get("name") == "thread_name"}
        gpu = {pid for pid, name in procs.items() if str(name).startswith("/device:GPU")}
        spans = [e for e in work if e.get("pid") in gpu and "Stream" in str(threads.get((e["pid"], e.get("tid")), ""))]
        if not gpu:
            spans = [e for e in work if isinstance(e.get("args"), dict) and "hlo_op" in e["args"]]
    return [(float(e["ts"]), float(e["ts"]) + float(e["dur"])) for e in spans]


def ranges(trace: ChromeTrace, prefix: str = MARK) -> dict[int, tuple[float, float]]:
    """Every host range named prefix + an index, {index: [start, end)} in the trace's microseconds."""
    found: dict[int, tuple[float, float]] = {}
    for e in trace.get("traceEvents", []) if isinstance(trace, dict) else []:
        name = e.get("name") if isinstance(e, dict) else None
        if (isinstance(name, str) and e.get("ph") == "X" and name.startswith(prefix) and name[len(prefix):].isdigit()
                and e.get("cat") != "gpu_user_annotation"):  # Kineto's copy of the range on the device's lane
            found.setdefault(int(name[len(prefix):]), (float(e["ts"]), float(e["ts"]) + float(e["dur"])))
    return found


def _pick(found: dict[int, tuple[float, float]], runs: int | range, prefix: str) -> list[tuple[float, float]]:
    wanted = range(runs) if isinstance(runs, int) else runs
    missing = [i for i in wanted if i not in found]
    if missing:
        raise NoKernelClock(f"the trace holds no range '{prefix}{missing[0]}' around a traced run")
    return [found[i] for i in wanted]


def windows(trace: ChromeTrace, runs: int | range, prefix: str = MARK) -> list[tuple[float, float]]:
    """The host ranges prefix + i for i in runs (an int n: 0 .. n - 1), [start, end) in the trace's microseconds."""
    return _pick(ranges(trace, prefix), runs, prefix)


class Read:
    """A trace read once (its runs' and rows' ranges, its device intervals by start), so that each row of a
    session costs a lookup, not a pass over every event of every row (per_run_s)."""

    def __init__(self, trace: ChromeTrace) -> None:
        self.runs, self.rows = ranges(trace), ranges(trace, ROW)
        self.intervals = sorted(device_intervals(trace))
        self.starts = [a for a, _ in self.intervals]

    def per_run_s(self, runs: int | range, calls: int = 1, row: int | None = None) -> list[float]:
        """Each traced run's device time per call, in seconds: the span of the device intervals that start
        inside its range, over `calls`. A run without any is 0 (JAX folds an in-place collective at one rank to
        nothing) where the trace saw the device's work elsewhere: in the row's range ROW + row where one is
        named (its warm runs, a `before`'s copies), else anywhere; a trace with no device work there says
        nothing, and raises NoKernelClock."""
        windows_, intervals = _pick(self.runs, runs, MARK), self.intervals
        if row is not None:
            (lo, hi), = _pick(self.rows, range(row, row + 1), ROW)
            intervals = intervals[bisect.bisect_left(self.starts, lo):bisect.bisect_left(self.starts, hi)]
        if not intervals:
            raise NoKernelClock("the trace holds no device work at all" + (" in this row's runs" if row is not None else ""))
        got: list[list[tuple[float, float]]] = [[] for _ in windows_]
        for a, b in intervals:
            for i, (lo, hi) in enumerate(windows_):
                if lo <= a < hi:
                    got[i].append((a, b))
                    break
        return [span_s(g) / 1e6 / calls for g in got]


def per_run_s(trace: ChromeTrace, runs: int | range, calls: int = 1, row: int | None = None) -> list[float]:
    """Read.per_run_s of one trace read for one row."""
    return Read(trace).per_run_s(runs, calls, row)


def traced_runs(annotate: Annotate, before: Callable[[], None], run: Callable[[], None], runs: range,
                warm_s: float | None = None) -> None:
    """Inside a trace session: before() and run() until warm_s (default WARM_S, read at the call, so that a
    probe that sets it is heard) have passed, then for each i of runs before()
    and run() inside the range MARK + i."""
    warm(before, run, WARM_S if warm_s is None else warm_s)
    for i in runs:
        before()
        with annotate(f"{MARK}{i}"):
            run()


def _why(e: Exception) -> Reading:
    if isinstance(e, (NoKernelClock, Unavailable)):
        return {"why": str(e)}
    return {"why": f"the traced runs failed: {type(e).__name__}: {e}"[:300]}


def trace_call(backend: Any, call: Callable[[], Any], repeats: int = REPEATS) -> Reading:
    """The kernel clock of a zero-argument call (selfcheck's fixed kernels), traced as measure() traces a
    variant: {"samples", "source"} or {"why"}; never raises."""
    def run() -> None:
        backend.synchronize(call())

    try:
        backend.synchronize(call())  # warm: the first call's compile or handle creation stays out of the trace
        trace, source = backend.kernel_trace(lambda annotate: traced_runs(annotate, backend.synchronize, run,
                                                                          range(repeats)))
        return {"samples": per_run_s(trace, repeats), "source": source}
    except Exception as e:  # noqa: BLE001 - a figure beside the others, never a reason to lose them
        return _why(e)


def measure(backend: Any, impl: Any, variants: Sequence[tuple[Callable[[Any], Any], int]], inputs: Any, params: Any,
            repeats: int = REPEATS, warm_s: float | None = None) -> list[Reading]:
    """The kernel clocks of a point's variants in this process, one profiler session for them all: per
    (call, calls) of variants {"samples": [seconds per call, one per traced run], "source": the tool} or
    {"why": ...}; never raises (a missing clock is said, never a lost row; one row's failure is its own).
    Each runs on fresh state (timeline.rehearsed), each traced run as a timed sample is: `before` (the impl's
    poison, outside the run's range), `calls` calls, then the wait for their outputs; its state is freed
    before the next row's is made. warm_s: each row's warm runs before its traced ones (None: WARM_S)."""
    failed: dict[int, Reading] = {}

    def body(annotate: Annotate) -> None:
        for j, (call, calls) in enumerate(variants):
            try:
                _trace_row(annotate, backend, impl, call, calls, inputs, params, j, repeats, warm_s)
            except Exception as e:  # noqa: BLE001 - the clock is a figure beside the row, never a reason to lose it
                failed[j] = _why(e)
            try:
                backend.free_memory()
            except Exception as e:  # noqa: BLE001 - a sticky device error: this row's, and the later rows' own
                failed.setdefault(j, _why(e))

    try:
        trace, source = backend.kernel_trace(body)
        read = Read(trace)
    except Exception as e:  # noqa: BLE001 - likewise: no trace, no clock; a row that failed first keeps its reason
        return [failed.get(j) or _why(e) for j in range(len(variants))]
    out: list[Reading] = []
    for j, (_, calls) in enumerate(variants):
        try:
            out.append(failed.get(j) or {"samples": read.per_run_s(range(j * repeats, (j + 1) * repeats), calls, row=j),
                                         "source": source})
        except NoKernelClock as e:
            out.append(_why(e))
    return out


def _trace_row(annotate: Annotate, backend: Any, impl: Any, call: Callable[[Any], Any], calls: int, inputs: Any,
               params: Any, j: int, repeats: int, warm_s: float | None = None) -> None:
    """Row j's warm and traced runs inside the session, in the range ROW + j; its state lives in this frame alone,
    so that the caller's free_memory finds it unreferenced."""
    state = rehearsed(backend, impl, call, inputs, params)
    poison = getattr(impl, "poison", None)

    def before() -> None:
        if poison is not None:
            poison(state)
        backend.synchronize(state)

    def run() -> None:
        out = None
        for _ in range(calls):
            out = call(state)
        backend.synchronize(out)

    with annotate(f"{ROW}{j}"):
        traced_runs(annotate, before, run, range(j * repeats, (j + 1) * repeats), warm_s)
