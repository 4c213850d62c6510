"""input_pipeline: the prefetchers keep batches in flight, from page-locked memory, in step order."""
from __future__ import annotations

import numpy as np
import pytest

from harness.check.equivalence import compare_outputs
from harness.workers.execute import load_impl
from scenarios import get
from tests.conftest import backend_or_skip, gpu_backend_or_skip

SCN = get("input_pipeline")
P = {"steps": 5, "batches": 2, "batch": 16, "dim": 8, "hidden": 12, "dtype": "float32", "seed": 9}


def test_jax_prefetch_issues_each_copy_two_steps_ahead_and_never_waits(monkeypatch):
    """A copy queued after step i runs after it (docs/design/jax_prefetch.md): copy i+2 right after step i
    runs beside step i+1; one ahead would serialise them. At most two batches wait for their step."""
    backend_or_skip("jax")
    impl = load_impl(SCN.name, "jax")
    log = []

    def device_put(batch, where):
        log.append(("copy", int(batch[0][0])))
        return batch

    monkeypatch.setattr(impl.jax, "device_put", device_put)
    source = ((np.full(3, i, np.float32),) for i in range(5))
    for k, batch in enumerate(impl.to_device_ahead({"hbm": None}, source)):
        assert int(np.asarray(batch[0])[0]) == k  # in order
        log.append(("step", k))  # what train does: step k enqueued
    for n, (what, i) in enumerate(log):
        steps = [j for w, j in log[:n] if w == "step"]
        copies = [j for w, j in log[:n + 1] if w == "copy"]
        if what == "copy":
            assert i < 2 or steps[-1] == i - 2, f"copy {i} not issued right after step {i - 2}: {log}"
            assert len(copies) - len(steps) <= 2, log
        else:
            assert i in copies, log
    assert [i for w, i in log if w == "step"] == list(range(5))


@pytest.mark.parametrize("fw", ["torch", "jax"])
def test_naive_and_compute_only_take_the_same_batches_in_the_same_order(fw):
    b = backend_or_skip(fw)
    impl = load_impl(SCN.name, fw)
    inputs = SCN.make_inputs(P)
    outs = {}
    for v in ("naive", "compute_only"):
        state = impl.prepare(inputs, P, b.device)
        out = getattr(impl, f"run_{v}")(state)
        b.synchronize(out)
        outs[v] = b.to_numpy(out)
    want = SCN.reference(inputs, P)
    assert outs["naive"]["losses"].shape == (P["steps"],)
    for v, got in outs.items():
        assert compare_outputs(SCN, P, got, want) is None, v


@pytest.mark.gpu
@pytest.mark.parametrize("fw", ["torch", "cupy", "jax"])
def test_prefetched_batches_come_from_page_locked_memory(fw):
    b = gpu_backend_or_skip(fw)
    impl = load_impl(SCN.name, fw)
    state = impl.prepare(SCN.make_inputs(P), P, b.device)
    first = next(iter(impl.host_batches(state, pin=True)))
    if fw == "torch":
        assert all(t.is_pinned() for t in first)
    elif fw == "cupy":
        rt = b.fw.cuda.runtime
        assert all(rt.pointerGetAttributes(a.ctypes.data).type == rt.memoryTypeHost for a in first["pinned"])
    else:
        assert all(a.sharding.memory_kind == "pinned_host" for a in first)
        staged = next(impl.to_device_ahead(state, impl.host_batches(state, pin=True)))
        assert all(a.sharding.memory_kind == "device" for a in staged)


@pytest.mark.gpu
@pytest.mark.parametrize("fw", ["torch", "cupy", "jax"])
def test_prefetched_matches_naive_run_after_run(fw):
    b = gpu_backend_or_skip(fw)
    impl = load_impl(SCN.name, fw)
    p = P | {"steps": 7, "batches": 3, "batch": 512, "dim": 256, "hidden": 1024}  # ring slots and pool blocks reused
    inputs = SCN.make_inputs(p)
    want = SCN.reference(inputs, p)
    state = impl.prepare(inputs, p, b.device)
    for _ in range(3):
        out = impl.run_prefetched(state)
        b.synchronize(out)
        assert compare_outputs(SCN, p, b.to_numpy(out), want) is None
