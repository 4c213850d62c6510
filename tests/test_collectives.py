"""The collectives' timing method (nccl-tests'): a sample of back-to-back calls timed as one and divided
by their count, the last call's outputs checked; the in-place layout and its buffers; the rows' floor
per placement. The rank groups themselves run in tests/test_ranks.py."""
from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from harness.measure import timing
from harness.measure.timing import TimingConfig, measure
from scenarios import collectives as C
from scenarios import get

CFG = TimingConfig(warmup=1, min_repeats=3, max_repeats=3, min_time_s=0.0)


def _clocked(monkeypatch, cost: float = 1.0):
    """A fake clock that moves `cost` seconds per call, and a backend that only synchronizes."""
    clock = [0.0]
    monkeypatch.setattr(timing, "wall", lambda: clock[0])
    backend = SimpleNamespace(synchronize=lambda out=None: None, event_timer=lambda: None)
    made: list[int] = []

    def call():
        clock[0] += cost
        made.append(len(made))
        return {"out": np.array([made[-1]])}

    return backend, call, made


def test_a_sample_of_k_calls_is_timed_per_call(monkeypatch):
    backend, call, made = _clocked(monkeypatch)
    m = measure(call, backend, CFG, calls=20)
    assert m.samples["device_done"] == [1.0, 1.0, 1.0] and m.samples["host_return"] == [1.0] * 3
    assert m.first_call_s == 1.0  # the first call is one call, timed apart
    assert len(made) == 1 + 20 * (1 + 3)  # first, one warm-up sample, three timed samples


def test_one_call_a_sample_is_the_default(monkeypatch):
    backend, call, made = _clocked(monkeypatch, cost=2.0)
    m = measure(call, backend, CFG)
    assert m.samples["device_done"] == [2.0] * 3 and len(made) == 1 + 1 + 3


def test_the_checked_output_is_the_samples_last_call(monkeypatch):
    backend, call, made = _clocked(monkeypatch)
    seen: list[int] = []
    measure(call, backend, CFG, calls=5, check=lambda out: seen.append(int(out["out"][0])))
    assert seen == [1 + 5 + 4, 1 + 5 + 14]  # the last call of the first and of the last timed sample


def test_the_collectives_scenario_asks_for_nccl_tests_calls_and_the_mean_over_ranks():
    scn = get("collectives")
    assert scn.calls({"op": "all_reduce"}) == C.CALLS == 20 and scn.rank_time == "mean"
    assert [v.name for v in scn.variants] == ["out_of_place", "in_place"]
    assert get("ranks").calls({}) == 1 and get("ranks").rank_time == "slowest"  # other scenarios as they were


