"""matmul_precision in PyTorch.

torch.set_float32_matmul_precision is process-wide and read when each matmul is dispatched: set on the
host before the call, restored after it. The GEMM it picked is queued on the current stream.
"""
from __future__ import annotations

import contextlib

import torch

from impls.matmul_precision import defaults

FP32 = "highest"
TF32 = "high"  # TF32 on a GPU that has it; full float32 elsewhere


@contextlib.contextmanager
def precision(level):
    """The process-wide float32 matmul precision set for the block, the previous one restored after."""
    before = torch.get_float32_matmul_precision()
    torch.set_float32_matmul_precision(level)
    try:
        yield
    finally:
        torch.set_float32_matmul_precision(before)


def own_setting():
    """This interpreter's float32 matmul precision: read in a fresh child (defaults.py), it is torch's real
    default ("highest" since 1.12 unless TORCH_ALLOW_TF32_CUBLAS_OVERRIDE=1 says "high")."""
    return torch.get_float32_matmul_precision()


def cannot_run_at(variant, params):
    return None  # torch has bfloat16 tensors in every version this project supports


def prepare(inputs, params, device):
    # Operands uploaded (and converted to bf16) once, untimed: a model's weights already on the device.
    a, b = (torch.from_numpy(inputs[k]).to(device) for k in ("a", "b"))
    return {"a": a, "b": b, "a16": a.bfloat16(), "b16": b.bfloat16(), "default": defaults.read("torch")}


def run_framework_default(state):
    with precision(state["default"]):
        return {"c": state["a"] @ state["b"]}


def run_matched_fp32(state):
    with precision(FP32):
        return {"c": state["a"] @ state["b"]}


def run_matched_tf32(state):
    with precision(TF32):
        return {"c": state["a"] @ state["b"]}


def run_bf16(state):
    with precision(FP32):  # bf16 x bf16 -> bf16 (float32 accumulation in cuBLAS), cast for the comparison
        return {"c": (state["a16"] @ state["b16"]).float()}
