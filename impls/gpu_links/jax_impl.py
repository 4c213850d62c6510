"""gpu_links in JAX: device_put from one device to another, against a round trip through the host.

device_put is asynchronous; device_get blocks the host. XLA picks the copy's path: there is no
peer-access switch. On the CPU, two devices forced with --xla_force_host_platform_device_count run
the same code.
"""
from __future__ import annotations

import jax
import numpy as np

from harness.measure.metrics import emit


def cannot_run(device):
    n = len(jax.devices(device.platform))
    return None if n >= 2 else (f"needs two devices ({n} {device.platform} here; on the CPU, "
                                "XLA_FLAGS=--xla_force_host_platform_device_count=2)")


def prepare(inputs, params, device):
    src, dst = jax.devices(device.platform)[:2]
    return {"x": jax.device_put(inputs["x"], src), "dst": dst}


def _report(state):
    emit("link_bytes", state["x"].nbytes)  # no peer_access: JAX exposes no peer-access query


def run_via_host(state):
    _report(state)
    return {"copy": jax.device_put(np.asarray(jax.device_get(state["x"])), state["dst"])}


def run_peer(state):
    _report(state)
    return {"copy": jax.device_put(state["x"], state["dst"])}
