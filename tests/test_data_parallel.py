"""data_parallel: every variant's equivalence at world size 2 (torch gloo, JAX CPU), the replicas
bit-identical, the unsynced hazard counted, the all-reduced bytes; and the data-parallel logic CuPy
runs (impls/_shared/dp.py), run with numpy and a simulated all-reduce."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from harness.check.equivalence import run_equivalence
from harness.workers.ranks import RankGroup
from harness.measure.timing import PRESETS
from impls._shared import dp
from scenarios._models import mlp
from scenarios import _ranks as R
from scenarios import data_parallel as D
from scenarios import get
from tests.conftest import gpu_backend_or_skip

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
    """At world size 2, each communicating variant's bytes, counted from the calls (torch) or the compiled
    program (JAX), are the gradient's bytes once per step: what bytes_2n1n and no_sync_one_over_a judge."""
    scn = get("data_parallel")
    rows = {r["variant"]: r for r in group.request("time", "data_parallel", SMALL, PRESETS["smoke"], timeout=300)["rows"]}
    bad = rows["unsynced_init"]["check"]
    assert bad["wrong"] == bad["checked"] > 0, "each rank's own weights: every run is wrong"
    assert all(rows[v]["check"]["wrong"] == 0 for v in ("ddp_naive", "ddp_bucketed_overlap", "ddp_accumulate_no_sync"))
    grad_bytes = 4 * D.n_params(SMALL)
    for v in ("ddp_naive", "ddp_bucketed_overlap", "ddp_accumulate_no_sync", "unsynced_init"):
        m = rows[v]["timing"]["metrics"]
        assert m["allreduce_bytes"] == m["grad_bytes"] == grad_bytes, (v, m)  # once per step, not once per micro-batch
        assert m["buckets"] >= 1, (v, m)
    assert rows["ddp_naive"]["timing"]["metrics"]["comm_s"] > 0
    p = SMALL | {"world_size": 2}
    verdicts = {c.id: c.judge(rows, group.fw, p) for c in scn.claims}
    assert verdicts["no_sync_one_over_a"].verdict == "confirmed", verdicts["no_sync_one_over_a"].evidence
    assert verdicts["bytes_2n1n"].verdict == "confirmed", verdicts["bytes_2n1n"].evidence
    assert verdicts["accumulation_is_large_batch"].verdict == "confirmed"


def test_ddp_makes_the_buckets_of_the_shared_plan(group):
    """At a size of several buckets (first >= 1 MiB, then 25 MiB), torch's DDP all-reduces as many buckets a step
    as impls/_shared/dp.py plans (what CuPy runs); JAX's XLA makes its own, of the same bytes."""
    p = SMALL | {"d_in": 8, "hidden": 600, "d_out": 1000, "steps": 2}
    plan = dp.buckets(D.sizes(p), 4)
    assert len(plan) == 2
    rows = {r["variant"]: r for r in group.request("time", "data_parallel", p, PRESETS["smoke"], timeout=300)["rows"]}
    m = rows["ddp_bucketed_overlap"]["timing"]["metrics"]
    assert m["allreduce_bytes"] == m["grad_bytes"] == 4 * D.n_params(p)
    if group.fw == "torch":  # after the first step, which DDP runs with one bucket of everything
        assert m["buckets"] == len(plan), m


@settings(max_examples=20, deadline=None)
@given(world=st.integers(1, 4), accum=st.integers(1, 3), micro=st.integers(1, 3), hidden=st.integers(1, 9),
       caps=st.tuples(st.integers(1, 200), st.integers(1, 400)), seed=st.integers(0, 2**31 - 1))
