"""dlpack_handoff: JAX's part of the ring (impls/dlpack_handoff/ring.py runs it).

jax.dlpack.from_dlpack(x) passes the stream XLA uses for external ready events. As a producer,
jax.Array.__dlpack__(stream=s) makes s wait for that buffer's own ready event (without a stream it
blocks the host until the buffer is ready): readiness is tracked per buffer, so JAX has no current
stream to get wrong. Arrays are immutable: nobody may write into memory JAX imported or exported.
"""
from __future__ import annotations

import contextlib
import os

import jax
import jax.numpy as jnp
import numpy as np

from harness.backends.xla import use_cublas_gemms
from impls.dlpack_handoff import ring

_gemm_tanh = jax.jit(lambda x, w: jnp.tanh(jnp.matmul(x, w, precision=jax.lax.Precision.HIGHEST)))


def share(device):
    """The fraction of the GPU XLA's allocator may hold in this process (set before its backend started)."""
    if device.platform != "gpu":
        return None
    return float(os.environ.get("XLA_PYTHON_CLIENT_MEM_FRACTION") or os.environ.get("XLA_CLIENT_MEM_FRACTION") or 0.75)


def guest(gpu, cap):
    """JAX opened by another framework's ring: its device of the same kind (None where it has none). XLA reads
    its allocator settings once, when its backend starts: no preallocation (else it takes 75% of the GPU at
    once) and a cap of `cap` of the GPU, unless already set; a backend already running keeps its own."""
    use_cublas_gemms()  # as in the harness's own JAX processes: no Triton GEMM autotuning at compile time
    if gpu:
        os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
        if not any(os.environ.get(v) for v in ("XLA_PYTHON_CLIENT_MEM_FRACTION", "XLA_CLIENT_MEM_FRACTION")):
            os.environ["XLA_PYTHON_CLIENT_MEM_FRACTION"] = f"{cap:g}"  # both names set at once is an error
    try:
        return jax.devices("gpu" if gpu else "cpu")[0]
    except RuntimeError:  # no backend of that kind
        return None


def member(device):
    return {"device": device}  # no user streams: XLA owns them


def upload(part, a):
    return jax.device_put(a, part["device"])  # JAX tracks when the copy is done


def on_stream(part):
    return contextlib.nullcontext()  # nothing to enter: work follows the data's own readiness


def stage(part, x, w):
    return _gemm_tanh(x, w)  # one dispatch; returns a future at once


def busy(part, y):
    return not y.is_ready()  # polls; never blocks


def take(part, foreign):
    return jax.dlpack.from_dlpack(foreign)  # passes XLA's stream: the producer orders its work before it


def to_host(part, y):
    return np.array(y)  # waits for y, copies to a new numpy array


def from_host(part, a):
    return jax.device_put(a, part["device"])


def pointer(x):
    return x.unsafe_buffer_pointer()


def wait(part, arrays):
    jax.block_until_ready(arrays)


def fill_nan(part, arrays):
    pass  # immutable: a JAX buffer is never written after it is made, and JAX's consumers are always ordered


def prepare(inputs, params, device):
    return ring.prepare("jax", inputs, device)  # opens the other members through their impls' guest()


def poison(state):
    ring.settle(state)  # nothing is preallocated; a hazard run's leftovers must not overlap the next run


def run_via_host(state):
    return ring.run(state, "via_host")


def run_dlpack(state):
    return ring.run(state, "dlpack")


def run_export_off_stream(state):
    return ring.run(state, "off_stream")
