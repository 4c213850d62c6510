"""The ring the three dlpack_handoff impls share. Framework-free: it only calls each member's functions
(member, upload, on_stream, stage, busy, take, to_host, from_host, pointer, wait, fill_nan), which each
<framework>_impl.py defines with that framework's rules.

A framework's row starts the ring with that framework and ends it there: torch's row runs
torch -> CuPy -> JAX -> torch. Members are the frameworks available on the same kind of device, each
opened by its own impl's guest() (the ring imports nothing of the harness); where CuPy has no GPU the ring is
torch -> JAX -> torch and the STAGES stages alternate between the two.
"""
from __future__ import annotations

import importlib

from harness.measure.metrics import emit
from scenarios.dlpack_handoff import STAGES

ORDER = ("torch", "cupy", "jax")


def prepare(first, inputs, device):
    names = ORDER[ORDER.index(first):] + ORDER[:ORDER.index(first)]
    host = importlib.import_module(f"impls.dlpack_handoff.{first}_impl")
    share = host.share(device)  # the row's framework's cap on the GPU, set by the harness; None on a CPU
    members = []
    for name in names:
        if name == first:
            mod, dev = host, device
        else:
            try:
                mod = importlib.import_module(f"impls.dlpack_handoff.{name}_impl")
            except ImportError:
                continue  # not installed: left out of the ring (ring_frameworks says so)
            # Guests share the row's cap: a third of it each (see the scenario's note on memory caps).
            dev = mod.guest(share is not None, share / len(ORDER) if share is not None else None)
            if dev is None:
                continue  # no device of the same kind: left out of the ring
        part = mod.member(dev)
        members.append({"mod": mod, "part": part, "w": mod.upload(part, inputs["w"])})
    first_member = members[0]
    return {"members": members, "x": first_member["mod"].upload(first_member["part"], inputs["x"]), "kept": [],
            "out": None}


def hop(src, dst, y, how, counts):
    """Hand y from src to dst; returns dst's array. Called inside src's stream context unless off-stream."""
    counts["hops"] += 1
    counts["busy"] += bool(src["mod"].busy(src["part"], y))  # sampled at the hand-off, before the consumer acts
    if how == "via_host":
        x = dst["mod"].from_host(dst["part"], src["mod"].to_host(src["part"], y))
    else:
        x = dst["mod"].take(dst["part"], y)
    counts["same"] += dst["mod"].pointer(x) == src["mod"].pointer(y)
    return x


def run(state, how):
    members, n = state["members"], len(state["members"])
    x, kept, counts = state["x"], [], {"hops": 0, "busy": 0, "same": 0}
    for k in range(STAGES):
        m = members[k % n]
        nxt = members[(k + 1) % n] if k + 1 < STAGES else members[0]  # the last stage hands back to the first
        with m["mod"].on_stream(m["part"]):
            y = m["mod"].stage(m["part"], x, m["w"])  # queued on m's stream; still running when handed off
            if nxt is not m and how != "off_stream":
                x = hop(m, nxt, y, how, counts)  # the producer's stream is current: the protocol orders it
        if nxt is m:
            x = y
        elif how == "off_stream":
            x = hop(m, nxt, y, how, counts)  # the hazard: exported with the producer's default stream current
        kept += [(m, y, True), (nxt, x, False)]  # (framework, array, made by that framework's stage)
    state["kept"], state["out"] = kept, x  # every buffer outlives its consumers' work: released by settle
    emit("ring_frameworks", n)
    emit("hops", counts["hops"])
    emit("zero_copy_hops", counts["same"])
    emit("busy_handoffs", counts["busy"])
    return {"y": x}


def settle(state):
    """Before each run (untimed): wait for every member's streams, fill the buffers the last run's stages made
    with NaN, then release them. A recycled block then holds NaN, not last run's identical values, so a
    consumer that reads it too early (the hazard) cannot pass by luck."""
    kept, members = state["kept"], state["members"]
    for m in members:
        m["mod"].wait(m["part"], [a for owner, a, _ in kept if owner is m])
    if kept:  # the output's memory is the harness's (it may still hold a host view of it): never overwritten
        out = members[0]["mod"].pointer(state["out"])
        for m in members:
            m["mod"].fill_nan(m["part"], [a for owner, a, made in kept
                                          if owner is m and made and m["mod"].pointer(a) != out])
    state["kept"], state["out"] = [], None