def test_shards_averaged_equal_the_global_batch(world, accum, micro, hidden, caps, seed):
    """What CuPy's ranks do, in one process with numpy float64: each rank's accumulated gradient on its
    shard, bucket by bucket summed over ranks as backward finishes each bucket, then / N."""
    p = {"d_in": 4, "hidden": hidden, "d_out": 2, "micro": micro, "accum": accum, "steps": 1, "lr": 0.05,
         "dtype": "float32", "seed": seed, "world_size": world}
    dims, (x, t) = D.sizes(p), D._data(p)
    flat = D.init(p, seed).astype(np.float64)
    x, t = x[0].astype(np.float64), t[0].astype(np.float64)
    want = dp.local_grad(np, flat, dims, x, t, np.empty_like(flat))
    total, order = np.zeros_like(flat), []
    bks = dp.buckets(dims, 8, *caps)
    last = {j: (a, b) for a, b, j in bks}
    for r in range(world):
        g = np.full_like(flat, np.nan)

        def ready(j, g=g):
            order.append(j)
            if j in last:  # every tensor of the bucket is written: it may be reduced now
                a, b = last[j]
                assert not np.isnan(g[a:b]).any()
                total[a:b] += g[a:b]
        dp.local_grad(np, flat, dims, dp.shard(x, r, world), dp.shard(t, r, world), g, accum, on_ready=ready)
    np.testing.assert_allclose(total / world, want, rtol=1e-12, atol=1e-14)
    assert order == [5, 4, 3, 2, 1, 0] * world  # torch's ready order: last layer first, bias before weight
    covered = sorted((a, b) for a, b, _ in bks)
    assert covered[0][0] == 0 and covered[-1][1] == flat.size
    assert all(b0 == a1 for (_, b0), (a1, _) in zip(covered, covered[1:]))


