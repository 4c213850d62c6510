"""Timing on one clock for all three frameworks.

Each repeat records two host wall-clock times from the same start:
  host_return  when the call handed control back to Python (what async dispatch makes small);
  device_done  when the device had finished the call's work (Backend.synchronize(outputs): device-wide where
               the framework has such a wait, else every output ready).
Where the framework has device events (Backend.event_timer, on a GPU), events recorded on the current stream
around the call give a third, device-side time; they bracket the current stream only.

The first call is timed apart (a tracing framework compiles there; the others initialize cuBLAS and friends),
then warm-up calls, then repeats until the median is sure enough or a time cap is hit (TimingConfig).
A named measurement marks its warm-up (the first call included) and its repeats as two ranges in the
profilers' timelines (Backend.range: NVTX for Nsight Systems, the framework's own annotation), each
pushed before its loop and popped after it: nothing is marked inside a timed call.
A repeat (a sample) may be `calls` back-to-back calls between one `before` and one sync, as nccl-tests
times its -n iterations: every clock of the sample is then divided by `calls` (per call), and the
outputs checked are the last call's.
"""
from __future__ import annotations

import contextlib
import json
import math
import os
from dataclasses import dataclass, replace
from typing import Any, Callable

import numpy as np

from harness.backends.base import Backend, wall
from harness.measure.host_loop import beside_s, identity
from harness.measure.metrics import collecting
from harness.measure.noise import median_rel_halfwidth
from harness.results.model import Json, ProcessTiming, Stats


@dataclass(frozen=True)
class TimingConfig:
    """When one process stops repeating (nvbench's rule: a noise target, a minimum time, a time cap):
      "noise"        min_repeats done, the timed device_done sum has reached min_time_s, and the
                     median's relative uncertainty (half its 95% interval) is at most max_noise;
      "time_cap"     min_repeats done and the loop, untimed work included (poisoning, checks but the
                     first, a one-off like the first call), has run max_wall_s;
      "max_repeats"  max_repeats done.
    Warm-up: `warmup` calls after the first, and more until warmup_s has passed (clocks ramp up and
    caches fill over time, not over a count). A row is timed in several processes (harness/workers/processes.py;
    a rank row in as many groups of rank processes, one a timing process),
    each with this whole budget: the presets are per process."""

    warmup: int = 2  # calls after the first, untimed
    min_repeats: int = 10
    max_repeats: int = 200
    min_time_s: float = 1.0  # total device_done time to accumulate before stopping on noise
    max_wall_s: float = float("inf")  # the repeat loop, untimed work included (but its first check)
    warmup_s: float = 0.0
    max_noise: float = math.inf  # relative half-width of the median's interval; inf: min_time_s alone decides
    # One more repeat after the timed ones (and their checks), never a sample, under the framework's own
    # profiler: its trace goes beside the result (harness/measure/profiling.py; compare --profile).
    profile: bool = False
    # Per variant, the most repeats a process runs, decided from the row's earlier processes
    # (harness/workers/processes.py plan: Kalibera and Jones' repeats where the variance is); a variant
    # not named keeps max_repeats.
    plan: tuple[tuple[str, int], ...] = ()
    # The traced kernel clock of a framework without CUDA events (JAX; harness/measure/kernel_clock.py), after
    # the timed repeats. False: a run that judges another clock (an interleaved regress on device_done) reads
    # none, since its profiler sessions cost seconds a point (docs/regress.md).
    kernel_clock: bool = True
    # The host's short loop (harness/measure/host_loop.py beside_s) timed just before each repeat's clock starts:
    # the host's speed at that repeat (ProcessTiming.host_loops), which a loop a row or a request apart is too far
    # from to tell (docs/regress.md). An interleaved regress with --host-covariate asks for it.
    host_beside: bool = False
    # Seconds of untraced runs of a row inside its kernel-clock trace, before the traced ones; None: the clock's own
    # (harness/measure/kernel_clock.py WARM_S, and why). Set by $TRIPTYCH_TIMING on one side of a regress that
    # judges the kernel clock, to measure what shorter warm runs move and save (docs/regress.md).
    kernel_warm_s: float | None = None

    def __post_init__(self) -> None:
        if (self.min_repeats < 1 or self.max_repeats < self.min_repeats or self.warmup < 0 or self.min_time_s < 0
                or self.max_wall_s <= 0 or self.warmup_s < 0 or self.max_noise < 0
                or (self.kernel_warm_s is not None and self.kernel_warm_s < 0)
                or any(n < 1 for _, n in self.plan)):
            raise ValueError(f"bad timing config {self}")

    @classmethod
    def from_dict(cls, d: Json) -> "TimingConfig":
        """The inverse of dataclasses.asdict (a request carries it so: harness/workers/protocol.py)."""
        return cls(**(d | {"plan": tuple((str(v), int(n)) for v, n in d.get("plan", ()))}))

    def for_variant(self, name: str) -> "TimingConfig":
        """This config with the plan's repeats for one variant (at most max_repeats) and no plan."""
        n = dict(self.plan).get(name)
        if n is None:
            return replace(self, plan=()) if self.plan else self
        n = min(n, self.max_repeats)
        return replace(self, min_repeats=min(self.min_repeats, n), max_repeats=n, plan=())

    def stop(self, n: int, done_total: float, loop_s: float, noise: Callable[[], float]) -> str | None:
        """Why the loop stops after n repeats, or None to go on (noise() is asked only when it matters)."""
        if n >= self.max_repeats:
            return "max_repeats"
        if n < self.min_repeats:
            return None
        if loop_s >= self.max_wall_s:
            return "time_cap"
        if done_total >= self.min_time_s and (math.isinf(self.max_noise) or noise() <= self.max_noise):
            return "noise"
        return None


