"""Timing statistics and the measuring loop, on a fake backend whose device we control."""
from __future__ import annotations

import time
from dataclasses import replace

import numpy as np
import pytest

from harness.backends.base import Backend
from harness.measure.metrics import emit
from harness.measure.timing import TimingConfig, measure
from harness.results.model import Stats


# Every test here on a virtual clock (tests/conftest.py): sleeps and busy-waits advance it, not the host.
pytestmark = pytest.mark.usefixtures("virtual_clock")


class FakeAsyncBackend(Backend):
    """A 'device' that finishes `latency` seconds after the call returned."""

    name = "fake"

    def __init__(self, latency: float) -> None:
        super().__init__()
        self.latency = latency
        self.pending_until = 0.0
        self.syncs = 0

    def _load(self):
        pass

    def device_label(self):
        return "fake"

    def is_array(self, x):
        return False

    def to_device(self, a):
        return a

    def _array_to_numpy(self, x):
        return x

    def synchronize(self, outputs=None):
        self.syncs += 1
        while time.perf_counter() < self.pending_until:
            pass

    def env(self):
        return {}

    def enqueue(self):
        self.pending_until = time.perf_counter() + self.latency
        return {"y": 1}

    def tiny_op(self):
        return self.enqueue


def test_stats_match_numpy_percentiles():
    rng = np.random.default_rng(0)
    x = rng.exponential(size=101)
    s = Stats.of(x)
    q1, med, q3 = np.percentile(x, [25, 50, 75])
    assert (s.q1, s.median, s.q3) == (q1, med, q3)
    assert s.iqr == pytest.approx(q3 - q1)
    assert s.n == 101 and s.min == x.min() and s.max == x.max()
    assert Stats.from_dict(s.to_dict()).to_dict() == s.to_dict()
    with pytest.raises(ValueError):
        Stats.of([])


def test_host_return_is_before_device_done():
    b = FakeAsyncBackend(latency=0.004)
    m = measure(b.enqueue, b, TimingConfig(warmup=0, min_repeats=5, max_repeats=5, min_time_s=0))
    assert m.host_return.n == m.device_done.n == 5
    assert m.host_return.median < 0.001
    assert m.device_done.median >= 0.004
    assert m.device_events is None  # the fake has no events


def test_repeats_stop_at_min_time_or_max():
    b = FakeAsyncBackend(latency=0.002)
    m = measure(b.enqueue, b, TimingConfig(warmup=1, min_repeats=3, max_repeats=1000, min_time_s=0.03))
    # the rule itself: the repeats' device-done seconds reached min_time_s (a median times n is not that sum:
    # on a loaded host some repeats run long, and the median undercounts them)
    assert m.stopped == "noise" and 3 <= m.device_done.n < 40 and m.timed_s >= 0.03
    assert m.timed_s - m.samples["device_done"][-1] < 0.03 or m.device_done.n == 3  # not a repeat later
    m = measure(b.enqueue, b, TimingConfig(warmup=0, min_repeats=2, max_repeats=4, min_time_s=100))
    assert m.device_done.n == 4


def test_first_call_is_reported_apart():
    b = FakeAsyncBackend(latency=0.0)
    calls = []

    def call():
        calls.append(1)
        if len(calls) == 1:
            time.sleep(0.02)  # a 'compile'
        return b.enqueue()

    m = measure(call, b, TimingConfig(warmup=1, min_repeats=3, max_repeats=3, min_time_s=0))
    assert m.first_call_s >= 0.02 > m.device_done.max
    assert len(calls) == 1 + 1 + 3


def test_metrics_are_medians_of_what_the_impl_emitted():
    b = FakeAsyncBackend(latency=0.0)
    values = iter([100, 1, 2, 3, 4, 5])  # first call and warm-up are not counted

    def call():
        emit("cpu_iters_while_waiting", next(values))
        return b.enqueue()

    m = measure(call, b, TimingConfig(warmup=1, min_repeats=4, max_repeats=4, min_time_s=0))
    assert m.metrics == {"cpu_iters_while_waiting": 3.5}


