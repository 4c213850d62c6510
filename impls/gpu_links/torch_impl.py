"""gpu_links in PyTorch: Tensor.to() between two GPUs (cudaMemcpyPeerAsync) against a host round trip.

Both copies are enqueued on the current streams of the two devices; .cpu() of a device tensor blocks
the host until the copy is done, which the staged path needs anyway.
"""
from __future__ import annotations

import torch

from harness.measure.metrics import emit


def cannot_run(device):
    n = torch.cuda.device_count()
    return None if n >= 2 else f"needs two GPUs ({n} here)"


def prepare(inputs, params, device):
    src, dst = torch.device("cuda", 0), torch.device("cuda", 1)
    return {"x": torch.from_numpy(inputs["x"]).to(src), "dst": dst,
            "peer": int(torch.cuda.can_device_access_peer(0, 1))}


def _report(state):
    emit("link_bytes", state["x"].nbytes)
    emit("peer_access", state["peer"])


def run_via_host(state):
    _report(state)
    return {"copy": state["x"].cpu().to(state["dst"])}  # the host waits for the first half


def run_peer(state):
    _report(state)
    # Device to device, no host stop: torch copies on the source device's current stream (synchronized
    # with both devices' current streams), so device 0's synchronize covers it.
    return {"copy": state["x"].to(state["dst"], non_blocking=True)}
