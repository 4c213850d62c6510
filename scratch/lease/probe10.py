"""Lease 10 probe: does JAX's kernel clock need its 0.2 s of warm runs inside the trace? (journal, 2026-12-07:
the warm runs are half of the clock's cost.) For device-paced rows (matmul_precision's GEMMs, donation's 1 GiB
update, pinned_transfer's 64 MiB copies), each round times the row's timed loop as a process does (0.75 s), then
reads the kernel clock with WARM_S of 0.2, 0.05 and 0 s, in a rotated order, one request's session each.
Prints one JSON line per reading; the rows' torch CUDA events come from the default run beside it."""
import json
import sys
import time

from harness import backends
from harness.measure import kernel_clock as K
from harness.measure.timing import preset, measure
from harness.workers.execute import load_impl, variant_call
from scenarios import get

b = backends.get("jax").load()
WARMS = (0.2, 0.05, 0.0)
ROWS = {"matmul_precision": ("matched_fp32", "framework_default"), "donation": ("new_buffer", "in_place"),
        "pinned_transfer": ("h2d_pinned_non_blocking", "d2h_pin_then_copy")}
for rnd in range(int(sys.argv[1]) if len(sys.argv) > 1 else 3):
    for name, variants in ROWS.items():
        scn, impl = get(name), load_impl(name, "jax")
        params = dict(scn.points("full")[-1], seed=20261207)
        inputs = scn.make_inputs(params)
        calls = [(variant_call(impl, scn.variant(v)), scn.calls(params)) for v in variants]
        for k in range(len(WARMS)):
            warm = WARMS[(rnd + k) % len(WARMS)]
            for v in variants:  # the timed loop a process runs before its trace: the card at the loop's load
                state = impl.prepare(inputs, params, b.device)
                poison = (lambda s=state: impl.poison(s)) if hasattr(impl, "poison") else None
                measure(lambda s=state, f=variant_call(impl, scn.variant(v)): f(s), b, preset("full"), before=poison)
                del state
                b.free_memory()
            K.WARM_S = warm
            t0 = time.perf_counter()
            got = K.measure(b, impl, calls, inputs, params)
            print(json.dumps({"round": rnd, "scenario": name, "label": params.get("label"), "warm_s": warm,
                              "s": time.perf_counter() - t0,
                              "ms": {v: ([round(x * 1e3, 4) for x in g["samples"]] if "samples" in g else g.get("why"))
                                     for v, g in zip(variants, got)}}), flush=True)
