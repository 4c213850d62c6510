"""dlpack_handoff: CuPy's part of the ring (impls/dlpack_handoff/ring.py runs it).

cupy.from_dlpack(x) passes CuPy's current stream to x.__dlpack__; ndarray.__dlpack__(stream=s)
records an event on CuPy's *current* stream and makes s wait for it: the same rule as torch, so a stage
queued under `with stream:` must be handed off inside that block. The memory pool has no
record_stream: the ring keeps every array alive until the consumers' work is done.
"""
from __future__ import annotations

import cupy

from impls.dlpack_handoff import ring


def share(device):
    """The fraction of the GPU CuPy's memory pool may hold in this process (its backend's cap)."""
    with device:
        return cupy.get_default_memory_pool().get_limit() / device.mem_info[1]


def guest(gpu, cap):
    """CuPy opened by another framework's ring: its GPU (None without one: CuPy has no CPU device), its memory
    pool capped at `cap` of the GPU."""
    try:
        if not (gpu and cupy.cuda.is_available()):
            return None
    except cupy.cuda.runtime.CUDARuntimeError:  # CuPy 13 raises where 14 answers False
        return None
    device = cupy.cuda.Device(0)
    with device:
        cupy.get_default_memory_pool().set_limit(fraction=cap)  # past it, cupy.cuda.memory.OutOfMemoryError
    return device


def member(device):
    with device:  # non-blocking: a plain Stream() would also synchronize with the legacy default stream
        return {"device": device, "stream": cupy.cuda.Stream(non_blocking=True)}


def upload(part, a):
    with part["device"]:
        out = cupy.asarray(a)
        cupy.cuda.get_current_stream().synchronize()  # done before the non-blocking stage stream reads it
        return out


def on_stream(part):
    return part["stream"]  # a CuPy Stream is its own context manager


def stage(part, x, w):
    y = cupy.full((x.shape[0], w.shape[1]), cupy.nan, dtype=x.dtype)  # early reads show NaN
    cupy.matmul(x, w, out=y)
    return cupy.tanh(y, out=y)  # fill, GEMM, tanh: queued on the current stream


def busy(part, y):
    return not part["stream"].done  # cudaStreamQuery: never blocks


def take(part, foreign):
    with on_stream(part):
        return cupy.from_dlpack(foreign)  # passes this stream: the producer orders its current stream before it


def to_host(part, y):
    return y.get()  # on the current stream; the host waits for the copy


def from_host(part, a):
    with on_stream(part):
        return cupy.asarray(a)


def pointer(x):
    return x.data.ptr


def wait(part, arrays):
    part["stream"].synchronize()


def fill_nan(part, arrays):
    with on_stream(part):  # the stream the next run's stages allocate on: ordered before any reuse
        for a in arrays:
            a.fill(cupy.nan)
    wait(part, arrays)  # done before the next timed run starts


def prepare(inputs, params, device):
    return ring.prepare("cupy", inputs, device)  # opens the other members through their impls' guest()


def poison(state):
    ring.settle(state)  # nothing is preallocated; a hazard run's leftovers must not overlap the next run


def run_via_host(state):
    return ring.run(state, "via_host")


def run_dlpack(state):
    return ring.run(state, "dlpack")


def run_export_off_stream(state):
    return ring.run(state, "off_stream")