def test_checks_first_and_last_or_every_repeat():
    b = FakeAsyncBackend(latency=0.0)
    seen = []

    def check(out):
        seen.append(out)
        return "wrong" if len(seen) % 2 else None

    cfg = TimingConfig(warmup=0, min_repeats=6, max_repeats=6, min_time_s=0)
    m = measure(b.enqueue, b, cfg, check=check)
    assert m.checked_repeats == 2 and m.wrong_repeats == 1 and m.worst == "wrong"
    seen.clear()
    m = measure(b.enqueue, b, cfg, check=check, check_every=True)
    assert m.checked_repeats == 6 and m.wrong_repeats == 3


def test_a_hazard_checks_its_first_repeats_then_every_seventh_and_the_last():
    """A hazard's share of wrong runs comes from a sample: repeats 1-8, every 7th after them and the last (40) of
    40: odd and even repeats alike, so that a hazard wrong every other call shows in its share."""
    b = FakeAsyncBackend(latency=0.0)
    seen = []

    def check(out):
        seen.append(len(m_done))
        return None

    m_done = []
    call = lambda: m_done.append(1) or b.enqueue()  # noqa: E731 - the calls so far: the first call, then one a repeat
    m = measure(call, b, TimingConfig(warmup=0, min_repeats=40, max_repeats=40, min_time_s=0), check=check,
                check_every=True)
    assert m.checked_repeats == 13 and [n - 1 for n in seen] == [1, 2, 3, 4, 5, 6, 7, 8, 14, 21, 28, 35, 40]


def test_before_runs_untimed_before_every_call():
    b = FakeAsyncBackend(latency=0.0)
    order = []
    measure(lambda: order.append("call") or b.enqueue(), b,
            TimingConfig(warmup=0, min_repeats=2, max_repeats=2, min_time_s=0), before=lambda: order.append("before"))
    assert order == ["before", "call"] * 3


@pytest.mark.parametrize("bad", [dict(min_repeats=0), dict(min_repeats=5, max_repeats=4), dict(warmup=-1),
                                 dict(max_wall_s=0), dict(warmup_s=-1),
                                 dict(min_time_s=-1)])
def test_bad_timing_config(bad):
    with pytest.raises(ValueError):
        TimingConfig(**bad)


def test_untimed_work_cannot_stretch_the_loop_past_max_wall():
    """Poisoning or checking a big buffer between repeats counts toward max_wall_s, not toward min_time_s."""
    b = FakeAsyncBackend(latency=0.0)
    cfg = TimingConfig(warmup=0, min_repeats=3, max_repeats=1000, min_time_s=10.0, max_wall_s=0.05)
    t0 = time.perf_counter()
    m = measure(b.enqueue, b, cfg, before=lambda: time.sleep(0.01))
    assert 3 <= m.device_done.n <= 8
    assert time.perf_counter() - t0 < 0.5
    # min_repeats still wins over max_wall_s
    m = measure(b.enqueue, b, TimingConfig(warmup=0, min_repeats=6, max_repeats=6, min_time_s=10.0, max_wall_s=1e-6))
    assert m.device_done.n == 6


def test_a_costly_first_check_does_not_use_up_the_time_cap():
    """The first check is a one-off (the full comparison with the reference): a row whose check costs more
    than the cap gets the repeats of a row whose outputs were already judged. Checks of later repeats
    (hazards check every one) still count toward the cap."""
    b = FakeAsyncBackend(latency=0.0)
    cfg = TimingConfig(warmup=0, min_repeats=3, max_repeats=1000, min_time_s=10.0, max_wall_s=0.2)
    before = lambda: time.sleep(0.01)  # noqa: E731
    cheap = measure(b.enqueue, b, cfg, before=before, check=lambda out: None)
    slow_once = []
    costly = measure(b.enqueue, b, cfg, before=before,
                     check=lambda out: time.sleep(0.3) if not slow_once and not slow_once.append(1) else None)
    assert costly.stopped == cheap.stopped == "time_cap"
    assert costly.device_done.n >= 10 and costly.device_done.n >= cheap.device_done.n - 4
    assert costly.repeats_s < 0.3 <= costly.check_s  # the one-off is kept off the per-repeat clock too
    every = measure(b.enqueue, b, cfg, before=before, check=lambda out: time.sleep(0.05), check_every=True)
    assert every.device_done.n <= 5  # 0.06 s a repeat after the first: the cap of 0.2 s after 5


