"""Data-parallel training written out against an array module (`xp`): what CuPy's data_parallel impl
runs, and what the tests run with numpy and a simulated all-reduce.

Parameters and gradients live in one flat vector, layer by layer ([W0.ravel(), b0, W1.ravel(), b1,
...], the scenario's output layout); a layer's (W, b) are views into it. Collectives are callbacks,
so the code names *when* a buffer may be reduced and leaves *how* (NCCL on a stream) to the impl.
Also here, framework-free: torch DDP's bucket rule, a counting wrapper for a communicator, and the
all-reduces read out of a compiled XLA program, so that every framework's bytes are counted; the
per-step metrics every impl emits and the timing of the naive step's all-reduces alone.
"""
from __future__ import annotations

import math
import re
import time

import numpy as np

from harness.measure.metrics import emit
from scenarios._models.flat import layer_ranges, local_grad, offsets, shapes, unflatten  # noqa: F401 (the layout, here too)


FIRST_BUCKET_BYTES = 1 << 20  # torch DDP's first bucket (dist._DEFAULT_FIRST_BUCKET_BYTES)
BUCKET_BYTES = 25 << 20  # torch DDP's bucket_cap_mb=25 default, in bytes (MiB)


def bucket_plan(nbytes, first=FIRST_BUCKET_BYTES, cap=BUCKET_BYTES):
    """DDP's rule (compute_bucket_assignment_by_size, as its reducer rebuilds the buckets after the first
    step): tensors of nbytes[k] bytes, in the order backward makes them ready, fill a bucket until it holds
    at least its limit (first, then cap); the rest make the last bucket. [[k, ...], ...] in reduce order."""
    out, cur, size, limit = [], [], 0, first
    for k, n in enumerate(nbytes):
        cur.append(k)
        size += n
        if size >= limit:
            out.append(cur)
            cur, size, limit = [], 0, cap
    return out + [cur] if cur else out


def buckets(sizes, itemsize, first=FIRST_BUCKET_BYTES, cap=BUCKET_BYTES):
    """DDP's buckets over the flat gradient vector: [(start, end, j), ...] in reduce order, each a contiguous
    flat range (ready order is the flat order reversed: b_last, W_last, ..., b0, W0); j is the flat index of
    the bucket's last-ready tensor, after which it may be reduced."""
    starts, total = offsets(sizes)
    ends = [*starts[1:], total]
    ready = list(reversed(range(len(starts))))
    plan = bucket_plan([(ends[j] - starts[j]) * itemsize for j in ready], first, cap)
    return [(starts[ready[g[-1]]], ends[ready[g[0]]], ready[g[-1]]) for g in plan]


class Tally:
    """The all-reduces an impl counts where it calls them: the bytes handed to each, and the calls."""

    def __init__(self):
        self.bytes, self.calls = 0, 0

    def add(self, nbytes):
        self.bytes += nbytes
        self.calls += 1

    def take(self):
        """(bytes, calls) counted since the last take."""
        out = (self.bytes, self.calls)
        self.bytes = self.calls = 0
        return out


class Counted(Tally):
    """A communicator whose every all_reduce call is counted (the bytes handed to it, the calls) and passed
    on; everything else goes straight to the communicator."""

    def __init__(self, comm):
        self.comm = comm
        super().__init__()

    def all_reduce(self, src, dst, op="sum", stream=None):
        self.add(src.nbytes)
        return self.comm.all_reduce(src, dst, op=op, stream=stream)

    def __getattr__(self, name):
        return getattr(self.comm, name)


_HLO_ALL_REDUCE = re.compile(r"=\s*(.*?)\s(all-reduce)(-start)?\(")
_HLO_ARRAY = re.compile(r"\b(f64|f32|bf16|f16)\[([\d,]*)\]")
_HLO_BYTES = {"f64": 8, "f32": 4, "bf16": 2, "f16": 2}


def hlo_all_reduces(text):
    """(calls, bytes) of the all-reduces in a compiled XLA program's text (JAX: .lower(...).compile()
    .as_text()): the bytes each all-reduce's result holds, i.e. what it was handed. An async
    all-reduce-start counts once (its -done does not); a combined all-reduce of a tuple counts its every
    element, once."""
    calls, nbytes = 0, 0
    for result, _, _ in _HLO_ALL_REDUCE.findall(text):
        calls += 1
        nbytes += sum(_HLO_BYTES[t] * math.prod(int(d) for d in dims.split(",") if d)
                      for t, dims in _HLO_ARRAY.findall(result))
    return calls, nbytes


def emit_per_step(steps, nbytes, calls, grad_bytes):
    """Per step: the bytes handed to all-reduces and the all-reduce calls counted over a call of `steps` steps;
    and the gradient's bytes."""
    emit("allreduce_bytes", nbytes / steps)
    emit("buckets", calls / steps)
    emit("grad_bytes", grad_bytes)


def median_seconds(wait, run, repeats=6):
    """The median wall time of run() (which returns once its work is done) over the calls after the first (a
    warm-up), wait() called before each, outside the time: the device idle when run() starts."""
    spent = []
    for _ in range(repeats):
        wait()
        t0 = time.perf_counter()
        run()
        spent.append(time.perf_counter() - t0)
    return float(np.median(spent[1:]))


def shard(x, rank, world):
    """Rank r's rows of a global batch: the contiguous r-th of `world` equal parts."""
    n = x.shape[0] // world
    return x[rank * n:(rank + 1) * n]
