"""gpu_links in CuPy: cudaMemcpyPeerAsync between two GPUs against a host round trip.

The harness synchronizes device 0 only (cudaDeviceSynchronize on the current device), so the work that
lands on device 1 is ordered before device 0's current stream with an event: device 0's synchronize
then covers it. The peer copy runs on device 0's current stream, after device 1's current stream and
before it, as torch orders its own peer copies; neither variant blocks the host past get().
"""
from __future__ import annotations

import cupy as cp

from harness.measure.metrics import emit


def cannot_run(device):
    n = cp.cuda.runtime.getDeviceCount()
    return None if n >= 2 else f"needs two GPUs ({n} here)"


def prepare(inputs, params, device):
    with cp.cuda.Device(0):
        x = cp.asarray(inputs["x"])
    with cp.cuda.Device(1):
        dst = cp.empty_like(x)
    return {"x": x, "dst": dst, "peer": int(cp.cuda.runtime.deviceCanAccessPeer(0, 1))}


def _report(state):
    emit("link_bytes", state["x"].nbytes)
    emit("peer_access", state["peer"])


def run_via_host(state):
    _report(state)
    host = state["x"].get()  # the host waits for device 0
    with cp.cuda.Device(1):
        copy = cp.asarray(host)  # asynchronous on device 1's current stream (staged through pinned memory)
        landed = cp.cuda.get_current_stream().record()
    with cp.cuda.Device(0):
        cp.cuda.get_current_stream().wait_event(landed)  # a synchronize of device 0 now covers the upload
    return {"copy": copy}


def run_peer(state):
    _report(state)
    x, dst = state["x"], state["dst"]
    with cp.cuda.Device(1):
        free = cp.cuda.get_current_stream().record()  # dst's earlier readers on device 1
    with cp.cuda.Device(0):
        stream = cp.cuda.get_current_stream()
        stream.wait_event(free)
        cp.cuda.runtime.memcpyPeerAsync(dst.data.ptr, 1, x.data.ptr, 0, x.nbytes, stream.ptr)  # on device 0's stream
        done = stream.record()
    with cp.cuda.Device(1):
        cp.cuda.get_current_stream().wait_event(done)  # device 1's readers of dst see the copy
    return {"copy": dst}
