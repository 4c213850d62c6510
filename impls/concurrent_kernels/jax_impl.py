"""concurrent_kernels in JAX.

No streams. The job kernel is written in Pallas, since XLA's own ops cannot hold a long loop inside one
kernel (a lax.fori_loop outside a kernel launches its body once per iteration): a grid of 128-element
blocks on 4 warps (one element per thread, as in the CuPy and torch kernels), each running the uint32
loop (a multiply-add, then an xor-shift), lowered through Triton on the GPU (Pallas's default there is
Mosaic GPU, hence the explicit Triton compiler params) and interpreted on the CPU. one_stream dispatches
one jitted call per job; many_streams jits one program holding every job's kernel, and XLA decides
what runs concurrently; batched is one pallas_call over every job.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax.experimental import pallas as pl
from jax.experimental.pallas import triton as pltriton

BLOCK = 128  # elements per Pallas program on 4 warps: one per thread; rows are padded to a multiple

def prepare(inputs, params, device):
    x = inputs["x"]
    pad = -x.shape[1] % BLOCK
    xp = jax.device_put(np.pad(x, ((0, 0), (0, pad))), device)  # padding values are computed, then cut off
    state = {"x": xp, "jobs": [xp[j] for j in range(x.shape[0])], "iters": int(params["iters"]),
             "elems": x.shape[1], "interpret": device.platform == "cpu"}
    jax.block_until_ready(state["jobs"])
    return state


def spin(x, iters, interpret):
    """One Pallas kernel over a 1-D x of whole blocks: `iters` steps per element."""
    def step(_, v):
        v = v * jnp.uint32(1664525) + jnp.uint32(1013904223)  # wraps mod 2^32
        return v ^ (v >> jnp.uint32(16))  # a logical shift: v is unsigned

    def kernel(x_ref, y_ref):
        y_ref[...] = jax.lax.fori_loop(0, iters, step, x_ref[...])  # iters is static: it may unroll, not fold

    blocks = pl.BlockSpec((BLOCK,), lambda i: (i,))
    return pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype), grid=(x.shape[0] // BLOCK,),
                          in_specs=[blocks], out_specs=blocks, interpret=interpret,
                          compiler_params=pltriton.CompilerParams(num_warps=4, num_stages=1))(x)


STATIC = ("iters", "elems", "interpret")
one_job = jax.jit(lambda x, iters, elems, interpret: spin(x, iters, interpret)[:elems], static_argnames=STATIC)
all_jobs = jax.jit(lambda xs, iters, elems, interpret: [spin(x, iters, interpret)[:elems] for x in xs],
                   static_argnames=STATIC)
batch = jax.jit(lambda x, iters, elems, interpret: spin(x.reshape(-1), iters, interpret).reshape(x.shape)[:, :elems],
                static_argnames=STATIC)


def run_one_stream(state):
    args = {k: state[k] for k in STATIC}
    return {"y": [one_job(x, **args) for x in state["jobs"]]}  # one dispatch per job, queued in order


def run_many_streams(state):
    args = {k: state[k] for k in STATIC}
    return {"y": all_jobs(state["jobs"], **args)}  # one program; XLA schedules the independent kernels


def run_batched(state):
    args = {k: state[k] for k in STATIC}
    return {"y": batch(state["x"], **args)}  # one pallas_call over every job's blocks