def _ddp_rule(nbytes, first, cap):
    """DDP's own assignment (the C++ compute_bucket_assignment_by_size its reducer rebuilds buckets with), on
    float32 tensors of these sizes given in ready order."""
    import torch
    import torch.distributed as dist

    tensors = [torch.empty(n // 4) for n in nbytes]
    got, _ = dist._compute_bucket_assignment_by_size(tensors, [first, cap], [False] * len(tensors),
                                                     list(range(len(tensors))))
    return [list(b) for b in got]


@settings(max_examples=60, deadline=None)
@given(nbytes=st.lists(st.integers(1, 10).map(lambda k: 4 * k), min_size=1, max_size=12),
       first=st.integers(1, 30).map(lambda k: 4 * k), cap=st.integers(1, 60).map(lambda k: 4 * k))
def test_bucket_plan_is_ddps_rule(nbytes, first, cap):
    """Small multiples of 4 bytes, so that a bucket often reaches its limit exactly (DDP closes it then)."""
    pytest.importorskip("torch")
    assert dp.bucket_plan(nbytes, first, cap) == _ddp_rule(nbytes, first, cap)


def test_ddp_buckets_a_model_as_the_plan_says():
    """A real DDP (gloo, one rank, in this process) with its defaults: after its first step, the buckets its
    comm hook sees are dp.buckets' flat ranges in the same order, at the default 1 MiB and 25 MiB caps."""
    torch = pytest.importorskip("torch")
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    from impls.data_parallel.torch_impl import _model

    if dist.is_initialized():
        pytest.skip("a process group is already set up in this process")
    assert dp.FIRST_BUCKET_BYTES == dist._DEFAULT_FIRST_BUCKET_BYTES
    dims = [8, 3000, 2183, 200]  # buckets [b2, W2] >= 1 MiB, [b1, W1, b0] >= 25 MiB (it ends inside a layer), [W0]
    flat = np.concatenate([a.ravel() for layer in mlp.init_params(dims, 0) for a in layer])
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        model = _model(flat, dims, torch.device("cpu"))
        starts = {id(q): a for q, a in zip(model.parameters(), dp.offsets(dims)[0])}
        ddp, seen = DDP(model), []

        def hook(_, bucket):
            ps = bucket.parameters()
            seen.append((min(starts[id(q)] for q in ps), max(starts[id(q)] + q.numel() for q in ps)))
            fut = torch.futures.Future()
            fut.set_result(bucket.buffer())
            return fut

        ddp.register_comm_hook(None, hook)
        for _ in range(2):
            seen.clear()
            ddp(torch.zeros(2, dims[0])).sum().backward()
    finally:
        dist.destroy_process_group()
    assert seen == [(a, b) for a, b, _ in dp.buckets(dims, 4)]
    assert [j for _, _, j in dp.buckets(dims, 4)] == [4, 1, 0]


def test_no_framework_computes_the_first_layers_dx():
    """3 layers: 3 products forward and 5 backward (no dx of the first layer, whose input needs no gradient) in
    torch's autograd and JAX's grad, as in the hand-written backward CuPy runs (tests/test_mlp.py)."""
    torch = pytest.importorskip("torch")
    jax = pytest.importorskip("jax")
    from torch.utils._python_dispatch import TorchDispatchMode

    from impls.data_parallel import jax_impl, torch_impl

    dims, flat = D.sizes(SMALL), D.init(SMALL, 0)
    x, t = np.ones((4, dims[0]), np.float32), np.zeros((4, dims[-1]), np.float32)
    jaxpr = jax.make_jaxpr(lambda p: jax_impl._grads(p, x, t, 1))(dp.unflatten(flat, dims))
    assert str(jaxpr).count("dot_general[") == 8

    class Products(TorchDispatchMode):
        names: list = []

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            if func.__name__.split(".")[0] in ("mm", "addmm", "matmul", "bmm"):
                self.names.append(func.__name__)
            return func(*args, **(kwargs or {}))

    model = torch_impl._model(flat, dims, torch.device("cpu"))
    with Products() as seen:
        torch_impl._grads(model, torch.from_numpy(x), torch.from_numpy(t), 1)
    assert len(seen.names) == 8, seen.names


def test_jax_emits_the_all_reduces_of_its_compiled_program(monkeypatch):
    """At one rank on the CPU: the bytes and calls a JAX variant emits are those read out of the program it
    compiled (here a stand-in reader returns (7, 7000) for a program with an all-reduce), per step."""
    pytest.importorskip("jax")
    from harness import backends
    from harness.measure.metrics import collecting
    from impls.data_parallel import jax_impl

    b = backends.get("jax").load()
    read = []
    monkeypatch.setattr(dp, "hlo_all_reduces", lambda text: read.append(text) or (7 * ("all-reduce" in text), 7000))
    p = SMALL | {"world_size": 1, "rank": 0}
    state = jax_impl.prepare(get("data_parallel").make_inputs(p), p, b.device)
    for v in ("ddp_naive", "ddp_accumulate_no_sync"):
        with collecting() as m:
            b.synchronize(getattr(jax_impl, f"run_{v}")(state))
        assert m["allreduce_bytes"] == 7000 / SMALL["steps"] and m["grad_bytes"] == 4 * D.n_params(SMALL), (v, m)
        assert m["buckets"] == 7 / SMALL["steps"], (v, m)  # the explicit psums survive at one rank on the CPU
    assert len(read) == 2


def test_jax_naive_reduces_after_the_whole_backward():
    """ddp_naive's schedule: every psum takes its operand from one optimization barrier that comes after
    every product of the step (the whole backward), so XLA cannot start one during backward."""
    jax = pytest.importorskip("jax")
    from impls.data_parallel import jax_impl

    dims, flat = D.sizes(SMALL), D.init(SMALL, 0)
    xs, ts = np.ones((1, 4, dims[0]), np.float32), np.zeros((1, 4, dims[-1]), np.float32)
    step = jax.make_jaxpr(lambda f: jax_impl._model(f, xs, ts, dims, 0.05, 2, jax_impl._reducer(2, naive=True)),
                          axis_env=[("r", 2)])(flat).jaxpr
    names = [e.primitive.name for e in step.eqns]
    barrier = names.index("optimization_barrier")
    assert "dot_general" not in names[barrier:] and names.count("dot_general") == 2 * 8
    psums = [e for e in step.eqns if e.primitive.name.startswith("psum")]
    fenced = {id(v) for v in step.eqns[barrier].outvars}
    assert len(psums) >= 1 and all(id(v) in fenced for e in psums for v in e.invars)
    assert sum(len(e.invars) for e in psums) == 6  # one per gradient tensor


_HLO = """
  %all-reduce = f32[7,3]{1,0} all-reduce(f32[7,3]{1,0} %dot), channel_id=1, replica_groups={{0,1}}, to_apply=%add
  %all-reduce.1 = (f32[3]{0}, f32[4,3]{1,0}) all-reduce(f32[3]{0} %a, f32[4,3]{1,0} %b), to_apply=%add.1
  %all-reduce-start = f32[5]{0} all-reduce-start(f32[5]{0} %c), to_apply=%add.2
  %all-reduce-done = f32[5]{0} all-reduce-done(f32[5]{0} %all-reduce-start)
  %all-gather = f32[10]{0} all-gather(f32[5]{0} %d), dimensions={0}
  %add.3 = f32[5]{0} add(f32[5]{0} %all-reduce-done, f32[5]{0} %all-reduce-done)
"""


def test_all_reduces_are_read_from_a_compiled_program():
    assert dp.hlo_all_reduces(_HLO) == (3, 4 * (21 + 3 + 12 + 5))


def test_the_counting_communicator_counts_what_it_is_handed():
    calls = []
    comm = dp.Counted(type("C", (), {"all_reduce": lambda self, s, d, op="sum", stream=None: calls.append(s.size),
                                     "rank": 3})())
    comm.all_reduce(np.zeros(5, np.float32), None)
    comm.all_reduce(np.zeros((2, 3)), None, stream="side")
    assert calls == [5, 6] and comm.rank == 3
    assert comm.take() == (5 * 4 + 6 * 8, 2) and comm.take() == (0, 0)


class _Stand:
    """numpy standing in for cupy (copies on asarray, as a host-to-device copy does), with streams and
    events that only record their calls: the CuPy impl's logic, not its stream semantics."""

    def __init__(self, log):
        self.log, self.float32 = log, np.float32
        self.cuda = self
        self.Stream = lambda non_blocking=False: self
        self.Event = lambda **_: self
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
    """CuPy's variants against the float64 reference, their all-reduces counted by the wrapper, and DDP's
    buckets (here small caps, so that there are several) each all-reduced on the side stream as soon as
    backward wrote its last tensor, in the last micro-batch only."""
    import importlib
    import sys

    from harness.measure.metrics import collecting
    from harness.backends import nccl

    log = []
    monkeypatch.setitem(sys.modules, "cupy", _Stand(log))
    monkeypatch.setitem(nccl._COMM, "cupy", _OneRank(log))
    monkeypatch.delitem(sys.modules, "impls.data_parallel.cupy_impl", raising=False)
    impl = importlib.import_module("impls.data_parallel.cupy_impl")
    backward = mlp.backward_tensors

    def logged(*args):
        for j, g in backward(*args):
            log.append(("grad", j))
            yield j, g
    monkeypatch.setattr(mlp, "backward_tensors", logged)
    p = SMALL | {"world_size": 1, "rank": 0}
    scn = get("data_parallel")
    inputs = scn.make_inputs(p)
    want = scn.reference(inputs, p)["params"]
    state = impl.prepare(inputs, p, None)
    assert state["buckets"] == dp.buckets(D.sizes(p), 4)
    state["buckets"] = dp.buckets(D.sizes(p), 4, 40, 60)  # [b2, W2], [b1, W1], [b0, W0]: ends on weights
    steps, n = SMALL["steps"], D.n_params(SMALL)
    for v in ("single_process", "grad_accumulation", "ddp_naive", "ddp_bucketed_overlap", "ddp_accumulate_no_sync"):
        log.clear()
        with collecting() as m:
            np.testing.assert_allclose(getattr(impl, f"run_{v}")(state)["params"], want, rtol=1e-5, atol=5e-6,
                                       err_msg=v)
        calls = [c for c in log if c[0] == "all_reduce"]
        if v == "ddp_naive":  # one per tensor, on the current stream; comm_s's 6 x 6 once, in the first call
            assert len(calls) == 6 * 6 + 6 * steps and not any(c[2] for c in calls)
            assert m["buckets"] == 6 and m["comm_s"] > 0
        if v in ("ddp_bucketed_overlap", "ddp_accumulate_no_sync"):
            assert len(calls) == 3 * steps == m["buckets"] * steps and all(c[2] for c in calls)  # side stream
            assert log.count("wait") == len(calls) + steps  # one per bucket, and the step after the last
            a = SMALL["accum"] if v == "ddp_accumulate_no_sync" else 1
            order = [c[1] if c[0] == "grad" else "AR" for c in log if c[0] in ("grad", "all_reduce")]
            assert order == ([5, 4, 3, 2, 1, 0] * (a - 1) + [5, 4, "AR", 3, 2, "AR", 1, 0, "AR"]) * steps, v
        if v.startswith("ddp"):
            assert m["allreduce_bytes"] == m["grad_bytes"] == 4 * n, (v, m)
    state["buckets"] = state["buckets"][:2]  # at one rank an all-reduce copies: leaving one out changes no result
    with collecting() as m:
        impl.run_ddp_bucketed_overlap(state)
    assert m["allreduce_bytes"] == 4 * (n - 7 * 5 - 7) and m["buckets"] == 2  # counted, not the gradient's size
    big = SMALL | {"world_size": 1, "rank": 0, "hidden": 600, "d_out": 1000}
    assert impl.prepare(scn.make_inputs(big), big, None)["buckets"] == dp.buckets(D.sizes(big), 4) and \
        len(dp.buckets(D.sizes(big), 4)) == 2  # DDP's default caps
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