@pytest.mark.parametrize("op", C.OPS)
def test_in_place_layout_is_nccl_tests(op):
    n, c, r = 4, 16, 2
    size, take, give = C.in_place(op, c, n, r)
    buf = np.arange(size)
    if op == "all_gather":
        assert size == n * c and list(buf[take]) == list(range(r * c, (r + 1) * c)) and buf[give].size == n * c
    elif op == "reduce_scatter":
        assert size == c and buf[take].size == c and list(buf[give]) == list(range(r * c // n, (r + 1) * c // n))
    else:
        assert size == c and buf[take].size == buf[give].size == c
    assert C.slots({"op": op, "world_size": 2}) == (20 if op in C.GROWS else 1)
    assert C.slots({"op": op, "world_size": 1}) == 1  # one rank: no call changes its input


def test_each_placement_has_its_own_floor_and_barrier_none():
    p = {"op": "all_reduce", "bytes": 4096, "dtype": "float32", "world_size": 2}
    machine = {C.floor_key(p): 1.0, C.floor_key(p, in_place=True): 2.0}
    assert C.floor(p, machine, "out_of_place") == 1.0 and C.floor(p, machine, "in_place") == 2.0
    assert C.in_place_why("in_place", {"op": "barrier"}) and C.in_place_why("out_of_place", {"op": "barrier"}) is None
    assert C.in_place_why("in_place", {"op": "all_to_all"}, C.NCCL_NO_IN_PLACE)
    assert C.in_place_why("in_place", {"op": "all_to_all"}) is None  # JAX: donation, XLA buffers what it must


def _jax_collectives():
    """(JAX's loaded backend, its collectives impl, the scenario), or the test skipped with why."""
    from harness import backends
    from harness.workers.execute import load_impl

    b = backends.get("jax")
    ok, why = b.available()
    if not ok:
        pytest.skip(why)
    return b.load(), load_impl("collectives", "jax"), get("collectives")


@pytest.mark.parametrize("op", [o for o in C.OPS if o != "barrier"])
def test_jax_out_of_place_writes_into_its_receive_buffer_and_keeps_its_send_buffer(op):
    """nccl-tests' out-of-place layout in JAX: the receive buffer, made untimed, is donated and taken by
    the output, so a call neither allocates its output nor frees the last; the send buffer stays."""
    jb, impl, scn = _jax_collectives()
    params = dict(op=op, bytes=4096, dtype="float32", world_size=1, rank=0, seed=1)
    state = impl.prepare(scn.make_inputs(params), params, jb.device)
    impl.poison(state)
    for _ in range(3):
        recv, x = state["out"], state["x"]
        at = recv.addressable_data(0).unsafe_buffer_pointer()
        jb.synchronize(impl.run_out_of_place(state))
        assert recv.is_deleted(), f"{op}: the receive buffer was not donated (the call allocated its output)"
        assert state["out"].addressable_data(0).unsafe_buffer_pointer() == at, f"{op}: the output moved"
        assert not x.is_deleted(), f"{op}: the send buffer was consumed"


def test_jax_poison_lets_the_last_samples_buffers_go_before_making_the_new_ones():
    """Held across, JAX's fresh ring would cost two (2 x 20 x 256 MiB a rank at a 256 MiB all_reduce, more
    than a small --gpu-memory-fraction gives a process of an 80 GB card); torch and CuPy rewrite theirs in place."""
    jb, impl, scn = _jax_collectives()
    params = dict(op="all_reduce", bytes=4096, dtype="float32", world_size=1, rank=0, seed=1)
    state = impl.prepare(scn.make_inputs(params), params, jb.device)
    state["slots"] = C.calls(params)  # the ring of two or more ranks, whose calls change their input
    impl.poison(state)
    assert len(state["ring"]) == C.calls(params) > 1
    held, copy, last = [], state["copy"], [*state["ring"], state["out"]]

    def counting(a):  # how many of the last sample's buffers the state still holds while each new one is made
        held.append(sum(any(b is o for o in last) for b in [*state["ring"], state["out"]]))
        return copy(a)

    state["copy"] = counting
    impl.poison(state)
    assert held and set(held) == {0}, held
    assert len(state["ring"]) == C.calls(params) and state["out"] is not None


def test_device_bytes_counts_the_buffers_a_rank_keeps():
    """24 buffers at a 256 MiB all_reduce on two ranks (input, output, zeros, fill and 20 in the ring) in torch
    and CuPy, 25 in JAX (its receive buffer); on one rank a ring of one: 5, and 8 in JAX at reduce_scatter
    (its receive buffer and two returned chunks); and on
    the CPU, what JAX's rank really holds in a sample, counted by the buffers alive, not by the state's keys."""
    import gc

    mib = 256 << 20
    at = lambda op, n: dict(op=op, bytes=mib, dtype="float32", world_size=n)  # noqa: E731
    assert [C.device_bytes(at("all_reduce", 2), fw) for fw in ("torch", "cupy", "jax")] == [24 * mib] * 2 + [25 * mib]
    assert C.device_bytes(at("broadcast", 2), "torch") == 5 * mib and C.device_bytes(at("broadcast", 2), "jax") == 6 * mib
    assert C.device_bytes(at("all_gather", 2), "jax") == 11 * mib  # a receive buffer of two ranks' chunks
    assert C.device_bytes(at("all_reduce", 1), "torch") == 5 * mib
    assert C.device_bytes(at("reduce_scatter", 1), "jax") == 8 * mib
    jb, impl, scn = _jax_collectives()
    import jax

    def held() -> int:  # bytes of the distinct buffers alive in this process
        gc.collect()
        return sum({a.unsafe_buffer_pointer(): a.nbytes for a in jax.live_arrays()}.values())

    for op in [o for o in C.OPS if o != "barrier"]:
        params, most = dict(op=op, bytes=4096, dtype="float32", world_size=1, rank=0, seed=1), 0
        for variant in ("run_out_of_place", "run_in_place"):  # one process runs both: the point needs the larger
            base = held()
            state = impl.prepare(scn.make_inputs(params), params, jb.device)
            impl.poison(state)
            last = getattr(impl, variant)(state)  # the harness holds a call's outputs until the next returns
            jb.synchronize(last)
            now = getattr(impl, variant)(state)
            jb.synchronize(now)
            most = max(most, held() - base - 4)  # less the barrier's one element
            del state, last, now
        assert most == C.device_bytes(params, "jax"), (op, most)


BROADCAST_LOWERING = r"""
import json
import jax, jax.numpy as jnp
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
from impls.collectives import jax_impl as impl

mesh = Mesh(jax.devices()[:2], ("r",))
arg = jax.ShapeDtypeStruct((8,), jnp.float32, sharding=NamedSharding(mesh, P("r")))
spmd = jax.jit(jax.shard_map(impl._broadcast, mesh=mesh, in_specs=P("r"), out_specs=P("r")))
x = jax.device_put(jnp.arange(8.0), NamedSharding(mesh, P("r")))
print(json.dumps({"cuda": spmd.trace(arg).lower(lowering_platforms=("cuda",)).as_text(),
                  "cpu": spmd.trace(arg).lower().as_text(), "cpu_out": [float(v) for v in spmd(x)]}))
"""


def test_jax_broadcast_is_a_collective_broadcast_where_xla_lowers_one():
    """lax.pbroadcast lowers to XLA's collective-broadcast for GPUs (lowered here for CUDA on a CPU machine);
    XLA:CPU has no lowering for it, so the CPU runs the masked psum (all-reduce traffic) and says so."""
    pytest.importorskip("jax")
    import json
    import subprocess
    import sys

    from impls._shared.child import child_env

    env = child_env(XLA_FLAGS="--xla_force_host_platform_device_count=2", JAX_PLATFORMS="cpu")
    r = subprocess.run([sys.executable, "-c", BROADCAST_LOWERING], capture_output=True, text=True, timeout=120, env=env)
    assert r.returncode == 0, r.stderr[-2000:]
    got = json.loads(r.stdout.strip().splitlines()[-1])
    assert "stablehlo.collective_broadcast" in got["cuda"] and "all_reduce" not in got["cuda"]
    assert "all_reduce" in got["cpu"] and "collective_broadcast" not in got["cpu"]
    assert got["cpu_out"] == [0.0, 1.0, 2.0, 3.0, 0.0, 1.0, 2.0, 3.0]  # rank 0's block on both
