"""zero: every stage's equivalence at world size 2 (torch gloo, JAX CPU), the replicas bit-identical, the
paper's memory and communication models; and the ZeRO logic CuPy runs (impls/_shared/zero.py), run with
numpy and simulated collectives, one thread per rank."""
from __future__ import annotations

import os
import threading

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from harness.check.equivalence import run_equivalence
from harness.workers.ranks import RankGroup
from harness.measure.timing import PRESETS
from impls._shared import dp
from impls._shared import zero as Z
from scenarios import _ranks as R
from scenarios import get
from scenarios import zero as SZ
from tests.conftest import gpu_backend_or_skip

SMALL = {"width": 6, "depth": 3, "rows": 3, "steps": 3, "lr": 1e-3, "eps": 1e-4, "dtype": "float32", "seed": 4}
# Four equal layers: torch's ZeroRedundancyOptimizer shares whole tensors out evenly over 2 ranks.
MEMORY = {"width": 64, "depth": 4, "rows": 4, "steps": 2, "lr": 1e-3, "eps": 1e-4, "dtype": "float32", "seed": 2}


def test_every_stage_matches_the_float64_reference(group):
    eq = run_equivalence(get("zero"), lambda fw, p: group.request("equiv", "zero", p, timeout=300), [group.fw],
                         max_examples=3, seed=5)
    assert eq.status == "passed", eq.message


def test_every_stage_equals_ddp_and_replicas_are_bit_identical(group):
    p = SMALL | {"world_size": 2}
    out = group.request("equiv", "zero", p, timeout=300)
    want = SZ.train64(p, *SZ._data(p))
    for v in SZ.STAGES:
        got = out[v]["params"]
        assert got.shape[0] == 2 and np.array_equal(got[0], got[1]), v
        np.testing.assert_allclose(got[0], out["ddp"]["params"][0], rtol=1e-5, atol=2e-5, err_msg=v)
        assert np.abs(got[0] - want).max() < 1e-4  # a missed step would be off by ~lr = 1e-3


def test_memory_and_communication_models(group):
    p = MEMORY | {"world_size": 2}
    rows = {r["variant"]: r for r in group.request("time", "zero", MEMORY, PRESETS["smoke"], timeout=300)["rows"]}
    assert all(rows[s]["check"]["wrong"] == 0 for s in SZ.STAGES)
    m = {s: rows[s]["timing"]["metrics"] for s in SZ.STAGES}
    psi = SZ.n_params(p)
    assert psi == 4 * (64 * 64 + 64)
    verdicts = {c.id: c.judge(rows, group.fw, p) for c in get("zero").claims}
    for s in SZ.STAGES:
        assert m[s]["model_state_bytes"] == m[s]["param_bytes"] + m[s]["grad_bytes"] + m[s]["optim_bytes"]
    ratio = {s: m[s]["comm_bytes"] / m["ddp"]["comm_bytes"] for s in SZ.STAGES}
    kinds = {s: {k: m[s][f"comm_bytes_{k}"] for k in Z.KINDS} for s in SZ.STAGES}
    print({s: (m[s], ratio[s]) for s in SZ.STAGES}, verdicts)
    assert all(m[s]["comm_bytes"] == pytest.approx(sum(kinds[s].values())) for s in SZ.STAGES)
    # ring all-reduce: 2(N-1)/N x 4 Psi at N = 2 (torch: DDP also broadcasts its bucket order once, a few bytes)
    assert m["ddp"]["comm_bytes"] == pytest.approx(4 * psi, rel=1e-3)
    # Stage 1 in every framework: a reduce-scatter of the gradient and an all-gather of the parameters, each
    # (N-1)/N x 4 Psi (no all-reduce, no broadcast: not ZeroRedundancyOptimizer's 1.5x).
    half = {"all_reduce": 0, "broadcast": 0, "reduce_scatter": 2 * psi, "all_gather": 2 * psi}
    assert kinds["zero1"] == pytest.approx(half), kinds["zero1"]
    assert ratio["zero1"] == pytest.approx(1.0, rel=1e-3) and ratio["zero2"] == pytest.approx(1.0, rel=1e-3)
    # The timed call of zero2 and zero3 gathers no result: per step, one all-gather of the parameters (zero2;
    # torch's a full_tensor() in the call would add 1/steps of it) or two, forward and backward (zero3).
    assert kinds["zero2"]["all_gather"] == pytest.approx(2 * psi), kinds["zero2"]
    assert kinds["zero3"] == pytest.approx(half | {"all_gather": 4 * psi}), kinds["zero3"]
    assert ratio["zero3"] == pytest.approx(1.5, rel=1e-3)
    if group.fw == "jax":  # every stage by the book: shards of every layer
        assert verdicts["memory_model"].verdict == "confirmed", verdicts["memory_model"].evidence
        assert all(m[s]["peak_bytes"] > 0 for s in SZ.STAGES)
        return
    # torch: FSDP2's "stage 2" reshards parameters after backward, so at the optimizer step it holds stage 3's
    # bytes (the documented finding); the other stages within 10% of the paper.
    for s in ("ddp", "zero1", "zero3"):
        assert abs(verdicts["memory_model"].numbers[f"{s}_ratio"] - 1) <= 0.1, verdicts["memory_model"].evidence
    assert m["zero2"]["model_state_bytes"] == pytest.approx(SZ.model_bytes("zero3", psi, 2), rel=0.01)


