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
- `selfcheck` traces its fixed kernels in every framework beside their events (trace_call): the cross-check,
  in processes of its own, since a torch.profiler session leaves the process's launches slower.

Each run is wrapped in a host range named MARK + its index (Backend.kernel_trace); the trace's device
intervals are given to the range in which they start (the device runs a call's work between its
dispatch and the wait that ends the range), so that `before`'s own device work (a poison's copies) and
the warm runs count for no run. Nothing here imports a framework.
"""
from __future__ import annotations

from typing import Any, Callable, Iterable, TypedDict

from harness.backends.base import ChromeTrace, Unavailable
from harness.measure.timeline import rehearsed

MARK = "triptych kernel clock "  # + the run's index: the host range around one traced run
REPEATS = 3  # traced runs per row and process
# Seconds of untraced runs inside the trace before the traced ones: the device's load of a timed loop. Why: a
# card at its power cap clocks down under a loop, and a GEMM traced after an idle gap read about 15% under the
# loop's own events (results/journal.md).
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


def windows(trace: ChromeTrace, repeats: int) -> list[tuple[float, float]]:
    """The host ranges MARK + 0 .. MARK + (repeats - 1), [start, end) in the trace's microseconds."""
    found: dict[int, tuple[float, float]] = {}
    for e in trace.get("traceEvents", []) if isinstance(trace, dict) else []:
        name = e.get("name") if isinstance(e, dict) else None
        if (e.get("ph") == "X" and isinstance(name, str) and name.startswith(MARK) and name[len(MARK):].isdigit()
                and e.get("cat") != "gpu_user_annotation"):  # Kineto's copy of the range on the device's lane
            found.setdefault(int(name[len(MARK):]), (float(e["ts"]), float(e["ts"]) + float(e["dur"])))
    missing = [i for i in range(repeats) if i not in found]
    if missing:
        raise NoKernelClock(f"the trace holds no range '{MARK}{missing[0]}' around a traced run")
    return [found[i] for i in range(repeats)]


def per_run_s(trace: ChromeTrace, repeats: int, calls: int = 1) -> list[float]:
    """Each traced run's device time per call, in seconds: the span of the device intervals that start inside
    its range, over `calls`. A run without any is 0 (JAX folds an in-place collective at one
    rank to nothing), where the trace saw the device's work elsewhere (a `before`'s); a trace with no device
    work at all says nothing, and raises NoKernelClock."""
    ranges, intervals = windows(trace, repeats), device_intervals(trace)
    if not intervals:
        raise NoKernelClock("the trace holds no device work at all")
    got: list[list[tuple[float, float]]] = [[] for _ in ranges]
    for a, b in intervals:
        for i, (lo, hi) in enumerate(ranges):
            if lo <= a < hi:
                got[i].append((a, b))
                break
    return [span_s(g) / 1e6 / calls for g in got]


def trace_call(backend: Any, call: Callable[[], Any], repeats: int = REPEATS) -> Reading:
    """The kernel clock of a zero-argument call (selfcheck's fixed kernels), traced as measure() traces a
    variant: {"samples", "source"} or {"why"}; never raises."""
    def run() -> None:
        backend.synchronize(call())

    try:
        backend.synchronize(call())  # warm: the first call's compile or handle creation stays out of the trace
        trace, source = backend.kernel_trace(backend.synchronize, run, repeats, MARK, WARM_S)
        return {"samples": per_run_s(trace, repeats), "source": source}
    except (NoKernelClock, Unavailable) as e:
        return {"why": str(e)}
    except Exception as e:  # noqa: BLE001 - a figure beside the others, never a reason to lose them
        return {"why": f"the traced runs failed: {type(e).__name__}: {e}"[:300]}


def measure(backend: Any, impl: Any, call: Callable[[Any], Any], inputs: Any, params: Any, calls: int = 1,
            repeats: int = REPEATS) -> Reading:
    """The kernel clock of one variant in this process: {"samples": [seconds per call, one per traced run],
    "source": the tool} or {"why": ...}; never raises (a missing clock is said, never a lost row). Runs on
    fresh state (timeline.rehearsed), each traced run as a timed sample is: `before` (the impl's poison,
    outside the run's range), `calls` calls, then the wait for their outputs."""
    state = None
    try:
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

        trace, source = backend.kernel_trace(before, run, repeats, MARK, WARM_S)
        return {"samples": per_run_s(trace, repeats, calls), "source": source}
    except (NoKernelClock, Unavailable) as e:
        return {"why": str(e)}
    except Exception as e:  # noqa: BLE001 - the clock is a figure beside the row, never a reason to lose it
        return {"why": f"the traced runs failed: {type(e).__name__}: {e}"[:300]}
    finally:
        state = None
        backend.free_memory()