PRESETS: dict[str, TimingConfig] = {
    "smoke": TimingConfig(warmup=1, min_repeats=5, max_repeats=20, min_time_s=0.02, max_wall_s=0.5, max_noise=0.05),
    # Sized for a shared GPU lease: a full run of every scenario, two processes (or rank groups) a row, in
    # under ten minutes (docs/design/processes.md). 200 repeats, not 60: a row of tens of microseconds stops there
    # long before 0.1 s of device time, and its median's interval narrows as 1/sqrt(n). max_wall_s bounds
    # variants whose untimed per-run work (poisoning 256 MiB, bit-exact checks) dwarfs the timed part:
    # those stop at min_repeats. The noise rule needs 5 repeats; a 1% median takes ~25 of a row spread by 10%.
    "full": TimingConfig(warmup=1, min_repeats=3, max_repeats=200, min_time_s=0.1, max_wall_s=0.75, warmup_s=0.05,
                         max_noise=0.01),
}


def preset(size: str) -> TimingConfig:
    """The timing config of a size preset (full for sizes without their own)."""
    return PRESETS.get(size, PRESETS["full"])


# One side of an interleaved regress may time on other settings than the preset's: the pairs then measure what a
# change of method does to the figures, and each side's files what it does to a pair's cost (docs/regress.md),
# e.g. --candidate-env 'TRIPTYCH_TIMING={"warmup_s": 0}'; host_beside (true or false) times the host's loop
# before each repeat on one side alone, so that the pairs of a run judged plain measure what the loop does. Only a
# worker reads it (handlers.time_point); a run refuses it in its own environment (harness/run/cmd_compare.py
# start_checks), where it would reach every process and write figures that the preset its result names does not
# describe.
OVERRIDE_ENV = "TRIPTYCH_TIMING"
# What a worker takes; one whose hello lists none (a tree from before kernel_warm_s) takes OLDER alone, and a side
# that names more is refused before its pairs (harness/run/interleave.py), where its workers would fail every request.
OVERRIDABLE_OLDER = ("warmup", "warmup_s", "min_repeats", "max_repeats", "min_time_s", "max_wall_s", "max_noise")
OVERRIDABLE = (*OVERRIDABLE_OLDER, "kernel_warm_s", "host_beside")
SWITCHES = ("host_beside",)  # true or false; the others are numbers
KERNEL_WARM_MAX = 1.0  # s: each row's warm runs inside a profiler session (WARM_S is 0.2); more is a typo's trace
OVERRIDE_MAX = 1_000_000  # a count or a time past any request's timeout: a typo, not a setting
REPEATS = ("min_repeats", "max_repeats")
COUNTS = ("warmup", *REPEATS)  # whole numbers; the others are seconds or a share


