"""matmul_precision in JAX.

jax.default_matmul_precision is read while a function is traced, and is part of jit's cache key: the
one jitted GEMM compiles once per precision, at its first (untimed) call under it, and each timed call
under the same setting finds that program. XLA queues the GEMM on its own stream.
"""
from __future__ import annotations

import contextlib

import jax
import jax.numpy as jnp

from impls.matmul_precision import defaults

FP32 = "highest"
TF32 = "TF32_TF32_F32"  # a dot algorithm: TF32 operands, float32 accumulation; the CPU backend rejects it


@contextlib.contextmanager
def precision(level):
    """The float32 matmul precision that calls traced (and looked up) in the block get."""
    with jax.default_matmul_precision(level):
        yield


GEMM = jax.jit(lambda a, b: {"c": a @ b})
# bf16 x bf16 -> bf16 (float32 accumulation in the GEMM), then a cast for the comparison that XLA may fuse.
BF16_GEMM = jax.jit(lambda a, b: {"c": (a @ b).astype(jnp.float32)})


def own_setting():
    """This interpreter's jax_default_matmul_precision: read in a fresh child (defaults.py), it is JAX's real
    default (None: XLA may use TF32 for float32 dots on Ampere and later; JAX_DEFAULT_MATMUL_PRECISION sets it)."""
    return jax.config.jax_default_matmul_precision


def cannot_run_at(variant, params):
    return None  # JAX has bfloat16 (jnp.bfloat16) everywhere


def prepare(inputs, params, device):
    # Operands uploaded (and converted to bf16) once, untimed: a model's weights already on the device.
    a, b = (jax.device_put(inputs[k], device) for k in ("a", "b"))
    to16 = jax.jit(lambda x: x.astype(jnp.bfloat16))
    return {"a": a, "b": b, "a16": to16(a), "b16": to16(b), "default": defaults.read("jax")}


def run_framework_default(state):
    with precision(state["default"]):
        return GEMM(state["a"], state["b"])


def run_matched_fp32(state):
    with precision(FP32):
        return GEMM(state["a"], state["b"])


def run_matched_tf32(state):
    with precision(TF32):
        return GEMM(state["a"], state["b"])


def run_bf16(state):
    with precision(None):  # bf16 operands: the dot's own default, not a float32 setting
        return BF16_GEMM(state["a16"], state["b16"])
