"""The requests a framework's worker answers (answer; harness/workers/protocol.py serves them in a child process).

Each handler takes a point as the scenario reads it (its seed among its params) and returns plain
picklable data: names, numbers, numpy arrays and dicts.
"""
from __future__ import annotations

import gc
import os
import time
from dataclasses import replace
from typing import Any, Callable

import numpy as np

from harness import backends
from harness.backends.base import RankCeilings
from harness.workers import point_cache
from harness.measure.calibrate import calibrate as _calibrate
from harness.measure.calibrate import Calibration
from harness.measure.host_loop import python_loop_s
from harness.check.equivalence import strided_sample
from harness.check.outputs import OutputCheck, has_nan
from harness.workers.execute import load_impl, run_variants, skip_reason, variant_call
from harness.results.model import Check, Json, ProcessRow, Stats
from harness.measure.profiling import profile_variant, row_name
from harness.workers.protocol import Answer, Hello, Progress, Request, TurnTaker
from harness.measure.timeline import trace_variant
from harness.measure import kernel_clock
from harness.measure.timing import OVERRIDABLE, OVERRIDE_ENV, SELFCHECK, TimingConfig, loop_identity, measure, overridden
from scenarios import get as get_scenario
from scenarios.spec import Arrays, Params, Scenario, Variant

SAMPLE_ELEMS = 1 << 16  # per output, for cross-framework checks where the reference is too costly


def hello(fw: str) -> Hello:
    b = backends.get(fw)
    ok, why = b.available()
    # subsets: a time request may name the variants to time (protocol.Request.variants); kernel_optional: its
    # timing config may leave the traced kernel clock out (TimingConfig.kernel_clock); turns: it may take turns
    # with another worker's request (protocol.Request.turns); host_beside: it may ask for the host's loop before
    # each repeat (TimingConfig.host_beside), and which loop it times where (harness/measure/timing.py loop_identity);
    # timing: the $TRIPTYCH_TIMING it times on, where it has one (an older tree's worker ignores it and says nothing),
    # and timing_fields the settings it takes (harness/measure/timing.py OVERRIDABLE)
    timing = os.environ.get(OVERRIDE_ENV)
    return {"available": ok, "why": why, "on_gpu": b.on_gpu if ok else False,
            "env": b.env() if ok else {}, "pid": os.getpid(), "subsets": True, "kernel_optional": True, "turns": True,
            "host_beside": loop_identity(), "timing_fields": list(OVERRIDABLE), **({"timing": timing} if timing else {})}


def equiv(fw: str, scenario: str, params: Params) -> dict[str, Arrays]:
    b = backends.get(fw).load()
    out = run_variants(get_scenario(scenario), b, params)
    b.free_memory()
    return out


def time_scenario(fw: str, scenario: str, params: Params, cfg: TimingConfig, progress: Progress) -> list[Json]:
    """time_point's rows alone, as the wire has them (tests)."""
    return time_point(fw, scenario, params, cfg, progress=progress)["rows"]