_BACKWARD_GATHERS = """
import os, sys
os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=2"
import jax, numpy as np
from jax.sharding import Mesh, NamedSharding
from impls._shared import zero as Z
from impls.zero import jax_impl as J
mesh, lay = Mesh(np.array(jax.devices()), ("r",)), Z.Layout([8] * 4, 2)
put = lambda a, spec: jax.device_put(a, NamedSharding(mesh, spec))
p, x = put(np.zeros((3, lay.padded[0]), np.float32), J.C), put(np.zeros((4, 8), np.float32), J.R)
sys.stdout.write(J._Programs(mesh, lay, "zero3", 1e-4).grad.lower(p, x, x).compile().as_text())
"""


def test_jax_zero3_compiled_program_gathers_the_parameters_again_in_backward():
    """Stage 3 frees a layer after forward and gathers it again for backward. In the compiled gradient program
    at world size 2 (two CPU devices of one process: the same shard_map program), forward's loop and backward's
    loop each hold an all-gather of a layer's chunk into its padded segment, and each runs once a layer."""
    import subprocess
    import sys

    text = subprocess.run([sys.executable, "-c", _BACKWARD_GATHERS], capture_output=True, text=True, check=True,
                          timeout=300, env={**os.environ, "PYTHONPATH": os.getcwd()}).stdout
    seg = Z.Layout([8] * 4, 2).padded[0]
    gathers = [line for line in text.splitlines() if f"f32[{seg}]{{0}} all-gather(" in line]
    backward = [line for line in gathers if "transpose(" in line]
    assert len(backward) == 1 and len(gathers) == 2, gathers
    assert Z.hlo_sent(text, 2)["all_gather"] == pytest.approx(2 * 0.5 * 4 * 3 * seg)  # 3 layers, twice


class _Sim:
    """Collectives among threads: every rank deposits its buffer, all wait, each computes its result."""

    def __init__(self, world):
        self.world, self.bar, self.slots = world, threading.Barrier(world, timeout=30), [None] * world

    def rank(self, r):
        sim = self

        class Comm:
            rank = r

            def _swap(self, a):
                sim.slots[r] = np.array(a)
                sim.bar.wait()
                got = list(sim.slots)
                sim.bar.wait()
                return got

            def all_reduce(self, buf):
                buf[...] = sum(self._swap(buf))

            def reduce_scatter(self, src, dst):
                dst[...] = sum(self._swap(src))[r * dst.size:(r + 1) * dst.size]

            def all_gather(self, src, dst):
                dst[...] = np.concatenate(self._swap(src))

        return Comm()


