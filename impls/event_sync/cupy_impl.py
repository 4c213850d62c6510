"""event_sync in CuPy.

Three side streams, non_blocking=True (a plain cupy.cuda.Stream() would sync with the legacy default
stream and hide the race): the producer's, the consumer's and the background's. Each waits on the main
stream first (where the inputs and the poisoned buffers were written; CuPy has no wait_stream, so
s.wait_event(main.record())), and the main stream waits on the consumer and the background at the end.
The variants differ only in how the consumer is ordered after the producer.
"""
from __future__ import annotations

import time

import cupy
import cupyx

from harness.measure.metrics import emit
from harness.measure.timeline import span


def prepare(inputs, params, device):
    with device:
        bg_host = cupyx.empty_pinned(inputs["bg"].shape, dtype=inputs["bg"].dtype)  # page-locked: a true async upload
        bg_host[...] = inputs["bg"]
        x = cupy.asarray(inputs["x"])
        return {"x": x, "w": cupy.asarray(inputs["w"]), "p": cupy.empty_like(x), "device": device,
                "bg_host": bg_host, "bg_dev": cupy.empty(bg_host.shape, dtype=bg_host.dtype),
                "steps": int(params["steps"]),
                "streams": {k: cupy.cuda.Stream(non_blocking=True) for k in ("producer", "consumer", "background")}}


def poison(state):
    state["p"].fill(cupy.nan)  # on the main stream; a consumer that reads too early sees NaN
    state["bg_dev"].fill(cupy.nan)


def produce(state):
    src = state["x"]
    for _ in range(state["steps"]):
        cupy.tanh(src @ state["w"], out=state["p"])  # GEMM + tanh on the current stream, written into p
        src = state["p"]


def consume(state):
    with state["streams"]["consumer"], span("consumer", "consumer"):
        return state["p"].mean(axis=0)  # reads p, on the consumer's stream


def start(state):
    """The producer and the background, each on its stream, both after the main stream."""
    s = state["streams"]
    main_done = cupy.cuda.get_current_stream().record()
    for stream in s.values():
        stream.wait_event(main_done)  # inputs and poison were written on the main stream
    with s["background"], span("background", "upload + mean"):
        state["bg_dev"].set(state["bg_host"], stream=s["background"])  # the copy engine, not the SMs
        bg = state["bg_dev"].mean(axis=0)
    with s["producer"], span("producer", "producer"):
        produce(state)
    return bg


def finish(state, y, bg, t0, t1):
    emit("host_blocked_ms", (t1 - t0) * 1e3)
    main = cupy.cuda.get_current_stream()
    for name in ("consumer", "background"):
        main.wait_event(state["streams"][name].record())  # main-stream readers of the results need no sync
    # No record_stream in CuPy: freed, y and bg go back to their side stream's pool; a later run's side
    # streams first wait on the main stream, which orders any reuse after the main stream's reads.
    return {"y": y, "bg": bg}


def run_device_synchronize(state):
    bg = start(state)
    t0 = time.perf_counter()
    state["device"].synchronize()  # the host waits for every stream: the producer and the background upload
    t1 = time.perf_counter()
    return finish(state, consume(state), bg, t0, t1)


def run_stream_synchronize(state):
    bg = start(state)
    t0 = time.perf_counter()
    state["streams"]["producer"].synchronize()  # the host waits for the producer's stream only
    t1 = time.perf_counter()
    return finish(state, consume(state), bg, t0, t1)


def run_event_wait(state):
    bg = start(state)
    t0 = time.perf_counter()
    done = cupy.cuda.Event(disable_timing=True)
    done.record(state["streams"]["producer"])  # completes when the producer has written p
    state["streams"]["consumer"].wait_event(done)  # the consumer's stream waits on the GPU; the host goes on
    t1 = time.perf_counter()
    return finish(state, consume(state), bg, t0, t1)


def run_no_sync(state):
    bg = start(state)
    t0 = t1 = time.perf_counter()  # nothing orders the consumer after the producer: a race
    return finish(state, consume(state), bg, t0, t1)