def overrides(text: str, base: TimingConfig = PRESETS["full"]) -> dict[str, float | bool]:
    """The fields a $TRIPTYCH_TIMING value sets: a JSON object of OVERRIDABLE names and finite numbers (counts
    whole; SWITCHES true or false), which must make a valid config of `base`; ValueError, one line, where it does not."""
    try:
        given = json.loads(text)
    except ValueError:
        raise ValueError(f"${OVERRIDE_ENV} is not JSON: {text!r}") from None
    if not isinstance(given, dict) or not given:
        raise ValueError(f"${OVERRIDE_ENV} must be a JSON object of timing settings, such as {{\"warmup_s\": 0}}")
    unknown = sorted(set(given) - set(OVERRIDABLE))
    if unknown:
        raise ValueError(f"${OVERRIDE_ENV} names {', '.join(unknown)}: it may set {', '.join(OVERRIDABLE)}")
    for k, v in given.items():
        if k in SWITCHES:
            if not isinstance(v, bool):
                raise ValueError(f"${OVERRIDE_ENV}: {k} must be true or false, not {v!r}")
            continue
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) \
                or (k in COUNTS and v != int(v)) or abs(v) > OVERRIDE_MAX:
            raise ValueError(f"${OVERRIDE_ENV}: {k} must be a {'whole' if k in COUNTS else 'finite'} number of at most "
                             f"{OVERRIDE_MAX:,}, not {v!r}")
    if given.get("kernel_warm_s", 0) > KERNEL_WARM_MAX:
        raise ValueError(f"${OVERRIDE_ENV}: kernel_warm_s must be at most {KERNEL_WARM_MAX:g} s (each row's warm runs "
                         f"inside a trace), not {given['kernel_warm_s']!r}")
    out = {k: v if k in SWITCHES else int(v) if k in COUNTS else float(v) for k, v in given.items()}
    try:
        replace(base, **out)  # the config's own check
    except ValueError:
        raise ValueError(f"${OVERRIDE_ENV} {json.dumps(out)} makes a timing that cannot run (min_repeats above "
                         "max_repeats, a negative count or time, max_wall_s 0)") from None
    return out


def overridden(cfg: TimingConfig) -> TimingConfig:
    """cfg with this process's $TRIPTYCH_TIMING settings, where it has any. Settings that name repeats drop the
    request's planned repeats (harness/workers/processes.py plan): the side runs what it names in every pair."""
    text = os.environ.get(OVERRIDE_ENV)
    if not text:
        return cfg
    given = overrides(text, replace(cfg, plan=()))
    return replace(cfg, **given, **({"plan": ()} if set(given) & set(REPEATS) else {}))


# selfcheck compares clocks within 3%: long warm-up (GPU clocks ramp), many repeats, one process.
SELFCHECK = TimingConfig(warmup=2, min_repeats=20, max_repeats=1000, min_time_s=1.0, warmup_s=0.5)


Repeat = tuple[float, float, "float | None", Any, dict[str, float], "float | None"]

# A hazard's repeats checked, each counted right or wrong: all of the first HAZARD_CHECKS, then every HAZARD_EVERY-th.
# Why a sample: a hazard's check can cost many times its timed call (donation's 1 GiB of parameters), and
# checking every repeat spent the time cap on checks; a share of wrong runs needs a sample, not every run. Why
# a prime step: a hazard that goes wrong every other call (two buffers taking turns) is sampled on both turns,
# which powers of two, all even, were not.
HAZARD_CHECKS = 8
HAZARD_EVERY = 7


