"""The stream scenarios (copy_compute_overlap, event_sync, concurrent_kernels): their references, their
claims' arithmetic, which variants run where, and — on a GPU — the behaviour they exist to show."""
from __future__ import annotations

import inspect
from pathlib import Path

from types import SimpleNamespace

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from harness import backends
from harness.check.equivalence import compare_outputs
from harness.workers.execute import load_impl, skip_reason, variant_call
from scenarios import concurrent_kernels, copy_compute_overlap, get
from tests.conftest import backend_or_skip, gpu_backend_or_skip


def _step(v: int) -> int:
    v = (v * 1664525 + 1013904223) % (1 << 32)
    return v ^ (v >> 16)


def _stepped(x, iters: int) -> list[int]:
    out = []
    for v in np.asarray(x).ravel().tolist():
        for _ in range(iters):
            v = _step(v)
        out.append(v)
    return out


@given(iters=st.integers(0, 300), xs=st.lists(st.integers(0, (1 << 32) - 1), min_size=1, max_size=5))
def test_concurrent_reference_runs_every_step(iters, xs):
    x = np.array([xs], dtype=np.uint32)
    got = concurrent_kernels.reference({"x": x}, {"jobs": 1, "elems": len(xs), "iters": iters, "seed": 0})["y"]
    assert got.dtype == np.int64 and got.ravel().tolist() == _stepped(x, iters)
    assert x.tolist() == [xs]  # the input is not stepped in place


def test_concurrent_steps_do_not_fold_into_one_affine_step():
    """No (a, c) gives k steps as v * a + c mod 2^32, for any k: a compiler cannot replace k steps by one."""
    x = np.array([[0, 1, 2, 3, 1 << 31, (1 << 32) - 1]], dtype=np.uint32)
    for k in range(1, 9):
        f = concurrent_kernels.reference({"x": x}, {"jobs": 1, "elems": x.size, "iters": k, "seed": 0})["y"][0]
        f = [int(v) for v in f]
        c, a = f[0], (f[1] - f[0]) % (1 << 32)  # the only affine map through (0, f(0)) and (1, f(1))
        assert any((a * int(v) + c) % (1 << 32) != fv for v, fv in zip(x[0], f)), f"{k} steps are affine"


def _module_constant(path: Path, name: str):
    import ast

    tree = ast.parse(path.read_text())
    return next(ast.literal_eval(n.value) for n in tree.body
                if isinstance(n, ast.Assign) and any(getattr(t, "id", None) == name for t in n.targets))


def test_cupy_kernel_source_computes_the_reference_on_the_host(tmp_path):
    """The CuPy RawKernel's C source, compiled for the host with one loop standing for the grid
    (blocks of THREADS, as spin launches them), against the reference: CuPy itself needs a GPU."""
    import ctypes
    import shutil
    import subprocess

    if shutil.which("g++") is None:
        pytest.skip("no g++ on this host")
    src = Path(__file__).parents[1] / "impls" / "concurrent_kernels" / "cupy_impl.py"
    code, threads = _module_constant(src, "CODE"), _module_constant(src, "THREADS")
    host = ("struct dim_ { unsigned int x; };\nstatic dim_ blockIdx, threadIdx, blockDim;\n#define __global__\n"
            + code + """
extern "C" void grid(const unsigned int* x, unsigned int* y, long long n, int iters, int threads) {
    blockDim.x = threads;
    for (long long b = 0; b < (n + threads - 1) / threads; ++b)
        for (int t = 0; t < threads; ++t) { blockIdx.x = b; threadIdx.x = t; lcg_spin(x, y, n, iters); }
}
""")
    (tmp_path / "k.cpp").write_text(host)
    subprocess.run(["g++", "-O1", "-shared", "-fPIC", "-o", str(tmp_path / "k.so"), str(tmp_path / "k.cpp")],
                   check=True, capture_output=True, timeout=120)
    lib = ctypes.CDLL(str(tmp_path / "k.so"))
    p = {"jobs": 2, "elems": 300, "iters": 37, "seed": 3}  # 600 elements: 5 blocks, the last one partial
    x = concurrent_kernels.make_inputs(p)["x"]
    y = np.full_like(x, 7)
    ptr = ctypes.POINTER(ctypes.c_uint32)
    lib.grid(x.ctypes.data_as(ptr), y.ctypes.data_as(ptr), ctypes.c_longlong(x.size), ctypes.c_int(p["iters"]),
             ctypes.c_int(threads))
    assert y.astype(np.int64).tolist() == concurrent_kernels.reference({"x": x}, p)["y"].tolist()


