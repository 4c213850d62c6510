"""concurrent_kernels in PyTorch.

The job kernel is a Triton kernel (torch has no operator with a long loop per element; Triton, which
torch ships and torch.compile writes, is its way to a custom kernel): programs of 128 elements on 4 warps,
so one element per thread, the CuPy RawKernel's and the Pallas kernel's layout, with the same 32-bit
loop (a multiply-add, then an xor-shift). The int32 inputs hold the uint32 bits (bitcast in the kernel);
each output is viewed back as uint32 (metadata only). Triton launches on torch's current stream. On one
stream the jobs' kernels queue behind one another; on N side streams (which first wait for the main
stream, where the inputs were uploaded) they may run together. On the CPU the same steps run as int64
tensor ops masked to 32 bits, and only one_stream and batched run.
"""
from __future__ import annotations

import torch

from harness.measure.timeline import span

BLOCK = 128  # elements per Triton program, on 4 warps: one element per thread
_compiled = {}  # the Triton kernel, made on first use on a GPU (triton is imported there, not at import)


def prepare(inputs, params, device):
    gpu = device.type == "cuda"
    x = torch.from_numpy(inputs["x"].view("int32")).to(device)  # the uint32 bits, as int32
    return {"x": x, "jobs": list(x.unbind(0)), "iters": int(params["iters"]),
            "streams": [torch.cuda.Stream(device) for _ in range(x.shape[0])] if gpu else None}


def spin(x, iters):
    """One kernel over int32 x: `iters` steps per element, on the current stream; the uint32 result."""
    if x.is_cuda:
        if "fn" not in _compiled:
            import triton
            import triton.language as tl

            @triton.jit
            def lcg_spin(x_ptr, y_ptr, n, iters, BLOCK: tl.constexpr):
                i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
                v = tl.load(x_ptr + i, mask=i < n).to(tl.uint32, bitcast=True)
                for _ in range(iters):
                    v = v * 1664525 + 1013904223  # uint32: wraps mod 2^32
                    v = v ^ (v >> 16)  # a logical shift: v is unsigned
                tl.store(y_ptr + i, v.to(tl.int32, bitcast=True), mask=i < n)

            _compiled["fn"] = lcg_spin
        y = torch.empty_like(x)  # allocated on the current stream, the one the kernel runs on
        _compiled["fn"][(max(1, -(-x.numel() // BLOCK)),)](x, y, x.numel(), iters, BLOCK=BLOCK, num_warps=4)
        return y.view(torch.uint32)
    v = x.to(torch.int64) & 0xFFFFFFFF  # the CPU path, untimed on a GPU: int64 ops, masked to 32 bits
    for _ in range(iters):
        v = (v * 1664525 + 1013904223) & 0xFFFFFFFF  # < 2^53 before the mask: exact in int64
        v = v ^ (v >> 16)  # v >= 0: the same bits as the uint32 shift
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
