"""data_parallel: every variant's equivalence at world size 2 (torch gloo, JAX CPU), the replicas
bit-identical, the unsynced hazard counted, the all-reduced bytes; and the data-parallel logic CuPy
runs (impls/_shared/dp.py), run with numpy and a simulated all-reduce."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from harness.equivalence import run_equivalence
from harness.ranks import RankGroup
from harness.timing import PRESETS
from impls._shared import dp
from scenarios import _ranks as R
from scenarios import data_parallel as D
from scenarios import get
from tests.conftest import gpu_backend_or_skip
from tests.test_ranks import group  # noqa: F401 - the same fixture: a torch and a JAX group of 2 ranks

SMALL = {"d_in": 5, "hidden": 7, "d_out": 3, "micro": 3, "accum": 2, "steps": 3, "lr": 0.05, "dtype": "float32",
         "seed": 4}


def test_every_variant_matches_the_float64_large_batch(group):
    eq = run_equivalence(get("data_parallel"), lambda fw, p: group.request("equiv", "data_parallel", p, timeout=300),
                         [group.fw], max_examples=3, seed=5)
    assert eq.status == "passed", eq.message


def test_replicas_are_bit_identical(group):
    out = group.request("equiv", "data_parallel", SMALL | {"world_size": 2}, timeout=300)
    for v in ("ddp_naive", "ddp_bucketed_overlap", "ddp_accumulate_no_sync"):
        got = out[v]["params"]
        assert got.shape[0] == 2 and np.array_equal(got[0], got[1]), v


def test_hazard_drifts_and_bytes_are_counted(group):
    scn = get("data_parallel")
    rows = {r["variant"]: r for r in group.request("time", "data_parallel", SMALL, PRESETS["smoke"], timeout=300)["rows"]}
    bad = rows["unsynced_init"]["check"]
    assert bad["wrong"] == bad["checked"] > 0, "each rank's own weights: every run is wrong"
    assert all(rows[v]["check"]["wrong"] == 0 for v in ("ddp_naive", "ddp_bucketed_overlap", "ddp_accumulate_no_sync"))
    grad_bytes = 4 * D.n_params(SMALL)
    m = rows["ddp_accumulate_no_sync"]["timing"]["metrics"]
    assert m["allreduce_bytes"] == m["grad_bytes"] == grad_bytes  # one all-reduce per step, not accum
    assert rows["ddp_naive"]["timing"]["metrics"]["comm_s"] > 0
    p = SMALL | {"world_size": 2}
    verdicts = {c.id: c.judge(rows, group.fw, p) for c in scn.claims}
    assert verdicts["no_sync_one_over_a"].verdict == "confirmed", verdicts["no_sync_one_over_a"].evidence
    assert verdicts["accumulation_is_large_batch"].verdict == "confirmed"
    if group.fw == "torch":  # DDP's comm hook saw every gradient byte once per step, in more than one bucket
        assert verdicts["bytes_2n1n"].verdict == "confirmed", verdicts["bytes_2n1n"].evidence
        assert rows["ddp_bucketed_overlap"]["timing"]["metrics"]["buckets"] > 1


@settings(max_examples=20, deadline=None)
@given(world=st.integers(1, 4), accum=st.integers(1, 3), micro=st.integers(1, 3), hidden=st.integers(1, 9),
       seed=st.integers(0, 2**31 - 1))
def test_shards_averaged_equal_the_global_batch(world, accum, micro, hidden, seed):
    """What CuPy's ranks do, in one process with numpy float64: each rank's accumulated gradient on its
    shard, bucket by bucket summed over ranks as backward finishes each bucket, then / N."""
    p = {"d_in": 4, "hidden": hidden, "d_out": 2, "micro": micro, "accum": accum, "steps": 1, "lr": 0.05,
         "dtype": "float32", "seed": seed, "world_size": world}
    dims, (x, t) = D.sizes(p), D._data(p)
    flat = D.init(p, seed).astype(np.float64)
    x, t = x[0].astype(np.float64), t[0].astype(np.float64)
    want = dp.local_grad(np, flat, dims, x, t, np.empty_like(flat))
    total, order = np.zeros_like(flat), []
    bks = dp.buckets(dims, max(1, flat.size // 3))
    first = {layer: (a, b) for a, b, layer in bks}
    for r in range(world):
        g = np.full_like(flat, np.nan)

        def ready(layer, g=g):
            order.append(layer)
            if layer in first:  # every layer of the bucket is written: it may be reduced now
                a, b = first[layer]
                total[a:b] += g[a:b]
        dp.local_grad(np, flat, dims, dp.shard(x, r, world), dp.shard(t, r, world), g, accum, on_layer=ready)
    np.testing.assert_allclose(total / world, want, rtol=1e-12, atol=1e-14)
    assert order == [2, 1, 0] * world
    covered = sorted((a, b) for a, b, _ in bks)
    assert covered[0][0] == 0 and covered[-1][1] == flat.size
    assert all(b0 == a1 for (_, b0), (a1, _) in zip(covered, covered[1:]))


class _Stand:
    """numpy standing in for cupy (copies on asarray, as a host-to-device copy does), with streams and
    events that only record their calls: the CuPy impl's logic, not its stream semantics."""

    def __init__(self, log):
        self.log, self.float32 = log, np.float32
        self.cuda = self
        self.Stream = lambda non_blocking=False: self
        self.Event = lambda: self
        self.get_current_stream = lambda: self

    def __getattr__(self, name):
        return getattr(np, name)

    def asarray(self, a):
        return np.array(a)

    def record(self, stream):
        self.log.append("record")

    def wait_event(self, event):
        self.log.append("wait")

    def synchronize(self):
        pass


