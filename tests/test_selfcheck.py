"""selfcheck: the harness's clock against the frameworks' own tools, judged on an interval over several
processes (harness/run/selfcheck.py), written with its environment."""
from __future__ import annotations

import json
import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from harness.run import selfcheck
from harness.workers import handlers
from tests.conftest import backend_or_skip, gpu_backend_or_skip

# harness / tool in single-process selfchecks on the H200 (torch's GEMM and reduction, results/selfcheck/)
H200_LIKE = [1.048, 1.037, 1.023, 1.019]


def test_selfcheck_rows_time_each_kernel_with_both_clocks():
    backend_or_skip("torch")
    rows = handlers.selfcheck("torch")
    assert {r["kernel"].split("_")[0] for r in rows} == {"gemm", "add", "sum"}
    for r in rows:
        assert r["harness_s"] > 0 and r["tool_s"] > 0 and r["tool"].startswith("torch.utils.benchmark")
        assert r["tool_back_to_back_s"] > 0  # blocked_autorange, shown beside the like-for-like number


def test_selfcheck_writes_its_rows_and_environment(tmp_path):
    backend_or_skip("torch")
    code = selfcheck.run_selfcheck(["torch"], tmp_path, processes=2)
    (path,) = tmp_path.glob("selfcheck_*.json")
    doc = json.loads(path.read_text())
    assert doc["environment"]["frameworks"]["torch"]["env"]["version"]
    assert doc["environment"]["host"]["python"]
    assert len(doc["rows"]) == 3 and len(doc["per_process"]["torch"]) == 2
    for r in doc["rows"]:  # each process's own ratio, not a ratio of medians
        assert r["ratios"] == pytest.approx([next(p for p in proc if p["kernel"] == r["kernel"])["harness_s"]
                                             / next(p for p in proc if p["kernel"] == r["kernel"])["tool_s"]
                                             for proc in doc["per_process"]["torch"]])
    # On the CPU nothing is judged, so the exit status is 0; on a GPU it is 0 only if every row agrees.
    on_gpu = doc["rows"][0]["on_gpu"]
    assert code == (0 if (not on_gpu or all(r["verdict"] == "agree" for r in doc["rows"])) else 1)


def test_agreement_passes_the_h200s_spread_and_fails_a_clock_10_percent_off():
    assert selfcheck.agreement(H200_LIKE)["verdict"] == "agree"
    for bias in (1.10, 1 / 1.10):
        got = selfcheck.agreement([r * bias for r in H200_LIKE])
        assert got["verdict"] == "disagree", got
    assert selfcheck.agreement([0.97, 1.06, 1.0, 1.09])["verdict"] == "too noisy"  # could hide a 10% error
    assert selfcheck.agreement([1.01])["verdict"] == "too few processes"  # one process: no spread measured


@given(st.lists(st.floats(0.5, 2.0), min_size=1, max_size=8))
def test_agreement_never_passes_a_mean_ratio_beyond_its_bounds(ratios):
    got = selfcheck.agreement(ratios)
    if got["verdict"] == "agree":
        assert abs(math.log(got["ratio"])) <= math.log1p(selfcheck.AGREE) + math.log1p(selfcheck.MAX_HALF) + 1e-12
        assert got["half_width"] <= selfcheck.MAX_HALF


@given(st.lists(st.floats(0.98, 1.02), min_size=4, max_size=8), st.sampled_from([1.10, 1 / 1.10]))
def test_a_clock_10_percent_off_is_caught_at_the_spread_seen(jitter, bias):
    """Four or more processes whose ratios scatter by ±2% around a 10% bias: always 'disagree'."""
    assert selfcheck.agreement([bias * j for j in jitter])["verdict"] == "disagree"


class _FakeWorker:
    """A worker whose selfcheck rows carry a planted bias of the harness's clock (synthetic numbers)."""

    bias, calls = 1.0, 0

    def __init__(self, fw):
        self.fw = fw

    def request(self, op, timeout=None):
        if op == "hello":
            return {"available": True, "why": "", "on_gpu": True, "env": {"gpu": "fake", "version": "0"}}
        _FakeWorker.calls += 1
        jitter = 1 + 0.01 * (-1) ** _FakeWorker.calls  # ±1% from one process to the next
        return [{"kernel": k, "on_gpu": True, "harness_s": t * self.bias * jitter, "harness_rel_iqr": 0.01,
                 "harness_events_s": t, "tool": "fake tool", "tool_s": t, "tool_back_to_back_s": t}
                for k, t in (("gemm_fp32_4096", 2.7e-3), ("sum_1024Mi_fp32", 9.6e-4))]

    def close(self):
        pass


