"""pinned_transfer in PyTorch.

Tensor.copy_ between a CPU tensor and a CUDA tensor is one cudaMemcpyAsync on the current stream.
Without non_blocking torch then synchronizes that stream; with it torch does not, but from or to
pageable memory the driver stages the copy through its own pinned buffer and holds the host until
it has. From or to pinned memory (pin_memory(), torch.empty(..., pin_memory=True), blocks of torch's
caching host allocator) the copy engine works alone and non_blocking returns at once. On the CPU
every copy is a memcpy and the pinned variants are skipped.
"""
from __future__ import annotations

import torch

from harness.measure.metrics import emit
from scenarios.pinned_transfer import flip_bits, poison_host, prefaulted, stale_fraction

NOT_EXPRESSIBLE = {
    "h2d_jit_transfer": "torch has no compiled program whose output lands in a memory kind; its copy_ from pinned "
                        "memory is already one cudaMemcpyAsync (h2d_pinned_non_blocking)",
    "d2h_jit_transfer": "torch has no compiled program whose output lands in a memory kind; its copy_ into pinned "
                        "memory is already one cudaMemcpyAsync (d2h_pinned_non_blocking)",
}
SIGNED = {1: torch.int8, 2: torch.int16, 4: torch.int32}  # same-width views for the bitwise producer
WORK = 2048


def prepare(inputs, params, device):
    # Everything is allocated and pinned here, untimed; the variants only copy.
    x = inputs["x"]
    flipped = flip_bits(x)
    gpu = device.type == "cuda"
    host = torch.from_numpy(prefaulted(x))  # pageable, every page faulted in up front
    state = {"x": x, "flipped": flipped, "host": host, "nbytes": x.nbytes, "gpu": gpu,
             "src": host.to(device),  # device source of every D2H copy
             "flipped_dev": torch.from_numpy(flipped).to(device),
             "out_pageable": torch.from_numpy(prefaulted(flipped))}  # host destination, wrong until a copy lands
    state["dst"] = torch.empty_like(state["src"])  # device destination of every H2D copy
    if gpu:
        state["pinned"] = host.pin_memory()  # pinned once, up front
        state["out_pinned"] = state["out_pageable"].pin_memory()
        state["work"] = torch.randn(WORK, WORK, device=device)  # the hazard's earlier work on the device
    return state


def poison(state):
    state["dst"].copy_(state["flipped_dev"])  # queued on the current stream; the harness syncs before the run
    for key in ("out_pageable", "out_pinned"):
        if key in state:
            poison_host(state[key].numpy(), state["flipped"])


def produce(state):
    # The step that made the data, queued on the current stream: some compute first (a WORK^3 GEMM keeps
    # the device busy a fraction of a millisecond), then src = ~flipped, bit for bit x.
    state["busy"] = state["work"] @ state["work"]
    view = SIGNED[state["x"].itemsize]
    torch.bitwise_not(state["flipped_dev"].view(view), out=state["src"].view(view))


def moved(state):
    emit("link_bytes", state["nbytes"] if state["gpu"] else 0)


def run_h2d_pageable(state):
    moved(state)
    return {"x": state["dst"].copy_(state["host"])}  # cudaMemcpyAsync, then torch syncs the stream


def run_h2d_pageable_non_blocking(state):
    moved(state)
    # torch skips its stream sync, but the driver stages the pageable source: the host waits anyway.
    return {"x": state["dst"].copy_(state["host"], non_blocking=True)}


def run_h2d_pinned_non_blocking(state):
    moved(state)
    return {"x": state["dst"].copy_(state["pinned"], non_blocking=True)}  # DMA from pinned memory: returns at once


def run_h2d_pin_then_copy(state):
    moved(state)
    # pin_memory(): a block from the caching host allocator and a host memcpy into it, both timed. The
    # temporary dies at once; the allocator keeps its block until the copy's recorded event completes.
    return {"x": state["dst"].copy_(state["host"].pin_memory(), non_blocking=True)}


def run_d2h_pageable(state):
    moved(state)
    return {"x": state["out_pageable"].copy_(state["src"])}  # into pageable memory: returns when the data is there


def run_d2h_pinned_non_blocking(state):
    moved(state)
    # Returns at once: the host must not read out_pinned before a sync (the harness syncs).
    return {"x": state["out_pinned"].copy_(state["src"], non_blocking=True)}


def run_d2h_pin_then_copy(state):
    moved(state)
    # For a non-blocking copy to the CPU torch allocates the destination in pinned memory (the caching
    # host allocator), so the copy is asynchronous; a fresh block may hold an earlier run's bytes.
    return {"x": state["src"].to("cpu", non_blocking=True)}


def run_d2h_read_before_sync(state):
    moved(state)
    produce(state)
    state["out_pinned"].copy_(state["src"], non_blocking=True)  # queued behind the producer on the same stream
    seen = state["out_pinned"].numpy().copy()  # HAZARD: the host reads the destination without a sync
    emit("stale_fraction", stale_fraction(seen, state["x"]))
    return {"x": seen}
