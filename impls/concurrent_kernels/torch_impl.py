"""concurrent_kernels in PyTorch.

The job kernel is a jiterator functor: a CUDA elementwise kernel compiled at run time whose per-element
body is a long loop (torch has no such operator). jiterator has no uint32, so the inputs are int32 tensors
holding the uint32 bits: the functor's loop counter and arithmetic are 32-bit, as in the CuPy and Pallas
kernels, and each output is viewed back as uint32 (metadata only). On one stream the jobs' kernels queue
behind one another; on N side streams (which first wait for the main stream, where the inputs were
uploaded) they may run together. On the CPU the same steps run as int64 tensor ops masked to 32 bits, and
only one_stream and batched run.
"""
from __future__ import annotations

import torch

from harness.timeline import span

CODE = """
template <typename T> T lcg_spin(T x, T iters) {
    unsigned int v = static_cast<unsigned int>(x);
    for (int k = 0; k < static_cast<int>(iters); ++k) v = v * 1664525u + 1013904223u;
    return static_cast<T>(v);
}
"""
_compiled = {}  # the jiterator function, made on first use on a GPU (nothing touches CUDA at import)


def prepare(inputs, params, device):
    gpu = device.type == "cuda"
    x = torch.from_numpy(inputs["x"].view("int32")).to(device)  # the uint32 bits; jiterator has no uint32
    return {"x": x, "jobs": list(x.unbind(0)), "iters": int(params["iters"]),
            "streams": [torch.cuda.Stream(device) for _ in range(x.shape[0])] if gpu else None}


def spin(x, iters):
    """One kernel over int32 x: `iters` LCG steps per element, on the current stream; the uint32 result."""
    if x.is_cuda:
        if "fn" not in _compiled:
            _compiled["fn"] = torch.cuda.jiterator._create_jit_fn(CODE, iters=0)
        return _compiled["fn"](x, iters=iters).view(torch.uint32)
    v = x.to(torch.int64) & 0xFFFFFFFF  # the CPU path, untimed on a GPU: int64 ops, masked to 32 bits
    for _ in range(iters):
        v = (v * 1664525 + 1013904223) & 0xFFFFFFFF  # < 2^53 before the mask: exact in int64
    return v.to(torch.int32).view(torch.uint32)  # keeps the low 32 bits


def run_one_stream(state):
    ys = []
    for j, x in enumerate(state["jobs"]):
        with span("main", f"job {j}"):
            ys.append(spin(x, state["iters"]))  # queued behind the previous job on the current stream
    return {"y": ys}


def run_many_streams(state):
    main = torch.cuda.current_stream()
    ys = []
    for j, (x, s) in enumerate(zip(state["jobs"], state["streams"])):
        s.wait_stream(main)  # the input was uploaded on the main stream
        with torch.cuda.stream(s), span(f"stream {j}", f"job {j}"):
            ys.append(spin(x, state["iters"]))  # on its own stream: free to run beside the others
    for y, s in zip(ys, state["streams"]):
        main.wait_stream(s)  # main-stream readers of y need no sync
        y.record_stream(main)  # allocated on s, used on the main stream
    return {"y": ys}


def run_batched(state):
    with span("main", "all jobs"):
        return {"y": spin(state["x"], state["iters"])}  # one launch, every job's blocks at once