class _OneRank:
    """NCCL at world size 1: an all-reduce copies, a broadcast leaves the buffer as it is."""

    def __init__(self, log):
        self.log = log

    def all_reduce(self, src, dst, op="sum", stream=None):
        self.log.append(("all_reduce", src.size, stream is not None))
        dst[...] = src

    def broadcast(self, buf, root=0, stream=None):
        self.log.append(("broadcast", buf.size))

    def barrier(self):
        pass


def test_cupy_impl_with_numpy_standing_in(monkeypatch):
    import importlib
    import sys

    from impls._shared import nccl

    log = []
    monkeypatch.setitem(sys.modules, "cupy", _Stand(log))
    monkeypatch.setitem(nccl._COMM, "cupy", _OneRank(log))
    monkeypatch.delitem(sys.modules, "impls.data_parallel.cupy_impl", raising=False)
    impl = importlib.import_module("impls.data_parallel.cupy_impl")
    p = SMALL | {"world_size": 1, "rank": 0}
    scn = get("data_parallel")
    inputs = scn.make_inputs(p)
    want = scn.reference(inputs, p)["params"]
    state = impl.prepare(inputs, p, None)
    for v in ("single_process", "grad_accumulation", "ddp_naive", "ddp_bucketed_overlap", "ddp_accumulate_no_sync"):
        log.clear()
        np.testing.assert_allclose(getattr(impl, f"run_{v}")(state)["params"], want, rtol=1e-5, atol=5e-6, err_msg=v)
        calls = [c for c in log if isinstance(c, tuple)]
        steps = SMALL["steps"]
        if v == "ddp_bucketed_overlap":  # every bucket once per step, on the side stream, after an event
            assert len(calls) == steps * len(state["buckets"]) > steps and all(c[2] for c in calls)
            assert sum(c[1] for c in calls) == steps * D.n_params(SMALL)
            assert log.count("wait") == len(calls) + steps  # one per bucket, and the step after the last
        elif v == "ddp_accumulate_no_sync":
            assert calls == [("all_reduce", D.n_params(SMALL), False)] * steps
    monkeypatch.delitem(sys.modules, "impls.data_parallel.cupy_impl")


@pytest.mark.gpu
@pytest.mark.parametrize("fw", ["torch", "cupy", "jax"])
def test_on_one_gpu_every_variant_runs_and_matches(fw, monkeypatch):
    """The lent machine has one GPU: a group of one rank. CuPy's hand-written backward (and every other
    variant) against the float64 reference, at a size where float32 sums run over 256 rows."""
    gpu_backend_or_skip(fw)
    monkeypatch.setenv(R.WORLD_SIZE_ENV, "1")
    g = RankGroup(fw, 1)
    try:
        assert g.request("hello", timeout=300)["available"]
        eq = run_equivalence(get("data_parallel"), lambda _fw, p: g.request("equiv", "data_parallel", p, timeout=300),
                             [fw], max_examples=5, seed=7)
        assert eq.status == "passed", eq.message
        p = {"d_in": 64, "hidden": 512, "d_out": 32, "micro": 128, "accum": 2, "steps": 3, "lr": 0.05,
             "dtype": "float32", "seed": 2, "world_size": 1}
        want = D.train64(p, *D._data(p))
        for v, out in g.request("equiv", "data_parallel", p, timeout=300).items():
            np.testing.assert_allclose(out["params"][0], want, rtol=1e-5, atol=5e-6, err_msg=v)
    finally:
        g.close()
