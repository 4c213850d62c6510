"""matmul_precision in CuPy.

CuPy keeps one cuBLAS compute type per dtype, process-wide, read when each matmul is issued; CUPY_TF32
sets it once, at the first float32 matmul. The variants set it on the host before the call and restore
it after. The GEMM is queued on the current stream.
"""
from __future__ import annotations

import contextlib
import importlib.util

import cupy
import numpy
from cupy._core import _routines_linalg as linalg

from impls.matmul_precision import defaults

FP32 = linalg.COMPUTE_TYPE_DEFAULT
TF32 = linalg.COMPUTE_TYPE_TF32  # CUBLAS_COMPUTE_32F_FAST_TF32


@contextlib.contextmanager
def precision(level):
    """The process-wide float32 compute type set for the block, the previous one restored after."""
    before = cupy._core.get_compute_type(numpy.float32)
    cupy._core.set_compute_type(numpy.float32, level)
    try:
        yield
    finally:
        cupy._core.set_compute_type(numpy.float32, before)


def own_setting():
    """This interpreter's float32 compute type: read in a fresh child (defaults.py), it is CuPy's real default
    (COMPUTE_TYPE_DEFAULT, no TF32, unless CUPY_TF32=1 says COMPUTE_TYPE_TF32)."""
    return int(cupy._core.get_compute_type(numpy.float32))


def cannot_run_at(variant, params):
    if variant != "bf16":
        return None
    if int(cupy.__version__.split(".")[0]) < 14:
        return f"CuPy {cupy.__version__} has no bfloat16 arrays (CuPy 14 added them)"
    if importlib.util.find_spec("ml_dtypes") is None:
        return "CuPy's bfloat16 is ml_dtypes' dtype, and ml_dtypes is not installed"
    return None


def prepare(inputs, params, device):
    # Operands uploaded (and converted to bf16 where CuPy has it) once, untimed: a model's weights already on
    # the device.
    with device:
        a, b = (cupy.asarray(inputs[k]) for k in ("a", "b"))
        if cannot_run_at("bf16", params):
            return {"a": a, "b": b, "default": defaults.read("cupy")}
        import ml_dtypes

        bf16 = numpy.dtype(ml_dtypes.bfloat16)
        return {"a": a, "b": b, "a16": a.astype(bf16), "b16": b.astype(bf16), "default": defaults.read("cupy")}


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
        return {"c": (state["a16"] @ state["b16"]).astype(cupy.float32)}