def _simulate(stage, p, dtype):
    n, (x, t) = int(p["world_size"]), SZ._data(p)
    lay, sim, out = Z.Layout(SZ.sizes(p), n), _Sim(n), [None] * n

    def rank(r):
        comm, st = Z.Counted(sim.rank(r), n), Z.init_state(np, stage, SZ.init(p).astype(dtype), lay, r)
        for k in range(int(p["steps"])):
            Z.step(np, stage, st, lay, dp.shard(x[k].astype(dtype), r, n), dp.shard(t[k].astype(dtype), r, n),
                   comm, p["lr"], p["eps"])
        sent = sum(comm.sent.values()) / int(p["steps"])
        out[r] = (Z.gather_params(np, stage, st, lay, comm), Z.held(st), sent)

    threads = [threading.Thread(target=rank, args=(r,)) for r in range(n)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert all(o is not None for o in out), "a rank failed"
    return out


@settings(max_examples=15, deadline=None)
@given(world=st.integers(1, 4), width=st.integers(1, 9), depth=st.integers(1, 3), rows=st.integers(1, 3),
       steps=st.integers(1, 3), seed=st.integers(0, 2**31 - 1))
def test_cupy_stages_with_numpy_equal_the_float64_reference(world, width, depth, rows, steps, seed):
    """What CuPy's ranks run, in float64 with numpy: every stage equals Adam on the global batch to rounding
    (odd widths pad the layers' chunks), every rank the same bits."""
    p = {"width": width, "depth": depth, "rows": rows, "steps": steps, "lr": 1e-3, "eps": 1e-4,
         "dtype": "float32", "seed": seed, "world_size": world}
    want = SZ.train64(p, *SZ._data(p))
    for stage in Z.STAGES:
        out = _simulate(stage, p, np.float64)
        np.testing.assert_allclose(out[0][0], want, rtol=1e-9, atol=1e-12, err_msg=stage)
        assert all(np.array_equal(o[0], out[0][0]) for o in out), stage


@pytest.mark.parametrize("world", [2, 4])
def test_cupy_stages_hold_the_paper_memory_and_send_its_bytes(world):
    p = MEMORY | {"world_size": world}
    psi, want = SZ.n_params(p), SZ.train64(p, *SZ._data(p))
    sent = {}
    for stage in Z.STAGES:
        out = _simulate(stage, p, np.float32)
        np.testing.assert_allclose(out[0][0], want, rtol=1e-5, atol=2e-5, err_msg=stage)
        held = sum(out[0][1].values())
        assert abs(held / SZ.model_bytes(stage, psi, world) - 1) <= 0.1, (stage, held)
        sent[stage] = out[0][2]
    assert sent["ddp"] == pytest.approx(2 * (world - 1) / world * 4 * psi)
    assert sent["zero1"] == sent["zero2"] == pytest.approx(sent["ddp"])
    assert sent["zero3"] == pytest.approx(1.5 * sent["ddp"])


@pytest.mark.gpu
@pytest.mark.parametrize("fw", ["torch", "cupy", "jax"])
def test_on_one_gpu_every_stage_runs_and_matches(fw, monkeypatch):
    """The lent machine has one GPU: a group of one rank, every stage against the float64 reference at a size
    where float32 sums run over 256 rows."""
    gpu_backend_or_skip(fw)
    monkeypatch.setenv(R.WORLD_SIZE_ENV, "1")
    g = RankGroup(fw, 1)
    try:
        assert g.request("hello", timeout=300)["available"]
        eq = run_equivalence(get("zero"), lambda _fw, p: g.request("equiv", "zero", p, timeout=300), [fw],
                             max_examples=5, seed=7)
        assert eq.status == "passed", eq.message
        p = {"width": 256, "depth": 4, "rows": 256, "steps": 3, "lr": 1e-3, "eps": 1e-4, "dtype": "float32",
             "seed": 2, "world_size": 1}
        want = SZ.train64(p, *SZ._data(p))
        for v, out in g.request("equiv", "zero", p, timeout=300).items():
            np.testing.assert_allclose(out["params"][0], want, rtol=1e-5, atol=2e-5, err_msg=v)
        # the full size at the seed whose near-zero gradients broke eps = 1e-6 (the module's text)
        p = dict(get("zero").sizes["full"], seed=20261205, world_size=1)
        want = SZ.train64(p, *SZ._data(p))
        for v, out in g.request("equiv", "zero", p, timeout=300).items():
            np.testing.assert_allclose(out["params"][0], want, rtol=1e-5, atol=2e-5, err_msg=f"full size: {v}")
    finally:
        g.close()


def test_a_shard_that_missed_its_last_update_is_outside_the_tolerance():
    """The module's argument for eps = 1e-4, at the full size: Adam moves near-zero gradients' parameters
    less than lr, but a stage that left one rank's half of the parameters at the step before is still
    caught by the scenario's tolerance, in most of its parameters (61% at this seed)."""
    p = dict(get("zero").sizes["full"], seed=20261205, world_size=2)
    x, t = SZ._data(p)
    good = SZ.train64(p, x, t)
    before = SZ.train64(dict(p, steps=p["steps"] - 1), x, t)
    half = good.size // 2
    bad = np.concatenate([good[:half], before[half:]])
    rtol, atol = get("zero").tolerance.for_dtype("float32")
    outside = np.abs(bad - good) > atol + rtol * np.abs(good)
    assert outside[half:].mean() > 0.5 and not outside[:half].any()


def _float32_run(p, x, t, seed, scale=1.0):
    """The MLP's Adam steps in float32 as another library would sum them: each GEMM's output moved by `scale` x
    the standard deviation of its rounding under another summation order (u sqrt(K / 6) ||terms||_2)."""
    from scenarios._models import mlp
    from scenarios._models.bound import U
    from scenarios._models.flat import unflatten

    rng = np.random.default_rng(seed)

    def mm(a, b):
        sd = U * np.sqrt(a.shape[1] / 6) * np.sqrt((a.astype(np.float64) ** 2) @ (b.astype(np.float64) ** 2))
        return (a @ b + rng.standard_normal(sd.shape) * sd * scale).astype(np.float32)

    flat = SZ.init(p).astype(np.float32)
    g, m, v = (np.zeros_like(flat) for _ in range(3))
    for k in range(int(p["steps"])):
        params, h, cache = unflatten(flat, SZ.sizes(p)), x[k], []
        for i, (w, b) in enumerate(params):
            z = mm(h, w) + b
            cache.append((h, z))
            h = np.maximum(z, 0) if i < len(params) - 1 else z
        dy, grads = (h - t[k]) * np.float32(2.0 / h.size), [None] * len(params)
        for i in reversed(range(len(params))):
            hh, z = cache[i]
            dz = dy * (z > 0) if i < len(params) - 1 else dy
            grads[i] = (mm(hh.T, dz), dz.sum(axis=0))
            if i > 0:
                dy = mm(dz, params[i][0].T)
        g[...] = np.concatenate([a.ravel() for layer in grads for a in layer])
        mlp.adam(np, flat, g, m, v, k + 1, float(p["lr"]), eps=float(p["eps"]))
    return flat


def test_another_summation_order_that_flips_a_relu_passes_through_the_derived_bound_alone():
    """At the full size and seed 20261205, float32 sums in another order (draw 1 of the emulation) put a
    pre-activation on the other side of a ReLU and 108 parameters up to 2.1e-4 off the float64 reference, as a
    GPU's CuPy rows did: outside the flat band, inside the derived bound (scenarios/_models/bound.py)."""
    from harness.check.equivalence import compare_arrays, compare_outputs

    scn = get("zero")
    p = dict(scn.sizes["full"], seed=20261205, world_size=1, rank=0)
    x, t = SZ._data(p)
    want = scn.reference(scn.make_inputs(p), p)
    got = {"params": _float32_run(p, x, t, seed=1)}
    rtol, atol = scn.tolerance.for_dtype("float32")
    flat = compare_arrays("params", got["params"], want["params"], rtol, atol)
    assert flat is not None and flat.n_bad > 50 and flat.abs_err > 1.5e-4, flat  # the flip: outside the band
    assert compare_outputs(scn, p, got, want) is None  # inside band + bound
    bound = scn.error_bound(p, "params")
    assert np.median(bound) < 5e-5 and (bound > atol).mean() < 0.1  # loose in few parameters only


def test_a_stage_that_skipped_its_last_update_is_outside_band_and_bound():
    """The derived bound does not let a wrong stage through: half the parameters a step behind stay
    outside band + bound in most of that half."""
    scn = get("zero")
    p = dict(scn.sizes["full"], seed=20261205, world_size=1)
    x, t = SZ._data(p)
    good = SZ.train64(p, x, t)
    before = SZ.train64(dict(p, steps=p["steps"] - 1), x, t)
    half = good.size // 2
    bad = np.concatenate([good[:half], before[half:]])
    rtol, atol = scn.tolerance.for_dtype("float32")
    outside = np.abs(bad - good) > atol + rtol * np.abs(good) + scn.error_bound(p, "params")
    assert outside[half:].mean() > 0.5 and not outside[:half].any()
    from harness.check.equivalence import compare_outputs

    assert compare_outputs(scn, p, {"params": bad[None]}, {"params": good[None]}) is not None
