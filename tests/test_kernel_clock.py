"""The kernel clock (harness/measure/kernel_clock.py): the device's busy time of a call, summed from a CUDA
activity trace on planted traces of both tools' layouts, read from a real jax.profiler trace on the CPU, and
carried through a worker's row, the pooling of processes, the result's checks and the claims' resampling."""
from __future__ import annotations

import contextlib
from dataclasses import replace
from types import SimpleNamespace

import pytest

from harness.check.judging import _resampled
from harness.measure import kernel_clock as K
from harness.results.model import Stats
from harness.results.model import ProcessRow, ProcessTiming
from harness.measure.timing import preset
from harness.workers.processes import pool_timing
from tests.conftest import backend_or_skip


def test_the_span_runs_from_the_first_start_to_the_last_end_gaps_included():
    """CUDA events bracket a call, idle gaps included (a loop that reads a value every step idles the device):
    the trace's reading counts them too, so that the kernel clock means the same in the three frameworks."""
    assert K.span_s([]) == 0.0
    assert K.span_s([(0, 10), (20, 25)]) == 25  # the gap between two kernels is the call's
    assert K.span_s([(0, 10), (5, 12), (11, 13)]) == 13  # two streams at once: once
    assert K.span_s([(5, 6), (0, 10)]) == 10  # one inside another, in any order


def _xprof(runs, extra=()):
    """A jax.profiler (XProf) Chrome trace: host ranges on pid 1, kernels on the GPU process's stream lanes,
    and XLA's derived 'XLA Ops' lane, which repeats the kernels and must not be counted twice."""
    ev = [{"ph": "M", "name": "process_name", "pid": 1, "args": {"name": "/host:CPU"}},
          {"ph": "M", "name": "process_name", "pid": 2, "args": {"name": "/device:GPU:0"}},
          {"ph": "M", "name": "thread_name", "pid": 2, "tid": 7, "args": {"name": "Stream #7(Compute)"}},
          {"ph": "M", "name": "thread_name", "pid": 2, "tid": 8, "args": {"name": "Stream #8(MemcpyH2D)"}},
          {"ph": "M", "name": "thread_name", "pid": 2, "tid": 9, "args": {"name": "XLA Ops"}}]
    for i, (lo, hi, kernels) in enumerate(runs):
        ev.append({"ph": "X", "name": f"{K.MARK}{i}", "pid": 1, "tid": 1, "ts": lo, "dur": hi - lo})
        for tid, a, b in kernels:
            ev.append({"ph": "X", "name": "fusion", "pid": 2, "tid": tid, "ts": a, "dur": b - a})
            ev.append({"ph": "X", "name": "fusion", "pid": 2, "tid": 9, "ts": a, "dur": b - a})
    ev += [{"ph": "X", "name": "copy", "pid": 2, "tid": 7, "ts": a, "dur": b - a} for a, b in extra]
    return {"traceEvents": ev}


def test_a_planted_xprof_trace_sums_each_runs_kernels_and_copies_per_call():
    trace = _xprof([(0, 100, [(7, 10, 40), (8, 30, 50), (7, 60, 70)]),  # 10 to 70 us: 60 us
                    (200, 300, [(7, 210, 230)])],  # 20 us
                   extra=[(150, 190)])  # between the runs: a poison's copy, no run's work
    assert K.per_run_s(trace, 2) == pytest.approx([60e-6, 20e-6])
    assert K.per_run_s(trace, 2, calls=10) == pytest.approx([6e-6, 2e-6])  # per call of a 10-call run