def test_triton_loop_body_computes_the_reference_step():
    """The Triton kernel's loop body (torch's GPU path; no Triton here), run on numpy uint32 arrays, which
    wrap mod 2^32 and shift logically as Triton's uint32 does, against the reference."""
    import textwrap

    src = inspect.getsource(load_impl("concurrent_kernels", "torch").spin)
    loop = src.split("for _ in range(iters):\n", 1)[1].split("tl.store", 1)[0]  # the first loop: the kernel's
    body = textwrap.dedent(loop)
    p = {"jobs": 1, "elems": 64, "iters": 9, "seed": 5}
    x = concurrent_kernels.make_inputs(p)["x"]
    ns = {"v": x.copy()}
    for _ in range(p["iters"]):
        exec(body, {}, ns)  # noqa: S102 - the kernel's own statements
    assert ns["v"].dtype == np.uint32
    assert ns["v"].astype(np.int64).tolist() == concurrent_kernels.reference({"x": x}, p)["y"].tolist()


def _row(device_done: float, iqr: float = 0.0, **metrics: float) -> dict:
    return {"timing": {"device_done": {"median": device_done, "iqr": iqr}, "metrics": metrics},
            "check": {"wrong": 0, "checked": 0}}


def _overlap_rows(overlapped_s: float) -> dict:
    return {"serial": _row(0.0175), "overlapped": _row(overlapped_s, copy_alone_ms=7.5, compute_alone_ms=10.0)}


def test_overlap_bounds_simplemulticopy_style():
    b = copy_compute_overlap.bounds(_overlap_rows(0.0105))
    assert b["no_overlap_bound_s"] == pytest.approx(0.0175) and b["full_overlap_bound_s"] == pytest.approx(0.010)
    assert b["vs_full_bound"] == pytest.approx(1.05)
    assert b["efficiency"] == pytest.approx((0.0175 - 0.0105) / 0.0075)  # share of the shorter stage hidden


@pytest.mark.parametrize("fw,overlapped_s,verdict", [
    ("torch", 0.0104, "confirmed"), ("cupy", 0.0107, "refuted"), ("jax", 0.0107, "confirmed"),
    ("jax", 0.0115, "refuted")])
def test_near_bound_targets(fw, overlapped_s, verdict):
    claim = next(c for c in copy_compute_overlap.SCENARIO.claims if c.id == "near_bound")
    v = claim.judge(_overlap_rows(overlapped_s), fw, {})
    assert v.verdict == verdict, v.evidence
    assert "full-overlap bound" in v.evidence and "efficiency" in v.evidence


def test_event_sync_claims_judge_from_numbers():
    scn = get("event_sync")
    judge = {c.id: c.judge for c in scn.claims}
    rows = {"device_synchronize": _row(5e-3, host_blocked_ms=4.9), "stream_synchronize": _row(5e-3, host_blocked_ms=2.7),
            "event_wait": _row(5e-3, host_blocked_ms=0.008), "no_sync": _row(5e-3, host_blocked_ms=0.0)}
    assert judge["event_frees_host"](rows, "torch", {}).verdict == "confirmed"  # 8 µs of 2.7 ms
    assert judge["device_sync_waits_for_all"](rows, "torch", {}).verdict == "confirmed"
    rows["event_wait"] = _row(5e-3, host_blocked_ms=0.1)
    assert judge["event_frees_host"](rows, "torch", {}).verdict == "refuted"  # 3.7%
    rows["no_sync"]["check"] = {"wrong": 7, "checked": 9, "worst": "output 'y'[0]: got nan"}
    v = judge["missing_wait_races"](rows, "torch", {})
    assert v.verdict == "confirmed" and "7 of 9" in v.evidence
    rows["no_sync"]["check"] = {"wrong": 0, "checked": 9}
    assert judge["missing_wait_races"](rows, "torch", {}).verdict == "inconclusive"
    # JAX's idioms hold by construction (data flow blocks for nothing; its "device" wait names the background
    # array): figures it cannot refute the claims with decide nothing
    rows["event_wait"] = _row(5e-3, host_blocked_ms=0.0)
    for claim in ("event_frees_host", "device_sync_waits_for_all"):
        v = judge[claim](rows, "jax", {})
        assert v.verdict == "inconclusive" and "holds by construction" in v.evidence, v


def test_concurrency_claims_judge_from_numbers():
    judge = {c.id: c.judge for c in get("concurrent_kernels").claims}
    rows = {"one_stream": _row(16e-3), "many_streams": _row(1.5e-3), "batched": _row(1.2e-3)}
    assert judge["concurrent"](rows, "cupy", {"jobs": 16}).verdict == "confirmed"
    assert judge["one_launch"](rows, "cupy", {"jobs": 16}).verdict == "confirmed"
    rows["many_streams"] = _row(15e-3)  # serialized despite the streams (as XLA may do)
    assert judge["concurrent"](rows, "jax", {"jobs": 16}).verdict == "refuted"