def test_warm_up_runs_for_at_least_warmup_s():
    b = FakeAsyncBackend(latency=0.0)
    calls = []
    measure(lambda: calls.append(1) or b.enqueue(), b,
            TimingConfig(warmup=0, min_repeats=1, max_repeats=1, min_time_s=0, warmup_s=0.03))
    assert len(calls) > 3  # first call + a warm-up that lasted 30 ms + one repeat


def test_stop_reasons_in_order():
    cfg = TimingConfig(min_repeats=5, max_repeats=50, min_time_s=0.1, max_wall_s=2.0, max_noise=0.01)
    quiet, loud = (lambda: 0.005), (lambda: 0.2)
    assert cfg.stop(4, 1.0, 0.0, quiet) is None  # below min_repeats nothing stops it but max_repeats
    assert cfg.stop(5, 0.05, 0.0, quiet) is None  # not enough device time yet
    assert cfg.stop(5, 0.2, 0.0, quiet) == "noise"
    assert cfg.stop(5, 0.2, 0.0, loud) is None  # too noisy: go on
    assert cfg.stop(9, 0.2, 2.5, loud) == "time_cap"
    assert cfg.stop(50, 0.2, 0.0, loud) == "max_repeats"


def test_a_noisy_call_repeats_longer_than_a_quiet_one():
    """The noise target, not a count, decides: a call whose time jumps around needs more repeats."""
    rng = np.random.default_rng(0)
    quiet, noisy = FakeAsyncBackend(0.0005), FakeAsyncBackend(0.0005)

    def jumpy():
        noisy.latency = 0.0005 * float(rng.choice([0.5, 1.0, 2.0]))
        return noisy.enqueue()

    cfg = TimingConfig(warmup=0, min_repeats=5, max_repeats=400, min_time_s=0.0, max_wall_s=5.0, max_noise=0.05)
    mq = measure(quiet.enqueue, quiet, cfg)
    mn = measure(jumpy, noisy, cfg)
    assert mq.stopped == "noise" and mq.noise <= 0.05
    assert mn.device_done.n > 2 * mq.device_done.n
    assert mn.stopped in ("noise", "max_repeats") and mn.to_dict()["stopped"] == mn.stopped


def test_another_threads_sleep_does_not_move_the_virtual_clock(virtual_clock):
    """An earlier test's worker thread (protocol.serve's parent watch, asleep 0.5 s a turn) lives on in the test
    process: on the virtual clock its sleeps would return at once, and each push this test's time on by 0.5 s,
    so that a repeat loop hit its time cap (seen on CI's two cores)."""
    import threading
    import time

    stop = threading.Event()

    def watch():
        while not stop.is_set():
            time.sleep(0.5)

    threading.Thread(target=watch, daemon=True).start()
    t0, real = time.perf_counter(), time.monotonic()
    while time.monotonic() - real < 0.1:
        pass
    stop.set()
    assert time.perf_counter() - t0 < 0.01


def test_a_row_asked_for_the_host_beside_it_times_the_loop_just_before_each_repeat(monkeypatch):
    """An interleaved regress's covariate (TimingConfig.host_beside): the host's short loop just before each timed
    repeat's clock starts, one a repeat; nothing where not asked for (a default run's rows)."""
    from harness.measure import timing

    b = FakeAsyncBackend(latency=0.0)
    order: list[str] = []
    loops = iter([6e-5, 1e-4, 6.2e-5])
    monkeypatch.setattr(timing, "beside_s", lambda: order.append("loop") or next(loops))

    def call():
        order.append("call")
        return b.enqueue()

    cfg = TimingConfig(warmup=1, min_repeats=3, max_repeats=3, min_time_s=0)
    assert measure(call, b, cfg).host_loops is None and "loop" not in order
    order.clear()
    m = measure(call, b, replace(cfg, host_beside=True))
    assert m.host_loops == pytest.approx([6e-5, 1e-4, 6.2e-5])
    assert order == ["call", "call"] + ["loop", "call"] * 3  # first, warm-up, then a loop before each repeat