@pytest.mark.parametrize("bias,code", [(1.0, 0), (1.02, 0), (1.10, 1), (0.90, 1)])
def test_run_selfcheck_fails_a_planted_clock_bias(monkeypatch, tmp_path, bias, code):
    monkeypatch.setattr(selfcheck.W, "ProcessWorker", _FakeWorker)
    monkeypatch.setattr(_FakeWorker, "bias", bias)
    assert selfcheck.run_selfcheck(["torch"], tmp_path) == code
    (path,) = tmp_path.glob("selfcheck_*.json")
    rows = json.loads(path.read_text())["rows"]
    assert len(rows) == 2 and all(r["processes"] == selfcheck.PROCESSES for r in rows)
    assert all(r["verdict"] == ("agree" if code == 0 else "disagree") for r in rows), rows


class _NoisyFirstWorker(_FakeWorker):
    """Processes whose harness/tool ratio scatters by ±`amplitude` for the first `noisy` calls, ±0.5% after."""

    noisy, amplitude = 4, 0.04

    def request(self, op, timeout=None):
        if op == "hello":
            return super().request(op)
        _FakeWorker.calls += 1
        k = _FakeWorker.calls
        jitter = 1 + (self.amplitude if k <= self.noisy else 0.005) * (-1) ** k
        return [{"kernel": "sum_1024Mi_fp32", "on_gpu": True, "harness_s": 1e-3 * jitter, "harness_rel_iqr": 0.01,
                 "harness_events_s": 1e-3, "tool": "fake tool", "tool_s": 1e-3, "tool_back_to_back_s": 1e-3}]


@pytest.mark.parametrize("noisy,amplitude,processes,verdict",
                         [(4, 0.04, 6, "agree"), (0, 0.04, 4, "agree"), (99, 0.15, 10, "too noisy")])
def test_a_too_noisy_row_gets_more_processes_until_decided_or_the_cap(monkeypatch, noisy, amplitude, processes,
                                                                       verdict):
    """Four processes on a drifting host can be too few: one more at a time, up to MAX_PROCESSES."""
    monkeypatch.setattr(selfcheck.W, "ProcessWorker", _NoisyFirstWorker)
    monkeypatch.setattr(_NoisyFirstWorker, "noisy", noisy)
    monkeypatch.setattr(_NoisyFirstWorker, "amplitude", amplitude)
    monkeypatch.setattr(_FakeWorker, "calls", 0)
    _, (row,), per_process = selfcheck.measure("torch")
    assert (row["verdict"], row["processes"], len(per_process)) == (verdict, processes, processes)


def test_a_framework_lost_in_an_added_process_fails_the_selfcheck(monkeypatch, tmp_path):
    """Too noisy after four processes, then unavailable in the sixth: a failure, not a skip that passes."""

    class Vanishing(_NoisyFirstWorker):
        def request(self, op, timeout=None):
            if op == "hello" and _FakeWorker.calls >= 5:
                return {"available": False, "why": "planted: gone", "on_gpu": True, "env": {}}
            return super().request(op)

    monkeypatch.setattr(selfcheck.W, "ProcessWorker", Vanishing)
    monkeypatch.setattr(_NoisyFirstWorker, "noisy", 99)
    monkeypatch.setattr(_FakeWorker, "calls", 0)
    with pytest.raises(selfcheck.W.WorkerError, match="became unavailable after 5 process"):
        selfcheck.measure("torch")
    monkeypatch.setattr(_FakeWorker, "calls", 0)
    assert selfcheck.run_selfcheck(["torch"], tmp_path) == 1


@pytest.mark.gpu
@pytest.mark.parametrize("fw", ["torch", "cupy"])
def test_harness_clock_agrees_with_the_frameworks_own_tool(fw):
    """Judged on the interval over PROCESSES worker processes, not on one process's point estimate."""
    gpu_backend_or_skip(fw)
    info, rows, _ = selfcheck.measure(fw)
    assert info["available"] and len(rows) == 3
    for r in rows:
        assert r["verdict"] == "agree", (f"{fw} {r['kernel']}: {r['verdict']} over {r['processes']} processes, "
                                         f"harness/tool ratios {[round(x, 4) for x in r.get('ratios', [])]}, "
                                         f"interval {r.get('lo')} to {r.get('hi')}")


@pytest.mark.parametrize("cap_gib, elements", [(21.2, 1 << 30), (11.88, 1 << 29), (3.2, 1 << 27), (None, 1 << 30)])
def test_the_clock_kernels_arrays_fit_the_memory_cap(cap_gib, elements):
    """4 GiB arrays on an H200's 0.15 cap (21 GB); 2 GiB on an H100's (11.9 GiB), where 4 GiB ran out."""
    from types import SimpleNamespace

    from harness.backends.base import Backend

    b = SimpleNamespace(on_gpu=True, memory_cap={"bytes": None if cap_gib is None else int(cap_gib * 2**30)})
    got = Backend.clock_elements(b)
    assert got == elements
    if cap_gib is not None:  # x, y, the sum and the one before it, float32
        assert 4 * 4 * got + (256 << 20) <= cap_gib * 2**30 < 4 * 4 * 2 * got or got == 1 << 30  # and room beside
    assert Backend.clock_elements(SimpleNamespace(on_gpu=False, memory_cap={"bytes": 1 << 40})) == 1 << 20