def test_a_planted_kineto_trace_reads_its_kernel_and_copy_categories():
    """torch.profiler's layout: device work by category, the range as a user annotation on the host and a
    copy of it on the device's lane, which must not stand in for the host's."""
    ev = [{"ph": "X", "cat": "user_annotation", "name": f"{K.MARK}0", "pid": 1, "tid": 1, "ts": 0, "dur": 100},
          {"ph": "X", "cat": "gpu_user_annotation", "name": f"{K.MARK}0", "pid": 0, "tid": 7, "ts": 20, "dur": 30},
          {"ph": "X", "cat": "kernel", "name": "gemm", "pid": 0, "tid": 7, "ts": 20, "dur": 20},
          {"ph": "X", "cat": "gpu_memcpy", "name": "Memcpy HtoD", "pid": 0, "tid": 8, "ts": 45, "dur": 5},
          {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": 5, "dur": 90}]
    assert K.per_run_s({"traceEvents": ev}, 1) == pytest.approx([30e-6])


def test_a_trace_without_the_ranges_or_without_device_work_gives_no_clock():
    with pytest.raises(K.NoKernelClock, match="no range"):
        K.per_run_s(_xprof([(0, 100, [(7, 10, 40)])]), 2)
    with pytest.raises(K.NoKernelClock, match="no device work at all"):
        K.per_run_s(_xprof([(0, 100, []), (200, 300, [])]), 2)


def test_a_run_without_device_work_is_zero_where_the_trace_saw_the_device():
    """JAX folds an in-place collective at one rank to nothing: its runs hold no kernel, while the poison's copies
    between them show that the tracer saw the device."""
    assert K.per_run_s(_xprof([(0, 100, [(7, 10, 40)]), (200, 300, [])]), 2) == pytest.approx([30e-6, 0.0])
    assert K.per_run_s(_xprof([(0, 100, []), (200, 300, [])], extra=[(150, 190)]), 2) == [0.0, 0.0]


@pytest.mark.parametrize("path", ["xspace", "trace.json"])
def test_jax_on_the_cpu_reads_xlas_ops_from_a_real_trace(path, monkeypatch):
    """The real tool end to end: jax.profiler's trace of XLA:CPU's ops, three runs of two calls each, read in
    memory from the session's XSpace or, where this JAX has no such session, from the trace.json it writes."""
    b = backend_or_skip("jax")
    if path == "trace.json":
        monkeypatch.setattr(b, "_session", lambda opts: None)
    else:
        session = b._session(None)
        assert session is not None and session.stop(), "this JAX reads no XSpace in memory"
        b._unregister()
    from harness.workers.execute import load_impl, variant_call
    from scenarios import get

    scn = get("matmul_precision")
    p = scn.params_for_size("smoke") | {"seed": 3}
    impl = load_impl(scn.name, "jax")
    calls = [(variant_call(impl, scn.variant(v)), 2) for v in ("matched_fp32", "framework_default")]
    got, other = K.measure(b, impl, calls, scn.make_inputs(p), p)
    assert "samples" in got and "samples" in other, (got, other)
    assert len(got["samples"]) == K.REPEATS and all(0 < s < 1 for s in got["samples"])
    assert got["source"] == "jax.profiler (XLA:CPU ops span)"


class _TracedBackend:
    """A GPU backend without events whose tracer plants a trace of what body did: every range it opened, on a
    clock of 100 us a range, and in each run's range one kernel of 30 us (per 1 call), but in the runs of the
    rows named in `quiet` (no device work)."""

    name, on_gpu, has_events, device = "fake", True, False, None
    sessions = 0
    quiet: frozenset[int] = frozenset()

    def synchronize(self, outputs=None):
        pass

    def free_memory(self):
        pass

    def kernel_trace(self, body):
        type(self).sessions += 1
        ev, clock, row = [], [0], [None]

        @contextlib.contextmanager
        def annotate(name):
            if name.startswith(K.ROW):
                row[0] = int(name[len(K.ROW):])
            start = clock[0] = clock[0] + 100
            yield
            clock[0] += 100
            ev.append({"ph": "X", "name": name, "pid": 1, "tid": 1, "ts": start, "dur": clock[0] - start})
            if name.startswith(K.MARK) and row[0] not in self.quiet:
                ev.append({"ph": "X", "name": "fusion", "pid": 2, "tid": 7, "ts": start + 10, "dur": 30})

        body(annotate)
        return {"traceEvents": _xprof([])["traceEvents"] + ev}, "planted"


class _Impl:
    @staticmethod
    def prepare(inputs, params, device):
        return {}

    @staticmethod
    def run_async(state):
        return None


def _timed_row():
    st = Stats.of([1e-3, 1.1e-3]).to_dict()
    t = ProcessTiming(host_return=st, device_done=st, device_events=None, metrics={}, noise=0.01, checked_repeats=1, wrong_repeats=0,
               stopped="noise", first_call_s=0.1,
               samples={"host_return": [1e-3, 1.1e-3], "device_done": [1e-3, 1.1e-3]})
    return ProcessRow(scenario="async_dispatch", framework="jax", variant="async", status="ok", timing=t)


def test_a_worker_row_gets_the_clock_and_the_processes_pool_it_by_their_own_counts():
    from harness.workers import handlers
    from scenarios import get

    scn = get("async_dispatch")
    rows = []
    for _ in range(2):  # two processes of one row
        row = _timed_row()
        handlers._kernel_clocks(scn, _TracedBackend(), _Impl, {}, {}, [row], preset("full"), lambda t: None)
        assert row.timing.kernel.median == pytest.approx(30e-6) and row.timing.kernel_source == "planted"
        rows.append(row.timing)
    pooled = pool_timing(rows)
    assert len(pooled.samples["kernel"]) == 2 * K.REPEATS
    assert [p.kernel_n for p in pooled.processes] == [K.REPEATS, K.REPEATS]  # not the 2 repeats of device_done
    assert all(p.kernel_s is not None for p in pooled.processes)  # each process's trace seconds, for the forecast
    assert pooled.kernel.median == pytest.approx(30e-6) and "kernel" in pooled.noise
    draws = _resampled({"async": {"timing": pooled.to_dict()}}, 5)
    assert all(d["async"]["timing"]["kernel"]["median"] == pytest.approx(30e-6) for d in draws)


def _four_processes() -> list:
    """A row's timings from four processes, as processes.time_point asks them: the first KERNEL_PROCESSES trace
    the planted kernel clock, the later ones trace none."""
    from harness.workers import handlers
    from harness.workers.processes import KERNEL_PROCESSES
    from scenarios import get

    timings = []
    for i in range(4):
        row = _timed_row()
        cfg = preset("full") if i < KERNEL_PROCESSES else replace(preset("full"), kernel_clock=False)
        handlers._kernel_clocks(get("async_dispatch"), _TracedBackend(), _Impl, {}, {}, [row], cfg, lambda t: None)
        timings.append(row.timing)
    return timings


def test_a_rows_first_processes_alone_trace_and_the_row_pools_theirs():
    """At four processes, JAX's kernel clock comes from the first two (processes.KERNEL_PROCESSES): the row's
    figure is their medians' median, each later process counts 0 traced runs, and the file's checks and the
    forecast read it so. A first process whose trace failed still leaves the row without a clock."""
    from harness.measure.noise import split
    from harness.regress import forecast
    from harness.results.model import counts_of
    from harness.workers.processes import KERNEL_PROCESSES

    timings = _four_processes()
    pooled = pool_timing(timings)
    assert len(pooled.samples["kernel"]) == KERNEL_PROCESSES * K.REPEATS
    assert [p.kernel_n for p in pooled.processes] == [K.REPEATS] * KERNEL_PROCESSES + [0, 0]
    d = pooled.to_dict()
    assert counts_of(d, "kernel") == [K.REPEATS, K.REPEATS, 0, 0]
    assert len(split(d["samples"]["kernel"], counts_of(d, "kernel"))) == KERNEL_PROCESSES
    assert pooled.kernel.median == pytest.approx(30e-6)
    for p in pooled.processes[:KERNEL_PROCESSES]:
        p.kernel_s = 0.5
    row = SimpleNamespace(framework="jax", timing=pooled)
    doc = SimpleNamespace(scenarios={"async_dispatch": SimpleNamespace(rows=[row])})
    assert not forecast.traced_kernel_clock(doc, ["async_dispatch"], ["jax"])  # the later processes traced none
    failed = [replace(timings[0], samples={k: v for k, v in timings[0].samples.items() if k != "kernel"},
                      kernel=None, kernel_why="the traced runs failed")] + timings[1:]
    assert "kernel" not in pool_timing(failed).samples


def test_readers_of_a_clock_traced_in_the_first_processes_pair_each_median_with_its_own_process():
    """helper-14's review: the file regress's host check, the forecast's price of a traced request, a rank row's
    slowest rank and the exported line all read a kernel clock that the later processes did not trace."""
    from harness.regress import forecast
    from harness.regress.env import host_procs
    from harness.workers.processes import KERNEL_PROCESSES

    timings = _four_processes()
    for i, t in enumerate(timings):
        t.host_loop_s, t.request_s = 0.01 * (i + 1), [2.0, 1.5, 1.0, 1.0][i]
        t.kernel_s = 0.5 if i < KERNEL_PROCESSES else None
        t.slowest_rank_samples = {c: list(v) for c, v in t.samples.items()}
    pooled = pool_timing(timings)
    row = SimpleNamespace(framework="jax", timed=True, point_index=0, timing=pooled)
    assert [h for h, _ in host_procs(row, [1.0, 1.1], "kernel")] == [0.01, 0.02]
    doc = SimpleNamespace(scenarios={"async_dispatch": SimpleNamespace(rows=[row], timing_phase=None)})
    # after the first process: 1.5, and 1.0 + the traced processes' 0.5 twice; without the trace: 1.0 each
    assert forecast.side_process_s(doc, ["async_dispatch"], ["jax"], traced=True) == pytest.approx(1.5)
    assert forecast.side_process_s(doc, ["async_dispatch"], ["jax"], traced=False) == pytest.approx(1.0)
    assert pooled.slowest_rank["kernel"].n == KERNEL_PROCESSES * K.REPEATS


def test_a_row_whose_trace_fails_says_why_and_keeps_its_other_clocks():
    from harness.workers import handlers
    from scenarios import get

    class Failing(_TracedBackend):
        def kernel_trace(self, body):
            raise RuntimeError("CUPTI_ERROR_NOT_INITIALIZED")

    scn = get("async_dispatch")
    row = _timed_row()
    handlers._kernel_clocks(scn, Failing(), _Impl, {}, {}, [row], preset("full"), lambda t: None)
    assert row.timing.kernel is None and "CUPTI_ERROR_NOT_INITIALIZED" in row.timing.kernel_why
    assert pool_timing([row.timing, row.timing]).kernel_why == row.timing.kernel_why


def test_selfcheck_traces_each_fixed_kernel_after_timing_them_all(monkeypatch):
    """selfcheck's rows carry the CUPTI trace's reading beside the events (the cross-check), taken once every
    kernel is timed."""
    from harness.workers import handlers

    order = []

    class Fake(_TracedBackend):
        has_events = True

        def load(self):
            return self

        def clock_kernels(self):
            return {"k1": lambda: order.append("call k1"), "k2": lambda: order.append("call k2")}

        def own_benchmark(self, call):
            return None

    fake = Fake()
    monkeypatch.setattr(handlers.backends, "get", lambda fw: fake)
    monkeypatch.setattr(handlers, "measure", lambda call, b, cfg: order.append("timed") or type("M", (), {
        "device_done": Stats.of([1e-3, 1e-3]), "device_events": Stats.of([0.9e-3, 0.9e-3])})())
    monkeypatch.setattr(handlers.kernel_clock, "trace_call", lambda b, call: order.append("traced") or
                        {"samples": [30e-6, 31e-6, 32e-6], "source": "planted"})
    rows = handlers.selfcheck("fake")
    assert [r["trace_s"] for r in rows] == [pytest.approx(31e-6)] * 2
    assert order == ["timed", "timed", "traced", "traced"]


def test_the_traced_runs_follow_warm_runs_inside_the_same_trace():
    """A power-capped GPU clocks down under a timed loop's load: the traced runs come right after WARM_S of the
    same runs, inside the trace (no idle gap for the clocks to recover), and those count for no run."""
    b = backend_or_skip("jax")
    import jax.numpy as jnp

    x = jnp.ones((256, 256))
    f = b.fw.jit(lambda a: a @ a)
    calls = []

    def run():
        calls.append(1)
        b.synchronize(f(x))

    b.synchronize(f(x))
    trace, _ = b.kernel_trace(lambda annotate: K.traced_runs(annotate, lambda: None, run, range(2), warm_s=0.05))
    first = K.windows(trace, 2)[0][0]
    warm = [a for a, _ in K.device_intervals(trace) if a < first]
    assert len(calls) > 2 and warm, "warm runs, traced before the first range"
    assert len(K.per_run_s(trace, 2)) == 2


def test_a_clock_of_zeros_pools_to_a_null_noise_that_the_schema_takes():
    """On the H100, JAX's in-place collectives at one rank did no device work: their kernel clock is 0, whose
    relative noise has no value. The pooled row writes null (the file validated), not 'inf' (refused)."""
    from harness.results.results import validate
    from tests import synthetic

    timings = []
    for _ in range(2):
        t = _timed_row().timing
        t.kernel, t.kernel_source = Stats.of([0.0, 0.0, 0.0]).to_dict(), "planted"
        t.samples["kernel"] = [0.0, 0.0, 0.0]
        timings.append(t)
    pooled = pool_timing(timings)
    assert pooled.noise["kernel"] is None and pooled.kernel.median == 0.0
    row = synthetic.row("jax", "async")
    row["timing"] = pooled.to_dict()
    validate(synthetic.doc([row]))


def test_a_run_that_reads_no_kernel_clock_traces_nothing_and_says_why():
    """An interleaved regress judged on device_done asks for no traced clock (TimingConfig.kernel_clock): its
    profiler sessions cost seconds a JAX point (results/journal.md). The config travels to older trees' workers
    as before where it is the default."""
    from dataclasses import replace

    from harness.measure.timing import preset
    from harness.workers import handlers
    from harness.workers.protocol import Request
    from scenarios import get

    traced = []

    class Counting(_TracedBackend):
        def kernel_trace(self, body):
            traced.append(1)
            return super().kernel_trace(body)

    scn = get("async_dispatch")
    for reads in (True, False):
        row = _timed_row()
        handlers._kernel_clocks(scn, Counting(), _Impl, {}, {}, [row], replace(preset("full"), kernel_clock=reads),
                                lambda t: None)
        assert (row.timing.kernel is not None) == reads and len(traced) == (1 if reads else 1)
        assert (row.timing.kernel_s is not None) == reads  # no trace, no seconds of one
        assert reads or row.timing.kernel_why == "not traced in this process: its request asked for no kernel clock"
    wire = Request.make("time", "jax", "async_dispatch", {}, preset("full")).to_dict()
    assert "kernel_clock" not in wire["timing"]  # the default: what an older tree's TimingConfig reads
    off = Request.make("time", "jax", "async_dispatch", {}, replace(preset("full"), kernel_clock=False)).to_dict()
    assert Request.from_dict(off).timing.kernel_clock is False


def test_a_requests_rows_share_one_trace_and_one_rows_failure_is_its_own():
    """A profiler session's start and export cost about a second on a GPU: the rows of a point share one. A row
    whose traced runs fail says why; the others keep their clocks."""
    from harness.workers import handlers
    from scenarios import get

    class Broken(_Impl):
        calls = 0

        @staticmethod
        def prepare(inputs, params, device):
            Broken.calls += 1
            if Broken.calls == 2:  # the second row's state: its rehearsal fails
                raise MemoryError("out of memory")
            return {}

        run_sync_each = run_async_poll = staticmethod(lambda state: None)

    scn = get("async_dispatch")
    rows = [_timed_row() for _ in scn.variants]
    for r, v in zip(rows, scn.variants):
        r.variant = v.name
    before = _TracedBackend.sessions
    handlers._kernel_clocks(scn, _TracedBackend(), Broken, {}, {}, rows, preset("full"), lambda t: None)
    assert _TracedBackend.sessions == before + 1
    assert [r.timing.kernel is not None for r in rows] == [True, False] + [True] * (len(rows) - 2)
    assert "MemoryError: out of memory" in rows[1].timing.kernel_why
    assert len({r.timing.kernel_s for r in rows}) == 1 and rows[0].timing.kernel_s >= 0  # the request's, on every row
    assert all(r.timing.kernel.median == pytest.approx(30e-6) for r in rows if r.timing.kernel is not None)


def test_a_row_without_device_work_in_its_own_range_has_no_clock_though_others_had_some():
    """In a shared trace, "the tracer saw the device" must mean this row's range (its warm runs, its poison), not
    another row's work: a row of no device work at all says so, as it did in a trace of its own."""
    trace = _xprof([(0, 100, [(7, 10, 40)]), (200, 300, [])])
    trace["traceEvents"] += [{"ph": "X", "name": f"{K.ROW}0", "pid": 1, "tid": 1, "ts": 0, "dur": 110},
                             {"ph": "X", "name": f"{K.ROW}1", "pid": 1, "tid": 1, "ts": 150, "dur": 200}]
    assert K.per_run_s(trace, range(0, 1), row=0) == pytest.approx([30e-6])
    with pytest.raises(K.NoKernelClock, match="in this row's runs"):
        K.per_run_s(trace, range(1, 2), row=1)
    assert K.per_run_s(trace, 2) == pytest.approx([30e-6, 0.0])  # without rows: the whole trace's


def test_a_jax_without_profile_options_traces_with_its_defaults():
    """jax.profiler.trace took no profiler_options before ProfileOptions came (pyproject allows such a JAX): the
    lean options are passed only where they exist, else every JAX row would say "TypeError"."""
    import gzip
    import json
    import types
    from pathlib import Path

    from harness.backends.jax_backend import JaxBackend

    @contextlib.contextmanager
    def trace(log_dir):  # the older signature: no profiler_options
        yield
        run = Path(log_dir) / "plugins" / "profile" / "r"
        run.mkdir(parents=True)
        with gzip.open(run / "h.trace.json.gz", "wt") as f:
            json.dump(_xprof([(0, 100, [(7, 10, 40)])]), f)

    b = JaxBackend()
    b.fw = types.SimpleNamespace(profiler=types.SimpleNamespace(trace=trace, TraceAnnotation=lambda name: contextlib.nullcontext()))
    b.on_gpu = True
    got, source = b.kernel_trace(lambda annotate: None)
    assert K.per_run_s(got, 1) == pytest.approx([30e-6]) and source == "jax.profiler (CUPTI span)"


def test_a_session_beside_a_running_trace_is_refused_and_a_failed_body_leaves_none_running(monkeypatch):
    """jaxlib's session does not refuse a second one until its stop, after the whole request: jax.profiler's own
    state says whether a trace runs. The body's own error is the one raised, and the next request traces."""
    b = backend_or_skip("jax")
    import tempfile

    from harness.backends.base import Unavailable

    with b.fw.profiler.trace(tempfile.mkdtemp()):
        with pytest.raises(Unavailable, match="already running"):
            b.kernel_trace(lambda annotate: None)
    with pytest.raises(ZeroDivisionError):
        b.kernel_trace(lambda annotate: 1 / 0)
    trace, _ = b.kernel_trace(lambda annotate: None)
    assert "traceEvents" in trace
    b.fw.profiler.start_trace(tempfile.mkdtemp())  # jax.profiler's own trace starts: nothing left registered
    b.fw.profiler.stop_trace()

    class Broken:  # a session whose stop fails too: the body's error is still the one told
        def stop(self):
            raise RuntimeError("stop failed")

    monkeypatch.setattr(b, "_session", lambda opts: Broken())
    with pytest.raises(ZeroDivisionError):
        b.kernel_trace(lambda annotate: 1 / 0)


def test_an_xspace_keeps_the_streams_work_and_the_clocks_ranges_and_drops_the_rest():
    """chrome_trace on a planted GPU XSpace (ProfileData's shape): the kernel clock reads it as it reads the
    export's trace.json, and the host's other events (hundreds of thousands in a request) are not carried."""
    from types import SimpleNamespace as NS

    from harness.backends.base import KERNEL_RANGES
    from harness.backends.jax_backend import chrome_trace

    def ev(name, start_us, dur_us, **stats):
        return NS(name=name, start_ns=start_us * 1e3, duration_ns=dur_us * 1e3, stats=list(stats.items()))

    host = NS(name="/host:CPU", lines=[NS(name="python", events=[
        ev(K.MARK + "0", 0, 100), ev("PjitFunction(f)", 1, 5), ev(K.MARK + "1", 100, 100), ev("ParseArguments", 101, 1)])])
    gpu = NS(name="/device:GPU:0", lines=[
        NS(name="Stream #13(compute)", events=[ev("fusion", 10, 30), ev("gemm", 50, 20), ev("fusion", 110, 40)]),
        NS(name="XLA Ops", events=[ev("fusion", 0, 500)])])  # not a stream's: spans all runs, kept out
    got = chrome_trace(NS(planes=[host, gpu]), KERNEL_RANGES)
    assert K.per_run_s(got, 2) == pytest.approx([60e-6, 40e-6])
    names = [e["name"] for e in got["traceEvents"] if e["ph"] == "X"]
    assert "PjitFunction(f)" not in names and "ParseArguments" not in names and len(names) == 5


def test_in_one_trace_a_row_of_no_device_work_says_so_and_each_rows_state_is_freed_before_the_next():
    """Between rows that ran kernels, a row that ran none reads no clock ("in this row's runs"), as it did in a
    trace of its own, not 0 from its neighbours' work; and each row's state is gone before the next row's is made
    (the rows of a point would otherwise hold their device memory together)."""
    import gc
    import weakref

    class State:
        pass

    made = []

    class Impl(_Impl):
        @staticmethod
        def prepare(inputs, params, device):
            assert all(w() is None for w in made), "an earlier row's state outlived its row"
            s = State()
            made.append(weakref.ref(s))
            return s

    class Quiet(_TracedBackend):
        quiet = frozenset({1})  # row 1's runs do no device work

        def free_memory(self):
            gc.collect()

    got = K.measure(Quiet(), Impl, [(lambda s: None, 1)] * 3, {}, {})
    assert "samples" in got[0] and "samples" in got[2], got
    assert "in this row's runs" in got[1]["why"]
    assert len(made) == 3


def test_the_warm_runs_last_what_WARM_S_says_when_the_trace_runs(monkeypatch):
    """A probe that sets WARM_S is heard: lease 10's probe set it after import, and a default bound at the
    function's definition kept 0.2 s in all three of its settings (results/journal.md, 2026-12-07)."""
    from harness.measure import kernel_clock as K

    def runs(warm_s: float) -> int:
        monkeypatch.setattr(K, "WARM_S", warm_s)
        n = [0]
        K.traced_runs(lambda _name: contextlib.nullcontext(), lambda: None, lambda: n.__setitem__(0, n[0] + 1), range(3))
        return n[0]

    assert runs(0.0) <= 4 and runs(0.05) > 10


def test_a_rows_warm_runs_last_what_the_request_asks_where_it_asks(monkeypatch):
    """TimingConfig.kernel_warm_s ($TRIPTYCH_TIMING on one side of a regress) reaches each row's warm runs; None
    leaves WARM_S."""
    from harness.measure import kernel_clock as K

    seen: list[float] = []
    monkeypatch.setattr(K, "warm", lambda before, run, seconds: seen.append(seconds))
    K.measure(_TracedBackend(), _Impl, [(lambda s: None, 1)] * 2, {}, {}, warm_s=0.03)
    K.measure(_TracedBackend(), _Impl, [(lambda s: None, 1)], {}, {})
    assert seen == [0.03, 0.03, K.WARM_S], seen


def test_a_workers_kernel_clock_traces_with_the_warm_runs_its_timing_names(monkeypatch):
    """A worker's traced rows reach the kernel clock with their request's kernel_warm_s (a side's $TRIPTYCH_TIMING);
    None, the preset's, leaves WARM_S."""
    from harness.workers import handlers
    from scenarios import get

    seen: list[float] = []
    monkeypatch.setattr(K, "warm", lambda before, run, seconds: seen.append(seconds))
    for warm_s in (None, 0.01, 0.0):
        row = _timed_row()
        handlers._kernel_clocks(get("async_dispatch"), _TracedBackend(), _Impl, {}, {}, [row],
                                replace(preset("full"), kernel_warm_s=warm_s), lambda t: None)
        assert row.timing.kernel_source == "planted"
    assert seen == [K.WARM_S, 0.01, 0.0], seen
