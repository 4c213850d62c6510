"""Lease 9 probe: JAX's kernel clock read from the session's XSpace in memory (1f9a64e) against the public path that
writes and parses trace.json: the same figures, and what each costs a request. Prints one JSON line per reading."""
import json
import sys
import time

from harness import backends
from harness.measure import kernel_clock as K
from harness.workers.execute import load_impl, variant_call
from scenarios import get

b = backends.get("jax").load()
public = lambda opts: None  # noqa: E731 - _session's answer where a JAX has no in-memory XSpace
xspace = b._session


def path(name):
    b._session = xspace if name == "xspace" else public


# 1. selfcheck's fixed kernels, traced by both paths in turn (three rounds)
for rnd in range(3):
    for name in ("xspace", "trace.json"):
        path(name)
        for kname, call in b.clock_kernels().items():
            t0 = time.perf_counter()
            got = K.trace_call(b, call)
            print(json.dumps({"probe": "fixed", "round": rnd, "path": name, "kernel": kname, "s": time.perf_counter() - t0,
                              "samples": got.get("samples"), "why": got.get("why")}), flush=True)
# 2. one request's kernel clocks, as the worker reads them, both paths in turn
for scn_name in sys.argv[1:] or ["launch_overhead", "matmul_precision", "pinned_transfer"]:
    scn = get(scn_name)
    impl = load_impl(scn_name, "jax")
    params = dict(scn.points("full")[-1], seed=20261207)
    inputs = scn.make_inputs(params)
    vs = [(variant_call(impl, v), scn.calls(params)) for v in scn.variants
          if hasattr(impl, "run_" + v.name) and not v.fresh_process]
    for rnd in range(2):
        for name in ("xspace", "trace.json"):
            path(name)
            t0 = time.perf_counter()
            got = K.measure(b, impl, vs, inputs, params)
            print(json.dumps({"probe": "request", "scenario": scn_name, "label": params.get("label"), "round": rnd,
                              "path": name, "rows": len(vs), "s": time.perf_counter() - t0,
                              "medians_ms": [round(sorted(g["samples"])[1] * 1e3, 4) if "samples" in g else g.get("why")
                                             for g in got]}), flush=True)