def sampled(n: int) -> bool:
    """Is the n-th repeat (from 1) of a hazard variant checked? The first HAZARD_CHECKS, then every HAZARD_EVERY-th;
    the loop checks its last repeat too."""
    return n <= HAZARD_CHECKS or n % HAZARD_EVERY == 0


def _timed_call(call: Callable[[], Any], backend: Backend, before: Callable[[], None] | None,
                timer: Any, calls: int = 1, beside: bool = False) -> Repeat:
    """One repeat of `calls` back-to-back calls: (host_return, device_done, device events or None) per
    call, the last call's outputs, emitted metrics, and with `beside` the host's short loop just before the
    clock starts (else None). Earlier calls' outputs are dropped unsynchronized, as nccl-tests' iterations are."""
    if before is not None:
        before()
    backend.synchronize()
    loop = beside_s() if beside else None  # the device is idle here: the loop delays nothing it would run
    with collecting() as emitted:
        if timer is not None:
            timer.start()
        t0 = wall()
        for _ in range(calls):
            out = call()
        t1 = wall()
        if timer is not None:
            timer.stop()
        backend.synchronize(out)
        t2 = wall()
    ev = timer.elapsed_s() / calls if timer is not None else None
    return (t1 - t0) / calls, (t2 - t0) / calls, ev, out, dict(emitted), loop


def loop_identity() -> str:
    """The loop beside the repeats and where it runs, hashed (host_loop.identity of _timed_call): what a worker's
    hello names, so that an interleaved regress reads the loop as a covariate only where both sides time one."""
    return identity(_timed_call)


def measure(
    call: Callable[[], Any],
    backend: Backend,
    cfg: TimingConfig,
    *,
    before: Callable[[], None] | None = None,
    check: Callable[[Any], str | None] | None = None,
    check_every: bool = False,
    agree: Callable[[str | None], str | None] | None = None,
    calls: int = 1,
    name: str = "",
) -> ProcessTiming:
    """Time ``call`` (which enqueues work and returns its outputs) on ``backend``.

    ``before`` runs untimed before every call (poisoning preallocated outputs, refreshing state).
    ``check(outputs)`` returns None when right or a description when wrong; it runs untimed on the
    first timed repeat and the last, and with ``check_every`` (hazard variants) on the repeats `sampled` names.
    ``agree(stop)`` turns this process's stopping answer into the group's (ranks: rank 0's, so that
    every rank runs the same warm-up calls and repeats; harness/backends/dist.py; or the answer two
    workers that take turns share: harness/workers/turns.py), after each timed warm-up call and each
    repeat, outside the loop's clock.
    ``calls``: back-to-back calls per warm-up and timed repeat (the first call is one call, timed apart);
    every clock of a repeat is per call.
    ``name``: the row's name; its warm-up and its repeats become the ranges "<name> warm-up" and
    "<name> repeats" (unnamed: no range).
    The answer is the row's timing as one process measured it (model.ProcessTiming): each clock's Stats and its
    samples, the emitted metrics' medians, the checks' counts, why it stopped and how noisy its device_done
    median was then (None: no finite figure), and where measure()'s wall time went: timed_s inside the timed
    repeats (every call, start to synchronized end), loop_s the whole of measure() (first call, warm-up,
    poisoning, checks), check_s the checks alone, repeats_s the repeat loop but its first check (what one more
    repeat costs: repeats_s / n), and the rest of loop_s split: warm_s before the repeat loop (the first call
    and the warm-up calls, each with its `before` and synchronize), before_s in `before` between the repeats
    (poisoning, refreshing state: part of repeats_s), agree_s in agree, in the warm-up and after each repeat
    (the rank group's agreement, or the other worker's turn: part of neither warm_s nor repeats_s; a worker that
    takes turns leaves its waits out of loop_s and agree_s after: harness/workers/handlers.py time_point); with
    cfg.host_beside, loop_s (and repeats_s) also holds the short loop before each repeat (host_loops).
    """
    if calls < 1:
        raise ValueError(f"calls per repeat must be at least 1, not {calls}")
    t_measure = wall()
    agreed = 0.0  # in agree during the warm-up: the group's (or the other worker's turn), not this warm-up's
    with _range(backend, name, "warm-up"):
        _, first, _, out, _, _ = _timed_call(call, backend, before, None)
        del out
        t_warm = wall()
        for _ in range(cfg.warmup):
            _timed_call(call, backend, before, None, calls)
        while True:  # warm-up by time: each rank's clock would give each rank its own count
            more = wall() - t_warm - agreed < cfg.warmup_s
            if agree is not None:
                t0 = wall()
                more = agree(None if more else "noise") is None
                agreed += wall() - t0
            if not more:
                break
            _timed_call(call, backend, before, None, calls)
    warm_s = wall() - t_measure - agreed
    with _range(backend, name, "repeats"):
        m = _repeat(call, backend, cfg, before, check, check_every, first, agree, calls)
    m.loop_s, m.warm_s = wall() - t_measure, warm_s
    m.agree_s += agreed
    return m


