"""event_sync in PyTorch.

Three side streams: the producer's, the consumer's and the background's. torch side streams do not wait
for the main stream (where the inputs and the poisoned buffers were written), so each waits on it first,
and the main stream waits on the consumer and the background at the end. The variants differ only in
how the consumer is ordered after the producer. On the CPU there are no streams and each op runs inside
its call: only device_synchronize runs there, with nothing to wait for.
"""
from __future__ import annotations

import time

import torch

from harness.measure.metrics import emit
from harness.measure.timeline import span


def prepare(inputs, params, device):
    gpu = device.type == "cuda"
    bg = torch.from_numpy(inputs["bg"])
    bg_host = torch.empty(bg.shape, dtype=bg.dtype, pin_memory=gpu)  # page-locked: a true async upload
    bg_host.copy_(bg)
    x = torch.from_numpy(inputs["x"]).to(device)
    return {"x": x, "w": torch.from_numpy(inputs["w"]).to(device), "p": torch.empty_like(x), "gpu": gpu,
            "bg_host": bg_host, "bg_dev": torch.empty(bg.shape, dtype=bg.dtype, device=device),
            "steps": int(params["steps"]),
            "streams": {k: torch.cuda.Stream(device) if gpu else None for k in ("producer", "consumer", "background")}}


def poison(state):
    state["p"].fill_(float("nan"))  # on the main stream; a consumer that reads too early sees NaN
    state["bg_dev"].fill_(float("nan"))


def produce(state):
    src = state["x"]
    for _ in range(state["steps"]):
        torch.tanh(src @ state["w"], out=state["p"])  # GEMM + tanh on the current stream, written into p
        src = state["p"]


def consume(state):
    with torch.cuda.stream(state["streams"]["consumer"]), span("consumer", "consumer"):
        return state["p"].mean(dim=0)  # reads p, on the consumer's stream


def start(state):
    """The producer and the background, each on its stream, both after the main stream."""
    s = state["streams"]
    if state["gpu"]:
        for stream in s.values():
            stream.wait_stream(torch.cuda.current_stream())  # inputs and poison were written on the main stream
    with torch.cuda.stream(s["background"]), span("background", "upload + mean"):
        state["bg_dev"].copy_(state["bg_host"], non_blocking=True)  # the copy engine, not the SMs
        bg = state["bg_dev"].mean(dim=0)
    with torch.cuda.stream(s["producer"]), span("producer", "producer"):
        produce(state)
    return bg


def finish(state, y, bg, t0, t1):
    emit("host_blocked_ms", (t1 - t0) * 1e3)
    if state["gpu"]:
        main = torch.cuda.current_stream()
        for out, name in ((y, "consumer"), (bg, "background")):
            main.wait_stream(state["streams"][name])  # main-stream readers of the results need no sync
            out.record_stream(main)  # allocated on a side stream, used on the main one
    return {"y": y, "bg": bg}


def run_device_synchronize(state):
    bg = start(state)
    t0 = time.perf_counter()
    if state["gpu"]:
        torch.cuda.synchronize()  # the host waits for every stream: the producer and the background upload
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
    done = torch.cuda.Event()
    done.record(state["streams"]["producer"])  # completes when the producer has written p
    state["streams"]["consumer"].wait_event(done)  # the consumer's stream waits on the GPU; the host goes on
    t1 = time.perf_counter()
    return finish(state, consume(state), bg, t0, t1)


def run_no_sync(state):
    bg = start(state)
    t0 = t1 = time.perf_counter()  # nothing orders the consumer after the producer: a race
    return finish(state, consume(state), bg, t0, t1)