def test_a_sides_timing_settings_are_json_of_known_fields_that_make_a_valid_config():
    from harness.measure.timing import OVERRIDE_ENV, overrides

    assert overrides('{"warmup_s": 0, "min_repeats": 3.0}') == {"warmup_s": 0.0, "min_repeats": 3}
    for text, why in [("warmup_s=0", "is not JSON"), ("[1]", "must be a JSON object"), ("{}", "must be a JSON object"),
                      ('{"plan": 1}', "names plan: it may set warmup,"), ('{"warmup": 1.5}', "warmup must be a whole"),
                      ('{"warmup_s": true}', "warmup_s must be a finite"), ('{"min_time_s": "0"}', "must be a finite"),
                      ('{"min_repeats": 300}', "cannot run"), ('{"warmup_s": -1}', "cannot run"),
                      ('{"warmup": 1e300}', "at most 1,000,000"), ('{"min_repeats":\n300}', "cannot run")]:
        with pytest.raises(ValueError, match=why) as e:
            overrides(text)
        assert OVERRIDE_ENV in str(e.value) and "\n" not in str(e.value), text
    assert overrides('{"min_repeats": 300}', TimingConfig(max_repeats=400)) == {"min_repeats": 300}
    # the kernel clock's warm runs (harness/measure/kernel_clock.py WARM_S): a time, none below zero
    assert overrides('{"kernel_warm_s": 0.05}') == {"kernel_warm_s": 0.05}
    with pytest.raises(ValueError, match="cannot run"):
        overrides('{"kernel_warm_s": -0.1}')
    # the host's loop before each repeat, on one side: a switch, not a number
    assert overrides('{"host_beside": true, "warmup_s": 0}') == {"host_beside": True, "warmup_s": 0.0}
    assert overrides('{"host_beside": false}') == {"host_beside": False}
    assert overrides('{"host_beside": true}')["host_beside"] is True  # a switch, not the number 1.0
    for text in ('{"host_beside": 1}', '{"host_beside": "true"}'):
        with pytest.raises(ValueError, match="host_beside must be true or false"):
            overrides(text)


def test_a_request_carries_the_kernel_clocks_warm_runs_only_where_a_side_set_them():
    """The default (None: the clock's own WARM_S) stays off the wire, which an older tree's worker reads."""
    from harness.workers.protocol import Request

    plain = Request.make("time", "jax", "pinned_transfer", {}, TimingConfig()).to_dict()
    assert "kernel_warm_s" not in plain["timing"]
    for warm_s in (0.05, 0.0):  # none at all is a setting too
        short = Request.make("time", "jax", "pinned_transfer", {}, TimingConfig(kernel_warm_s=warm_s)).to_dict()
        assert Request.from_dict(short).timing.kernel_warm_s == warm_s


def test_a_worker_times_on_its_sides_timing_settings_and_no_other_process_does(monkeypatch):
    """$TRIPTYCH_TIMING in a worker's environment (an interleaved regress's --candidate-env) replaces the
    request's settings there: here three repeats where the preset asks for five at least."""
    from harness.measure import timing
    from harness.workers import handlers
    from scenarios import get
    from tests.conftest import backend_or_skip

    backend_or_skip("torch")
    params = get("launch_overhead").params_for_size("smoke") | {"seed": 2}

    def repeats() -> set[int]:
        rows = handlers.time_scenario("torch", "launch_overhead", params, timing.preset("smoke"), lambda _t: None)
        return {len(r["timing"]["samples"]["device_done"]) for r in rows if r["status"] == "ok"}

    def loops() -> set[bool]:
        rows = handlers.time_scenario("torch", "launch_overhead", params, timing.preset("smoke"), lambda _t: None)
        return {bool(r["timing"].get("host_loops")) for r in rows if r["status"] == "ok"}

    monkeypatch.setenv(timing.OVERRIDE_ENV, '{"min_repeats": 3, "max_repeats": 3}')
    assert repeats() == {3} and loops() == {False}
    monkeypatch.setenv(timing.OVERRIDE_ENV, '{"min_repeats": 3, "max_repeats": 3, "host_beside": true}')
    assert loops() == {True}  # the host's loop before each repeat, on this side alone
    monkeypatch.delenv(timing.OVERRIDE_ENV)
    assert min(repeats()) >= timing.preset("smoke").min_repeats > 3
