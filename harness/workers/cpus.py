"""Which CPUs a run's processes may use, and how much CPU time the machine took from the run.

pyperf pins its workers to chosen CPUs (its --affinity option) so that a benchmark runs where the
machine is quiet. --cpus auto does that for a whole run: it times a pure-Python loop on every CPU it
may use, in rounds spread over a few seconds, drops a CPU that is slow in every round, and every
process the run starts (workers, rank processes) inherits the CPUs kept. --cpus 2-5,8 names them;
--cpus all, the default, keeps every CPU.

All is the default because auto did not help on the lent GPU machine: its CPUs ran the loop at two
speeds, in spells of milliseconds, each CPU on its own, so no CPU was slower than another for long
(docs/design/host_speed.md). The sweep is still a record of the host's state as a run starts.

An interleaved regress with --same-cpu goes further: a pair's two workers of a framework live on one CPU
(harness/run/interleave.py pair_cpu), so that the two sides read the same CPU's speed.

Steal time is the time the hypervisor ran something else while this machine's CPUs wanted to run:
the run records its share of the CPU time over the whole run (/proc/stat), Linux only.
"""
from __future__ import annotations

import os
import re
import statistics
import time
from typing import Any, Callable

from harness.measure.host_loop import python_loop_s

ROUNDS = 6  # sweeps over the CPUs; each times the loop best of 2 (~15-30 ms a CPU)
GAP_S = 0.5  # between rounds: longer than a lent host's slow spells (docs/design/host_speed.md)
SLOWER = 1.25  # a CPU counts as slow when even its best round is this much over the fastest CPU's
MIN_KEEP = 4  # JAX's and CUDA's threads need room: never fewer CPUs than this (or all there are)


class CpuSpecError(ValueError):
    """A --cpus value that names no usable CPU; the message is one line for the user."""


def allowed() -> list[int]:
    return sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []


def parse(spec: str) -> str | list[int]:
    """'auto', 'all', or a list like '0-3,8' (checked against the CPUs this process may use)."""
    spec = spec.strip()
    if spec in ("auto", "all"):
        return spec
    cpus: set[int] = set()
    for part in spec.split(","):
        m = re.fullmatch(r"\s*(\d+)(?:-(\d+))?\s*", part)
        if not m or (m[2] and int(m[2]) < int(m[1])):
            raise CpuSpecError(f"--cpus {spec!r}: use auto, all, or CPU numbers such as 0-3,8")
        lo, hi = int(m[1]), int(m[2] or m[1])
        cpus.update(range(lo, min(hi, lo + (os.cpu_count() or 1)) + 1))  # a range past the machine fails below
    may = set(allowed())
    if not may:
        raise CpuSpecError(f"--cpus {spec!r}: this platform cannot pin processes to CPUs (use all)")
    if not cpus <= may:
        raise CpuSpecError(f"--cpus {spec!r}: this process may use CPUs {_ranges(sorted(may))} only")
    return sorted(cpus)


def sweep(cpus: list[int], rounds: int = ROUNDS, gap_s: float = GAP_S) -> dict[int, list[float]]:
    """The Python loop's best time on each CPU, once per round, this process pinned to it in turn."""
    before = os.sched_getaffinity(0)
    times: dict[int, list[float]] = {c: [] for c in cpus}
    try:
        for k in range(rounds):
            if k:
                time.sleep(gap_s)
            for c in cpus:
                os.sched_setaffinity(0, {c})
                times[c].append(python_loop_s(2))
    finally:
        os.sched_setaffinity(0, before)
    return times


def choose(times: dict[int, list[float]]) -> tuple[list[int], str]:
    """(the CPUs to keep, why): all but those slow in every round (best round over SLOWER x the best)."""
    top = {c: min(v) for c, v in times.items()}
    best = min(top.values())
    fast = sorted(c for c, m in top.items() if m <= best * SLOWER)
    if len(fast) == len(top):
        return sorted(top), f"no CPU slower than the fastest by {SLOWER - 1:.0%} in every round: all kept"
    if len(fast) < MIN_KEEP:
        fast = sorted(sorted(top, key=top.get)[:MIN_KEEP])
    slow = sorted(set(top) - set(fast))
    return fast, (f"CPUs {_ranges(slow)} ran the loop {statistics.median(top[c] for c in slow) / best:.2f}x "
                  f"slower than the fastest in every round: kept {_ranges(fast)}")


def not_placed(spec: str | list[int]) -> dict[str, Any]:
    """The result's record of a run stopped before place() was done."""
    return {"mode": spec if isinstance(spec, str) else "list", "why": "the run stopped before its CPUs were placed"}


def place(spec: str | list[int], announce: Callable[[str], None] | None = None) -> dict[str, Any]:
    """Pin this process (and so every process it starts) as spec says; what was done, for the result.
    announce(text), where given, hears of the sweep before it starts (a few seconds)."""
    may = allowed()
    if not may:
        return {"mode": "unsupported", "why": "this platform cannot pin processes to CPUs"}
    out: dict[str, Any] = {"mode": spec if isinstance(spec, str) else "list", "allowed": _ranges(may)}
    if spec == "all" or (spec == "auto" and len(may) <= MIN_KEEP):
        keep, why = may, "every CPU this process may use" + (" (too few to choose from)" if spec == "auto" else "")
    elif spec == "auto":
        if announce is not None:
            announce("timing the Python loop on every CPU (--cpus auto)")
        times = sweep(may)
        keep, why = choose(times)
        out["sweep_loop_s"] = {str(c): v for c, v in times.items()}
    else:
        keep, why = list(spec), "named by --cpus"
    os.sched_setaffinity(0, set(keep))
    return out | {"kept": _ranges(keep), "why": why}


def restore(cpus: list[int]) -> None:
    """Give this thread back the CPUs allowed() returned (Linux pins threads: others keep their pin)."""
    if cpus:
        os.sched_setaffinity(0, set(cpus))


def cpu_times() -> dict[str, int] | None:
    """The machine's CPU time so far, in clock ticks, from /proc/stat's first line (None off Linux)."""
    try:
        with open("/proc/stat") as f:
            fields = f.readline().split()
    except OSError:
        return None
    names = ("user", "nice", "system", "idle", "iowait", "irq", "softirq", "steal")
    return dict(zip(names, (int(x) for x in fields[1:1 + len(names)])))


def steal_share(before: dict[str, int] | None, after: dict[str, int] | None) -> float | None:
    """Steal time as a share of the busy CPU time between two readings: what the hypervisor took."""
    if not before or not after:
        return None
    d = {k: after[k] - before[k] for k in before}
    if any(v < 0 for v in d.values()):  # counters that went back (a CPU unplugged): no share to give
        return None
    busy = sum(v for k, v in d.items() if k not in ("idle", "iowait"))
    return d["steal"] / busy if busy > 0 else 0.0


def _ranges(cpus: list[int]) -> str:
    out: list[str] = []
    for c in cpus:
        if out and out[-1].split("-")[-1] == str(c - 1):
            out[-1] = f"{out[-1].split('-')[0]}-{c}"
        else:
            out.append(str(c))
    return ",".join(out)