def _range(backend: Backend, name: str, part: str) -> Any:
    return backend.range(f"{name} {part}") if name else contextlib.nullcontext()


def _repeat(call: Callable[[], Any], backend: Backend, cfg: TimingConfig, before: Callable[[], None] | None,
            check: Callable[[Any], str | None] | None, check_every: bool, first: float,
            agree: Callable[[str | None], str | None] | None, calls: int = 1) -> ProcessTiming:
    timer = backend.event_timer()
    host: list[float] = []
    done: list[float] = []
    events: list[float] = []
    metrics: dict[str, list[float]] = {}
    loops: list[float] = []  # cfg.host_beside: the host's loop beside each repeat
    checked = wrong = 0
    worst = ""
    t_loop = wall()
    t_agree = 0.0
    done_total = 0.0  # the device_done time spent, every call of every repeat, kept as it grows
    check_s = 0.0
    # The first check is a one-off (a full comparison with the reference; later repeats' identical outputs
    # reuse its verdict), like the first call: it is kept off the loop's clock, so that a costly check does
    # not use up the time cap and leave its row with fewer repeats than the same row in another framework
    # whose outputs were already judged (harness/workers/handlers.py, point_cache).
    first_check_s = 0.0
    before_s = [0.0]

    def timed_before() -> None:
        t0 = wall()
        before()  # type: ignore[misc]
        before_s[0] += wall() - t0

    while True:
        h, d, ev, out, emitted, loop = _timed_call(call, backend, before and timed_before, timer, calls,
                                                   cfg.host_beside)
        if loop is not None:
            loops.append(loop)
        host.append(h)
        done.append(d)
        done_total += d * calls
        if ev is not None:
            events.append(ev)
        for k, v in emitted.items():
            metrics.setdefault(k, []).append(v)
        stopped = cfg.stop(len(done), done_total, wall() - t_loop - t_agree - first_check_s,
                           lambda: median_rel_halfwidth(done))
        if agree is not None:
            t0 = wall()
            stopped = agree(stopped)
            t_agree += wall() - t0  # the group's broadcast is not the variant's loop time
        if check is not None and ((check_every and sampled(len(done))) or len(done) == 1 or stopped):
            checked += 1
            t0 = wall()
            problem = check(out)
            took = wall() - t0
            check_s += took
            if checked == 1:
                first_check_s = took
            if problem is not None:
                wrong += 1
                worst = worst or problem
        del out
        if stopped:
            break
    noise = median_rel_halfwidth(done)
    return ProcessTiming(
        first_call_s=first,
        host_return=Stats.of(host),
        device_done=Stats.of(done),
        device_events=Stats.of(events) if events else None,
        metrics={k: float(np.median(v)) for k, v in metrics.items()},
        checked_repeats=checked,
        wrong_repeats=wrong,
        worst=worst,
        samples={"host_return": host, "device_done": done, **({"device_events": events} if events else {})},
        host_loops=loops or None,
        stopped=stopped,
        noise=noise if math.isfinite(noise) else None,
        timed_s=done_total,
        check_s=check_s,
        repeats_s=wall() - t_loop - t_agree - first_check_s,
        before_s=before_s[0],
        agree_s=t_agree,
    )
