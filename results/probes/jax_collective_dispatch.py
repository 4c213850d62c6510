"""Probe: why JAX's out-of-place collectives at 4 KiB cost 10-26 us a call more than its in-place ones.

On the H200 at world size 1 (results/20261205T031344Z), JAX's out_of_place rows took 61.9 us (broadcast),
64.2 (all_reduce), 53.9 (all_gather) and 52.8 (reduce_scatter) a call against 35.9, 49.4, 44.5 and 41.0 in
place, while torch took 26.9, 49.2, 23.5 and 33.5 out of place: the two rows over issue 28's 2x are JAX's
out-of-place ones. On the CPU the same programs dispatch in 5 us either way, and both compile to one
all-reduce over a one-device group (the broadcast's mask folds away): the difference is the GPU runtime's.

Each way below is impls/collectives/jax_impl.py's program or a sibling that changes one thing, timed as the
harness times the rows: 20 back-to-back calls, host wall time to block_until_ready, per call, the buffers
refilled untimed before each sample; the ways take their samples in turn (one sample each a round), so a
change of the host's speed reaches all of them alike. Median and quartiles over the rounds.
  in_chain     donate the input; one buffer, each call donating the last call's output (the impl's broadcast)
  in_ring      donate the input; 20 buffers, one a call (the impl's all_reduce on two or more ranks)
  out_chain    (x, recv) with recv donated and kept: each call donates the last call's output (the impl)
  out_ring     as out_chain, 20 receive buffers, one a call: no call donates a buffer still being written
  out_keep     (x, recv), recv kept but not donated: XLA allocates every output
  out_alloc    f(x): no receive buffer, XLA allocates every output
Then one sample of each way runs under jax.profiler, and the trace's GPU plane gives the device events a
call (kernels, copies, their names) and the device time a call.
Usage: python3 results/probes/jax_collective_dispatch.py [--distributed] [out.json] [trace_dir]
(--distributed: jax.distributed.initialize as one process of one, as the harness's rank processes run.)
"""
from __future__ import annotations

import json
import sys
import time

import numpy as np

CALLS, ROUNDS, N = 20, int(__import__("os").environ.get("PROBE_ROUNDS", 150)), 1024  # 4 KiB of float32


def main(argv: list[str]) -> None:
    import jax
    import jax.numpy as jnp
    from jax import lax
    from jax.sharding import Mesh, NamedSharding
    from jax.sharding import PartitionSpec as P

    distributed = "--distributed" in argv
    argv = [a for a in argv if a != "--distributed"]
    if distributed:
        jax.distributed.initialize("localhost:12391", 1, 0)
    mesh = Mesh(np.array(jax.devices()), ("r",))
    blocks = NamedSharding(mesh, P("r"))
    spmd = lambda f: jax.shard_map(f, mesh=mesh, in_specs=P("r"), out_specs=P("r"))  # noqa: E731
    into = lambda f: jax.shard_map(lambda a, _r: f(a), mesh=mesh, in_specs=(P("r"), P("r")),  # noqa: E731
                                   out_specs=P("r"))
    ops = {"broadcast": lambda a: lax.psum(jnp.where(lax.axis_index("r") == 0, a, jnp.zeros_like(a)), "r"),
           "all_reduce": lambda a: lax.psum(a, "r"),
           "all_gather": lambda a: lax.all_gather(a, "r", axis=0, tiled=True)}
    put = lambda v: jax.make_array_from_process_local_data(blocks, np.full(N, v, np.float32))  # noqa: E731
    copy = jax.jit(jnp.copy)
    out = {"jax": jax.__version__, "device": str(jax.devices()[0]), "distributed": distributed, "us": {},
           "trace": {}}
    for name, f in ops.items():
        x, fill = put(1.0), put(0.0)
        f_in = jax.jit(spmd(f), donate_argnums=0)
        f_out = jax.jit(into(f), donate_argnums=1, keep_unused=True)
        f_keep = jax.jit(into(f), keep_unused=True)
        f_alloc = jax.jit(spmd(f))
        st: dict = {}

        def refill(k):
            st["ring"] = [copy(fill) for _ in range(k)]
            jax.block_until_ready(st["ring"])

        def chain(fn, with_x):
            def run():
                b = st["ring"][0]
                for _ in range(CALLS):
                    b = fn(x, b) if with_x else fn(b)
                return b
            return 1, run

        def ring(fn, with_x):
            def run():
                for i in range(CALLS):
                    st["ring"][i] = fn(x, st["ring"][i]) if with_x else fn(st["ring"][i])
                return st["ring"]
            return CALLS, run

        ways = {"in_chain": chain(f_in, False), "in_ring": ring(f_in, False), "out_chain": chain(f_out, True),
                "out_ring": ring(f_out, True), "out_keep": (1, lambda: [f_keep(x, st["ring"][0]) for _ in range(CALLS)]),
                "out_alloc": (1, lambda: [f_alloc(x) for _ in range(CALLS)])}
        times: dict[str, list[float]] = {w: [] for w in ways}
        for k, run in ways.values():  # compile, and one untimed sample
            refill(k)
            jax.block_until_ready(run())
        for _ in range(ROUNDS):
            for w, (k, run) in ways.items():
                refill(k)
                t0 = time.perf_counter()
                jax.block_until_ready(run())
                times[w].append((time.perf_counter() - t0) / CALLS)
        out["us"][name] = {w: [round(float(q) * 1e6, 2) for q in np.percentile(t, [25, 50, 75])]
                           for w, t in times.items()}
        for w, q in out["us"][name].items():
            print(f"{name:11s} {w:10s} {q[1]:7.1f} us a call (quartiles {q[0]:.1f}-{q[2]:.1f})", flush=True)
        trace_dir = argv[1] if len(argv) > 1 else "/tmp/jax_collective_trace"
        for w, (k, run) in ways.items():
            refill(k)
            d = f"{trace_dir}/{name}_{w}"
            with jax.profiler.trace(d):
                jax.block_until_ready(run())
            out["trace"][f"{name}/{w}"] = per_call(d)
            print(f"{name:11s} {w:10s} trace {json.dumps(out['trace'][f'{name}/{w}'])}", flush=True)
    if argv:
        with open(argv[0], "w") as fh:
            json.dump(out, fh, indent=1)


def per_call(trace_dir: str) -> dict:
    """The trace's GPU events a call, per line of the GPU plane (its streams, and any summary line the
    profiler adds beside them): how many a call, the most frequent names, the busy time a call in us."""
    import glob
    from collections import Counter

    from jax.profiler import ProfileData

    path = sorted(glob.glob(f"{trace_dir}/**/*.xplane.pb", recursive=True))[-1]
    lines = {}
    for plane in ProfileData.from_file(path).planes:
        if not plane.name.startswith("/device:GPU"):
            continue
        for line in plane.lines:
            names = Counter(e.name[:48] for e in line.events)
            busy = sum(e.end_ns - e.start_ns for e in line.events)
            lines[f"{plane.name}|{line.name}"] = {"events_per_call": round(sum(names.values()) / CALLS, 2),
                                                  "busy_us_per_call": round(busy / CALLS / 1e3, 2),
                                                  "names": dict(names.most_common(4))}
    return lines

if __name__ == "__main__":
    main(sys.argv[1:])
