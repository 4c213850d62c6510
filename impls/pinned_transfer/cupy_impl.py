"""pinned_transfer in CuPy.

The current stream is the legacy default stream. Since CuPy 13 ndarray.set(host) is cudaMemcpyAsync on
the current stream whether or not a stream is given (it was a synchronous cudaMemcpy before), so the
blocking copy is set() and a wait for the stream, as torch's copy_ without non_blocking is;
get(out=, blocking=True) is cudaMemcpyAsync and that wait. cudaMemcpyAsync returns at once only from or
to pinned memory (cupyx.empty_pinned, from CuPy's pinned memory pool) and is staged by the driver, host
waiting, from pageable memory. cupy.asarray(numpy) is CuPy's own pin-then-copy: a buffer from the
pinned pool, a host memcpy into it, an asynchronous DMA from it.
"""
from __future__ import annotations

import cupy
import cupyx

from harness.measure.metrics import emit
from scenarios.pinned_transfer import flip_bits, poison_host, prefaulted, stale_fraction

NOT_EXPRESSIBLE = {
    "h2d_jit_transfer": "CuPy compiles kernels, not programs with placed outputs; ndarray.set from pinned memory is "
                        "already one cudaMemcpyAsync (h2d_pinned_non_blocking)",
    "d2h_jit_transfer": "CuPy compiles kernels, not programs with placed outputs; ndarray.get into pinned memory is "
                        "already one cudaMemcpyAsync (d2h_pinned_non_blocking)",
}
WORK = 2048


def prepare(inputs, params, device):
    # Everything is allocated and pinned here, untimed; the variants only copy.
    x = inputs["x"]
    flipped = flip_bits(x)
    with device:
        state = {"x": x, "flipped": flipped, "host": prefaulted(x),  # pageable, every page faulted in up front
                 "nbytes": x.nbytes, "device": device,
                 "src": cupy.asarray(x),  # device source of every D2H copy
                 "flipped_dev": cupy.asarray(flipped),
                 "out_pageable": prefaulted(flipped),  # host destination (prefaulted), wrong until a copy lands
                 "stream": cupy.cuda.get_current_stream()}
        state["dst"] = cupy.empty_like(state["src"])  # device destination of every H2D copy
        state["work"] = cupy.random.standard_normal((WORK, WORK), dtype=cupy.float32)  # the hazard's earlier work
        for key, a in (("pinned", x), ("out_pinned", flipped)):  # pinned once, up front, from CuPy's pinned pool
            state[key] = cupyx.empty_pinned(a.shape, a.dtype)
            state[key][...] = a
        state["stream"].synchronize()
    return state


def poison(state):
    cupy.copyto(state["dst"], state["flipped_dev"])  # a device copy on the current stream; the harness syncs
    for key in ("out_pageable", "out_pinned"):
        poison_host(state[key], state["flipped"])


def produce(state):
    # The step that made the data, queued on the current stream: some compute first (a WORK^3 GEMM keeps
    # the device busy a fraction of a millisecond), then src = ~flipped, bit for bit x.
    state["busy"] = state["work"] @ state["work"]
    u = f"u{state['x'].itemsize}"
    cupy.invert(state["flipped_dev"].view(u), out=state["src"].view(u))


def moved(state):
    emit("link_bytes", state["nbytes"])


def run_h2d_pageable(state):
    moved(state)
    state["dst"].set(state["host"])  # cudaMemcpyAsync on the current stream (CuPy 13+), from pageable memory
    state["stream"].synchronize()  # the host waits for the copy: the blocking copy torch's copy_ makes
    return {"x": state["dst"]}


def run_h2d_pageable_non_blocking(state):
    moved(state)
    # cudaMemcpyAsync on the stream, but from pageable memory: the driver stages it and the host waits.
    state["dst"].set(state["host"], stream=state["stream"])
    return {"x": state["dst"]}


def run_h2d_pinned_non_blocking(state):
    moved(state)
    state["dst"].set(state["pinned"], stream=state["stream"])  # DMA from pinned memory: returns at once
    return {"x": state["dst"]}


def run_h2d_pin_then_copy(state):
    moved(state)
    with state["device"]:
        # CuPy's own idiom: pinned-pool buffer + host memcpy (timed), DMA queued; the pool keeps the buffer
        # until the copy's event completes. The destination comes from the device memory pool.
        return {"x": cupy.asarray(state["host"])}


def run_d2h_pageable(state):
    moved(state)
    return {"x": state["src"].get(out=state["out_pageable"])}  # blocking=True: returns when the data is there


def run_d2h_pinned_non_blocking(state):
    moved(state)
    # Returns at once: the host must not read out_pinned before a sync (the harness syncs).
    return {"x": state["src"].get(out=state["out_pinned"], blocking=False)}


def run_d2h_pin_then_copy(state):
    moved(state)
    # The destination is pinned inside the call (from the pinned pool: a fresh block may hold an earlier
    # run's bytes); the numpy array keeps the block alive until the harness has synced and read it.
    out = cupyx.empty_pinned(state["x"].shape, state["x"].dtype)
    return {"x": state["src"].get(out=out, blocking=False)}


def run_d2h_read_before_sync(state):
    moved(state)
    produce(state)
    state["src"].get(out=state["out_pinned"], blocking=False)  # queued behind the producer on the same stream
    seen = state["out_pinned"].copy()  # HAZARD: the host reads the destination without a sync
    emit("stale_fraction", stale_fraction(seen, state["x"]))
    return {"x": seen}
