"""ranks in CuPy: cupyx.distributed's NCCL communicator, one process per GPU (no CPU path).

The communicator was created before prepare (harness/backends/dist.py). Its collectives are enqueued
on the current stream and return at once; the barrier before each repeat is an NCCL all-reduce of one
element and a wait (harness/backends/nccl.py device_barrier), not cupyx's barrier through its TCP store.
The sum of squares is one fused kernel (square and add as each element is read, as XLA fuses it):
CuPy's `(x * x).sum(0)` writes the squares out and reads them back, and its column reduction runs one
block per 32 columns (32 blocks for 1024), far from filling the GPU.
"""
from __future__ import annotations

import cupy as cp
import numpy as np

from harness.backends.nccl import cupy_comm, device_barrier

CODE = r"""
extern "C" __global__ void squares_by_chunk(const float* x, long long rows, long long cols, long long row_stride,
                                            long long chunk, float* part) {
    long long col = (long long)blockIdx.x * blockDim.x + threadIdx.x;  // a warp reads 32 adjacent columns
    if (col >= cols) return;
    long long r = (long long)blockIdx.y * chunk, end = r + chunk < rows ? r + chunk : rows;
    float s = 0.0f;
    for (; r < end; ++r) {
        float v = x[r * row_stride + col];
        s += v * v;
    }
    part[(long long)blockIdx.y * cols + col] = s;  // this chunk's partial sum of the column
}
"""
THREADS, CHUNK = 256, 256  # columns per block; rows per partial sum (blocks enough to fill the GPU)
_OWN: dict[str, object] = {}  # module state: each process has its own copy, nothing is shared


def prepare(inputs, params, device):
    _OWN["rank"] = int(params["rank"])
    _OWN["mark"] = cp.asarray(_OWN["rank"], dtype=cp.int64)  # the id, kept on the device
    return {"data": cp.asarray(inputs["data"]), "rank": int(params["rank"]),
            "world": int(params["world_size"]), "comm": cupy_comm()}


def barrier(state):
    device_barrier(state["comm"])  # this rank's work is done, and every other rank's


def poison(state):
    barrier(state)  # the harness runs this untimed before every repeat: the ranks start together


def _squares(x):
    """Per column, the sum of squares of x's rows (any row stride, contiguous columns): each element
    read once by the fused kernel into partial sums of CHUNK rows, then the partials (1/CHUNK of
    the data) summed. Integer-valued sums below 2^24 are exact in any order."""
    if "kernel" not in _OWN:  # made on first use (the untimed first call): nothing touches CUDA at import
        _OWN["kernel"] = cp.RawKernel(CODE, "squares_by_chunk")
    rows, cols = x.shape
    assert x.dtype == cp.float32 and x.strides[1] == x.itemsize, (x.dtype, x.strides)
    chunk = max(CHUNK, -(-rows // 65535))  # a grid's y extent is at most 65535 blocks
    chunks = max(1, -(-rows // chunk))
    part = cp.empty((chunks, cols), dtype=cp.float32)
    grid = (-(-cols // THREADS), chunks)
    _OWN["kernel"](grid, (THREADS,), (x, np.int64(rows), np.int64(cols), np.int64(x.strides[0] // x.itemsize),
                                      np.int64(chunk), part))
    return part.sum(axis=0)


def _mark():
    return _OWN["mark"]


def _all_reduce(state, partial):
    partial = cp.ascontiguousarray(partial)
    state["comm"].all_reduce(partial, partial, op="sum")  # in place, on the current stream
    return partial


def run_one_process(state):
    return {"total": _squares(state["data"]), "mark": _mark()}


def run_by_rank(state):
    mine = state["data"][state["rank"]::state["world"]]  # the rank id selects the share
    return {"total": _all_reduce(state, _squares(mine)), "mark": _mark()}


def run_same_data_every_rank(state):
    partial = _squares(state["data"])  # bug: no share selected, every rank sums everything
    return {"total": _all_reduce(state, partial), "mark": _mark()}
