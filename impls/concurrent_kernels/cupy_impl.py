"""concurrent_kernels in CuPy.

The job kernel is a cupy.RawKernel: one element per thread, 128 threads per block, a long loop of
uint32 steps per thread (a multiply-add, then an xor-shift: steps that no compiler can fold together).
On one stream the jobs' kernels queue behind one another; on N side streams (non_blocking=True, each
first waiting on the main stream where the inputs were uploaded) they may run together.
"""
from __future__ import annotations

import cupy
import numpy as np

from harness.measure.timeline import span

CODE = r"""
extern "C" __global__ void lcg_spin(const unsigned int* x, unsigned int* y, long long n, int iters) {
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    unsigned int v = x[i];
    for (int k = 0; k < iters; ++k) {
        v = v * 1664525u + 1013904223u;
        v ^= v >> 16;
    }
    y[i] = v;
}
"""
THREADS = 128
_compiled = {}  # the RawKernel, made on first use (nothing touches CUDA at import)


def prepare(inputs, params, device):
    with device:
        x = cupy.asarray(inputs["x"])
        return {"x": x, "jobs": list(x), "iters": int(params["iters"]),
                "streams": [cupy.cuda.Stream(non_blocking=True) for _ in range(x.shape[0])]}


def spin(x, iters):
    """One kernel over x: `iters` steps per element, on the current stream."""
    if "fn" not in _compiled:
        _compiled["fn"] = cupy.RawKernel(CODE, "lcg_spin")
    y = cupy.empty_like(x)
    blocks = max(1, -(-x.size // THREADS))
    _compiled["fn"]((blocks,), (THREADS,), (x, y, np.int64(x.size), np.int32(iters)))
    return y


def run_one_stream(state):
    ys = []
    for j, x in enumerate(state["jobs"]):
        with span("main", f"job {j}"):
            ys.append(spin(x, state["iters"]))  # queued behind the previous job on the current stream
    return {"y": ys}


def run_many_streams(state):
    main = cupy.cuda.get_current_stream()
    uploaded = main.record()
    ys = []
    for j, (x, s) in enumerate(zip(state["jobs"], state["streams"])):
        s.wait_event(uploaded)  # the input was uploaded on the main stream (no wait_stream in CuPy)
        with s, span(f"stream {j}", f"job {j}"):
            ys.append(spin(x, state["iters"]))  # on its own stream: free to run beside the others
    for s in state["streams"]:
        main.wait_event(s.record())  # main-stream readers of y need no sync
    return {"y": ys}


def run_batched(state):
    with span("main", "all jobs"):
        return {"y": spin(state["x"], state["iters"])}  # one launch, every job's blocks at once