@pytest.mark.parametrize("scenario,variant", [("copy_compute_overlap", "overlapped"), ("event_sync", "event_wait"),
                                              ("event_sync", "stream_synchronize"), ("concurrent_kernels", "many_streams")])
def test_data_flow_variants_run_on_a_cpu_jax_but_stream_variants_skip_on_a_cpu_torch(scenario, variant):
    scn = get(scenario)
    v = scn.variant(variant)
    assert v.gpu_only
    t, j = backend_or_skip("torch"), backend_or_skip("jax")
    if t.on_gpu or j.on_gpu:
        pytest.skip("on a GPU every variant runs")
    assert "needs a CUDA device" in skip_reason(scn, v, t, load_impl(scenario, "torch"))
    assert skip_reason(scn, v, j, load_impl(scenario, "jax")) is None


def test_jax_cannot_express_a_missing_wait():
    j = backend_or_skip("jax")
    scn = get("event_sync")
    assert "not expressible in jax" in skip_reason(scn, scn.variant("no_sync"), j, load_impl("event_sync", "jax"))


# -- on a GPU: the behaviour each scenario exists to show ---------------------------------------------


def _run(fw: str, scenario: str, variant: str, params: dict, repeats: int = 1) -> tuple[list[dict], dict]:
    """Outputs (numpy) of `repeats` poisoned runs on one state, and the emitted metrics of the last."""
    from harness.measure.metrics import collecting

    b = backends.get(fw)
    scn = get(scenario)
    impl = load_impl(scenario, fw)
    state = impl.prepare(scn.make_inputs(params), params, b.device)
    call = variant_call(impl, scn.variant(variant))
    outs = []
    for _ in range(repeats):
        if hasattr(impl, "poison"):
            impl.poison(state)
        b.synchronize()
        with collecting() as metrics:
            out = call(state)
        b.synchronize(out)
        outs.append(b.to_numpy(out))
    del state
    b.free_memory()
    return outs, metrics


@pytest.mark.gpu
@pytest.mark.parametrize("fw", ["torch", "cupy", "jax"])
def test_overlapped_pipeline_computes_what_serial_does(fw):
    gpu_backend_or_skip(fw)
    scn = get("copy_compute_overlap")
    p = {"batches": 8, "rows": 512, "dim": 1024, "features": 512, "seed": 9}
    (want,), metrics = _run(fw, "copy_compute_overlap", "serial", p)
    assert 5 < metrics["h2d_GBps"] < 200, metrics  # pinned host-to-device, neither cached nor pageable
    for got in _run(fw, "copy_compute_overlap", "overlapped", p, repeats=3)[0]:
        assert compare_outputs(scn, p, got, want) is None


@pytest.mark.gpu
@pytest.mark.parametrize("fw", ["torch", "cupy"])
def test_missing_wait_reads_the_poison_and_the_event_does_not(fw):
    gpu_backend_or_skip(fw)
    scn = get("event_sync")
    p = scn.params_for_size("full") | {"seed": 4}
    want = scn.reference(scn.make_inputs(p), p)
    raced, _ = _run(fw, "event_sync", "no_sync", p, repeats=4)
    assert any(compare_outputs(scn, p, got, want) is not None for got in raced), "the race never showed"
    ordered, metrics = _run(fw, "event_sync", "event_wait", p, repeats=4)
    assert all(compare_outputs(scn, p, got, want) is None for got in ordered)
    assert metrics["host_blocked_ms"] < 0.5


@pytest.mark.gpu
@pytest.mark.parametrize("fw", ["torch", "cupy", "jax"])
def test_small_kernels_are_device_bound_and_bit_exact(fw):
    """Each job's kernel must run long enough to be device-bound (≫ a launch), else streams show nothing."""
    import time

    b = gpu_backend_or_skip(fw)
    scn = get("concurrent_kernels")
    p = {"jobs": 2, "elems": 4096, "iters": 1 << 16, "seed": 2}
    want = scn.reference(scn.make_inputs(p), p)
    outs, _ = _run(fw, "concurrent_kernels", "one_stream", p)
    assert compare_outputs(scn, p, outs[0], want) is None
    impl = load_impl("concurrent_kernels", fw)
    state = impl.prepare(scn.make_inputs(p), p, b.device)
    b.synchronize(impl.run_one_stream(state))
    t0 = time.perf_counter()
    b.synchronize(impl.run_one_stream(state))
    per_kernel = (time.perf_counter() - t0) / p["jobs"]
    assert per_kernel > 50e-6, f"{per_kernel * 1e6:.0f} µs per kernel: launch-bound at 2^16 steps"