def time_point(fw: str, scenario: str, params: Params, cfg: TimingConfig, first: bool = True, *,
               progress: Progress, agree: Callable[[str | None], str | None] | None = None,
               variants: tuple[str, ...] = (), turn: TurnTaker | None = None) -> Answer:
    """Time every variant at the given params (only those named in variants, where any are, and the
    baseline too where the point has no reference: the others are checked against its outputs); check
    the timed outputs; in a row's first process
    (first=True) also count host syncs, trace the timeline and, with cfg.profile, profile one more run of
    each row, which a second process would repeat.
    {"rows": [...], "sample": {output: strided sample} of the baseline's outputs where they were not
    checked against the reference (for the runner's cross-framework check), else None}. Each row is
    built here as a model.ProcessRow, and sent as its to_dict(). turn(variant, stop): the timed loops take
    turns with another worker's request (Request.turns; harness/workers/turns.py), which is a rank's agree
    (harness/backends/dist.py) held between two processes; the seconds waiting for a turn are left out of
    this process's wall times (progress.waited_s)."""
    t_served = time.perf_counter()
    cfg = overridden(cfg)  # an interleaved regress's side on other settings than the request's ($TRIPTYCH_TIMING)
    scn = get_scenario(scenario)
    b = backends.get(fw).load()
    impl = load_impl(scenario, fw)
    _settle_heap()
    t_setup = time.perf_counter()
    inputs, expected = point_cache.inputs_and_reference(scn, params)
    # host inputs and reference, made here or read back from the run's cache: where a run's wall time goes
    setup_s = time.perf_counter() - t_setup
    against = "reference" if expected is not None else "baseline"
    # The host's speed now, in this process: the start-up calibration alone cannot show a host that
    # changed speed during the run (a factor of two between processes and runs: docs/design/host_speed.md).
    host_loop, host_loop_at = python_loop_s(3), time.time()  # wall-clock time: comparable across processes
    rows: list[ProcessRow] = []
    sample = expected_digest = None
    for v in scn.variants:
        if variants and v.name not in variants and not (expected is None and v is scn.baseline):
            continue  # not asked for (an interleaved run's rows that are decided): no row
        why = skip_reason(scn, v, b, impl, params)
        if why:
            rows.append(ProcessRow(scenario=scenario, framework=fw, variant=v.name, hazard=v.hazard, setup_s=setup_s,
                            status="skipped", reason=why))
            continue
        progress(v.name)
        waited = _waited(progress)
        timed, got, got_digest = _time_variant(scn, v, b, impl, inputs, params, expected, cfg, first,
                                               agree if turn is None else (lambda stop, v=v.name: turn(v, stop)),
                                               against == "reference", expected_digest)
        waited = _waited(progress) - waited  # another worker's turns, not this row's wall time
        timed.wall_s -= waited
        if timed.timing is not None:  # measure() counted them in agree: out of its loop and its agreement too
            timed.timing.phase_s -= waited
            timed.timing.loop_s -= waited
            timed.timing.agree_s = max(timed.timing.agree_s - waited, 0.0)
        timed.timing.host_loop_s = host_loop
        timed.timing.host_loop_at = host_loop_at
        timed.check.against = against if v is not scn.baseline or against == "reference" else "none"
        if expected is None and v is scn.baseline:
            expected = got  # later variants are checked against this framework's baseline
            # bytes equal to the baseline's then pass uncopied (_time_variant), except where a comparison would
            # fail them against themselves: NaN at a tolerance, a distribution's own tests
            expected_digest = got_digest if got_digest and not scn.distributions and not has_nan(got) else None
            sample = {k: strided_sample(a, SAMPLE_ELEMS) for k, a in got.items()}
        timed.setup_s = setup_s
        rows.append(timed)
    if b.on_gpu and not b.has_events:  # after every timed run, so that no profiler meets a timed call
        _kernel_clocks(scn, b, impl, inputs, params, rows, cfg, progress)
    if scn.timeline and first:  # after every timed run, so that no trace (or profiler) disturbs a timing
        for row in rows:
            if row.timed:
                progress(f"{row.variant} · timeline")
                call = variant_call(impl, scn.variant(row.variant))
                row.timeline = trace_variant(b, impl, call, inputs, params)
    if cfg.profile and first:  # likewise: a profiler that leaves anything behind (CUPTI) meets no timed call
        for row in rows:
            if row.timed:
                progress(f"{row.variant} · profile")
                # every rank runs it (collectives need them all); only rank 0's row is kept (harness/workers/ranks.py)
                name = row_name(scenario, fw, row.variant, params.get("label", ""))
                row.profile = profile_variant(b, impl, variant_call(impl, scn.variant(row.variant)), inputs,
                                              params, name, keep=params.get("rank", 0) == 0)
    # set-up, host loop, every variant, the timeline: the worker's share, less its waits for another worker's turns
    served = time.perf_counter() - t_served - _waited(progress)
    for row in rows:
        if row.timing is not None:
            row.timing.served_s = served
    return {"rows": [row.to_dict() for row in rows], "sample": sample}


def _waited(progress: Progress) -> float:
    return float(getattr(progress, "waited_s", 0.0))


