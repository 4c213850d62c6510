"""gpu_links in CuPy: cudaMemcpyPeerAsync between two GPUs against a host round trip.

The peer copy is enqueued on device 0's current stream; get() blocks the host until the data is back.
"""
from __future__ import annotations

import cupy as cp

from harness.metrics import emit


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
        return {"copy": cp.asarray(host)}


def run_peer(state):
    _report(state)
    x, dst = state["x"], state["dst"]
    with cp.cuda.Device(0):
        cp.cuda.runtime.memcpyPeerAsync(dst.data.ptr, 1, x.data.ptr, 0, x.nbytes, cp.cuda.get_current_stream().ptr)
        cp.cuda.get_current_stream().synchronize()  # the harness synchronizes device 0 only
    return {"copy": dst}