def _jax_overlap_log(monkeypatch, variant: str, batches: int = 6) -> list[tuple[str, int]]:
    """The order in which JAX's copy_compute_overlap variant issues copies and steps and waits, with fakes."""
    backend_or_skip("jax")
    impl = load_impl("copy_compute_overlap", "jax")
    log: list[tuple[str, int]] = []

    def device_put(h, where):
        log.append(("copy", h))
        return h

    def step(x, w):
        log.append(("step", x))
        return SimpleNamespace(block_until_ready=lambda: log.append(("waited", x)))  # a future whose wait we record

    monkeypatch.setattr(impl.jax, "device_put", device_put)
    monkeypatch.setattr(impl, "step", step)
    monkeypatch.setattr(impl, "copy_then_step", lambda h, w, dev: log.append(("copy+step", h)))
    monkeypatch.setattr(impl, "report", lambda state: None)
    getattr(impl, f"run_{variant}")({"host": list(range(batches)), "w": None, "dev": None})
    return log


def test_jax_overlapped_prefetches_two_ahead_and_never_waits(monkeypatch):
    """The runtime runs a device_put after the compute queued before it (the H200 trace in
    docs/design/jax_prefetch.md): copy i+2 is issued right after step i, so it runs beside step i+1; one
    ahead would serialise copy and step. No host wait, and no more than two batches wait for their step."""
    log = _jax_overlap_log(monkeypatch, "overlapped")
    assert not [e for e in log if e[0] == "waited"], log
    for n, (what, i) in enumerate(log):
        steps = [j for w, j in log[:n] if w == "step"]
        copies = [j for w, j in log[:n + 1] if w == "copy"]
        if what == "copy":
            assert i < 2 or steps[-1] == i - 2, f"copy {i} not issued right after step {i - 2} ({log})"
            assert len(copies) - len(steps) <= 2, f"copy {i}: {len(copies) - len(steps)} batches wait ({log})"
        else:
            assert i in copies, f"step {i} before its copy ({log})"
    assert [i for w, i in log if w == "step"] == list(range(6))


def test_jax_serial_queues_copy_and_step_in_order_and_never_waits(monkeypatch):
    log = _jax_overlap_log(monkeypatch, "serial")
    assert log == [("copy+step", i) for i in range(6)]  # one program per batch; the host waits for none


def test_torch_job_kernel_runs_on_32_bit_values():
    import torch

    b = backend_or_skip("torch")
    impl = load_impl("concurrent_kernels", "torch")
    scn = get("concurrent_kernels")
    p = {"jobs": 2, "elems": 5, "iters": 3, "seed": 1}
    state = impl.prepare(scn.make_inputs(p), p, b.device)
    assert state["x"].dtype == torch.int32  # the uint32 bits: the same width as CuPy's and Pallas's uint32
    src = inspect.getsource(impl.spin)  # the GPU kernel: 32-bit loop, one element per thread
    assert "tl.uint32" in src and "int64" not in src.split("return y.view(torch.uint32)")[0]  # the GPU branch
    cupy_src = (Path(__file__).parents[1] / "impls" / "concurrent_kernels" / "cupy_impl.py").read_text()
    assert impl.BLOCK == load_impl("concurrent_kernels", "jax").BLOCK == 128 and "\nTHREADS = 128\n" in cupy_src
    y = impl.run_one_stream(state)["y"]
    assert all(t.dtype == torch.uint32 for t in y)


@pytest.mark.gpu
def test_cupy_overlapped_copies_wait_for_the_main_stream():
    """Work queued on the main stream that still writes the persistent staging buffers (a slow GEMM, then NaN
    into both) must land before the run's first copies: the copy stream waits on the main stream."""
    b = gpu_backend_or_skip("cupy")
    cp = b.fw
    scn = get("copy_compute_overlap")
    p = {"batches": 4, "rows": 256, "dim": 512, "features": 256, "seed": 5}
    impl = load_impl("copy_compute_overlap", "cupy")
    inputs = scn.make_inputs(p)
    state = impl.prepare(inputs, p, b.device)
    want = scn.reference(inputs, p)
    a = cp.random.standard_normal((4096, 4096), dtype=cp.float32)
    b.synchronize()
    for _ in range(3):
        impl.poison(state)
        for _ in range(4):
            a = a @ a / 64  # ~ms of main-stream work ahead of the fills
        for buf in state["bufs"]:
            buf.fill(cp.nan)
        out = impl.run_overlapped(state)
        b.synchronize(out)
        assert compare_outputs(scn, p, b.to_numpy(out), want) is None