def _kernel_clocks(scn: Scenario, b: Any, impl: Any, inputs: Arrays, params: Params, rows: list[ProcessRow],
                   cfg: TimingConfig, progress: Progress) -> None:
    """The timed rows' kernel clocks where their framework has no CUDA events: traced runs of them all in one
    profiler session (harness/measure/kernel_clock.py); or why none, where a row runs its calls in child
    processes, or where the run reads none (cfg.kernel_clock False: an interleaved regress judged on another clock)."""
    traced: list[ProcessRow] = []
    for row in rows:
        t = row.timing
        if not row.timed or t is None:
            continue
        if not cfg.kernel_clock:  # a regress judged on another clock, or a row's later process (processes.py)
            t.kernel_why = "not traced in this process: its request asked for no kernel clock"
        elif scn.variant(row.variant).fresh_process:
            t.kernel_why = "each call does its work in a child process, which no trace of this one sees"
        else:
            traced.append(row)
    if not traced:
        return
    progress(f"kernel clock · {len(traced)} row(s) in one trace")
    t0 = time.perf_counter()
    got = kernel_clock.measure(b, impl, [(variant_call(impl, scn.variant(r.variant)), scn.calls(params)) for r in traced],
                               inputs, params, warm_s=cfg.kernel_warm_s)
    took = time.perf_counter() - t0  # the request's: each of its timed rows keeps it, as served_s
    for row in rows:
        if row.timed and row.timing is not None:
            row.timing.kernel_s = took
    for row, reading in zip(traced, got):
        t = row.timing
        assert t is not None
        if "samples" in reading:
            t.kernel, t.kernel_source = Stats.of(reading["samples"]), reading["source"]
            t.samples["kernel"] = reading["samples"]
        else:
            t.kernel_why = reading["why"]


def _settle_heap() -> None:
    """Collect, then freeze what is left (the framework, its impls, their caches) out of the garbage
    collector's way: JAX's free_memory collects after every variant, and a full collection of a JAX
    process's heap took 0.16-0.2 s a variant on the CPU, untimed. Called before a point's inputs and
    state exist, after the last variant's were freed, so that nothing frozen holds device memory a later
    collection would have to find."""
    gc.collect()
    gc.freeze()


def _time_variant(scn: Scenario, v: Variant, b: Any, impl: Any, inputs: Arrays, params: Params,
                  want: Arrays | None, cfg: TimingConfig, census: bool = True,
                  agree: Callable[[str | None], str | None] | None = None,
                  want_is_reference: bool = False,
                  want_digest: str | None = None) -> tuple[ProcessRow, Arrays | None, str | None]:
    """(the row's status, timing, check and sync fields; the first checked repeat's numpy outputs where
    the check copied them, as it always does where there is nothing to check them against, else None: a
    device digest spared the copy; and, where there was nothing to check against, those outputs' device
    digest or None). The
    scenario's output_metrics, where it has them, are computed untimed from the first checked outputs
    when ``want`` is the float64 reference. want_digest: the device digest of ``want`` where it is the
    baseline's outputs and its bytes pass a comparison with themselves (time_point): outputs with that
    digest are those bytes, so they pass with error 0, neither copied to the host nor compared."""
    t_variant = time.perf_counter()
    fn = variant_call(impl, v)
    state = impl.prepare(inputs, params, b.device)
    # the state's uploads done before the first call is timed: a backend without a device-wide synchronize
    # waits for its outputs only, so the first call's own synchronize would leave them inside that call
    b.synchronize(state)
    poison = (lambda: impl.poison(state)) if hasattr(impl, "poison") else None
    check = OutputCheck(scn, v, b, params, want, want_is_reference, want_digest, point_cache)
    vcfg = cfg.for_variant(v.name)
    if v.fresh_process:  # every call a new child: nothing to warm (spec.Variant)
        vcfg = replace(vcfg, warmup=0, warmup_s=0.0)
    timing = measure(lambda: fn(state), b, vcfg, before=poison, check=check, check_every=v.hazard, agree=agree,
                     calls=scn.calls(params), name=row_name(scn.name, b.name, v.name, params.get("label", "")))
    syncs = _count_syncs(b, fn, state, poison) if census and not v.fresh_process else None
    state = None  # release device memory before the next variant
    b.free_memory()
    if timing.device_events is not None:  # CUDA events around every timed call: the kernel clock of this row
        timing.kernel, timing.kernel_source = replace(timing.device_events), "CUDA events"
        timing.samples["kernel"] = list(timing.samples["device_events"])
    timing.metrics.update(check.metrics)
    timing.phase_s = time.perf_counter() - t_variant  # this process's whole share of the row
    return ProcessRow(
        scenario=scn.name, framework=b.name, variant=v.name, hazard=v.hazard,
        status="ok" if timing.wrong_repeats == 0 or v.hazard else "wrong",
        timing=timing,
        check=Check(checked=timing.checked_repeats, wrong=timing.wrong_repeats, worst=timing.worst,
                    max_rel_err=max(check.rel_errs) if check.rel_errs else None),
        **({"host_syncs": syncs.count, "sync_method": syncs.method, "sync_why": syncs.why} if syncs is not None else {}),
        wall_s=time.perf_counter() - t_variant,  # everything for this variant, untimed work included
    ), check.captured, check.own_digest


