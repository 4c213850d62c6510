"""dlpack_handoff: PyTorch's part of the ring (impls/dlpack_handoff/ring.py runs it).

torch.from_dlpack(x) passes torch's current stream to x.__dlpack__; Tensor.__dlpack__(stream=s)
records an event on torch's *current* stream and makes s wait for it. So a stage queued under
torch.cuda.stream(side) must be handed off while `side` is current. requires_grad tensors are refused
(detach first). The caching allocator knows only torch's streams: the ring keeps every tensor alive
until the consumers' work is done.
"""
from __future__ import annotations

import contextlib

import torch

from impls.dlpack_handoff import ring


def share(device):
    """The fraction of the GPU torch's allocator may hold in this process (its backend's cap); None on a CPU."""
    return torch.cuda.get_per_process_memory_fraction(device) if device.type == "cuda" else None


def guest(gpu, cap):
    """torch opened by another framework's ring: its device of the same kind (None where it has none), its
    caching allocator capped at `cap` of the GPU."""
    if not gpu:
        return torch.device("cpu")
    if not torch.cuda.is_available():
        return None
    device = torch.device("cuda", torch.cuda.current_device())
    torch.cuda.set_per_process_memory_fraction(cap, device)  # past it, torch.OutOfMemoryError
    return device


def member(device):
    # A side stream from torch's pool: non-blocking w.r.t. the legacy default stream.
    return {"device": device, "stream": torch.cuda.Stream(device) if device.type == "cuda" else None}


def upload(part, a):
    return torch.from_numpy(a).to(part["device"])  # pageable: returns once the copy is done


def on_stream(part):
    return torch.cuda.stream(part["stream"]) if part["stream"] is not None else contextlib.nullcontext()


def stage(part, x, w):
    y = torch.full((x.shape[0], w.shape[1]), float("nan"), dtype=x.dtype, device=x.device)  # early reads show NaN
    torch.matmul(x, w, out=y)
    return y.tanh_()  # fill, GEMM, tanh: queued on the current stream


def busy(part, y):
    return part["stream"] is not None and not part["stream"].query()  # cudaStreamQuery: never blocks


def take(part, foreign):
    with on_stream(part):
        return torch.from_dlpack(foreign)  # passes this stream: the producer orders its current stream before it


def to_host(part, y):
    return y.to("cpu", copy=True).numpy()  # on the current stream; the host waits for the copy


def from_host(part, a):
    with on_stream(part):
        return torch.from_numpy(a).to(part["device"])


def pointer(x):
    return x.data_ptr()


def wait(part, arrays):
    if part["stream"] is not None:
        part["stream"].synchronize()


def fill_nan(part, arrays):
    with on_stream(part):  # the stream the next run's stages allocate on: ordered before any reuse
        for t in arrays:
            t.fill_(float("nan"))
    wait(part, arrays)  # done before the next timed run starts


def prepare(inputs, params, device):
    return ring.prepare("torch", inputs, device)  # opens the other members through their impls' guest()


def poison(state):
    ring.settle(state)  # nothing is preallocated; a hazard run's leftovers must not overlap the next run


def run_via_host(state):
    return ring.run(state, "via_host")


def run_dlpack(state):
    return ring.run(state, "dlpack")


def run_export_off_stream(state):
    return ring.run(state, "off_stream")