def _count_syncs(b: Any, fn: Callable[[Any], Any], state: Any, poison: Callable[[], None] | None) -> Any:
    """One more run, untimed, under the framework's sync detector."""
    if poison is not None:  # like every run: outputs poisoned (and JAX sources made fresh) untimed
        poison()
        b.synchronize()
    with b.sync_counter() as syncs:
        out = fn(state)
    b.synchronize(out)
    return syncs


def ceilings(fw: str) -> dict[str, float]:
    return backends.get(fw).load().ceilings()


def rank_ceilings(fw: str, points: list[Params]) -> RankCeilings:
    """In a rank: the raw floor of a rank scenario's points, measured with every other rank."""
    b = backends.get(fw).load()
    out = b.rank_ceilings(points)
    b.free_memory()
    return out


def calibrate(fw: str) -> Calibration:
    return _calibrate(backends.get(fw).load())


def selfcheck(fw: str) -> list[dict[str, Any]]:
    """Both clocks on each of the backend's fixed kernels (harness/run/selfcheck.py), and their CUPTI trace."""
    b = backends.get(fw).load()
    out, kernels = [], b.clock_kernels()
    for name, call in kernels.items():
        m = measure(call, b, SELFCHECK)
        tool = b.own_benchmark(call)
        # harness_events_s: device events around the same calls, i.e. the device time without the host's
        # share of the wall clock (the dispatch before the kernel starts, the wake-up after it ends).
        out.append({"kernel": name, "on_gpu": b.on_gpu, "harness_s": m.device_done.median,
                    "harness_rel_iqr": m.device_done.rel_iqr,
                    "harness_events_s": m.device_events.median if m.device_events else None,
                    "tool": tool["tool"] if tool else None, "tool_s": tool["tool_s"] if tool else None,
                    "tool_back_to_back_s": tool["back_to_back_s"] if tool else None})
    # trace_s: the same calls' device time in a CUPTI trace (harness/measure/kernel_clock.py), the events'
    # cross-check; traced after every timing, since a profiler session can slow the process's later launches
    for row, call in zip(out, kernels.values()):
        traced = kernel_clock.trace_call(b, call) if b.on_gpu else {}
        row["trace_s"] = float(np.median(traced["samples"])) if "samples" in traced else None
    b.free_memory()
    return out


def answer(req: Request, progress: Progress) -> Any:
    """A process worker's answer to a request (harness/workers/worker.py: in this process or a child's)."""
    fw = req.framework
    if req.op == "equiv":
        return equiv(fw, str(req.scenario), req.point())
    if req.op == "time":
        if req.timing is None:
            raise ValueError("a time request carries its timing config")
        turn = getattr(progress, "turn", None) if req.turns else None
        if req.turns and turn is None:
            raise ValueError("a time request that takes turns needs notes that can hand a turn over (protocol.Notes)")
        return time_point(fw, str(req.scenario), req.point(), req.timing, req.first, progress=progress,
                          variants=req.variants, turn=turn)
    return {"hello": hello, "ceilings": ceilings, "calibrate": calibrate, "selfcheck": selfcheck}[req.op](fw)
