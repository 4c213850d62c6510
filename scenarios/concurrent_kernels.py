"""concurrent_kernels — independent kernels that each fill a small part of the GPU, on N streams vs one.

`jobs` independent jobs of `elems` 32-bit values each; every element runs `iters` steps of
v <- v * 1664525 + 1013904223 (mod 2^32), then v ^= v >> 16: a linear congruential step followed by an
xor-shift. One job is one kernel of a few blocks (a few of a large GPU's 100 or more SMs) with a long, latency-bound
loop per thread: device-bound, not launch-bound (a tiny kernel would only measure the launch). On one
stream the kernels run one after another; on N streams they run side by side. The third way is the one
most code should use: one launch over all the jobs. Integer arithmetic keeps every framework bit-exact
against the reference. The xor-shift is there so that no compiler can fold steps: an affine step alone
(v * a + c) composes into one affine step, and each compiler folded it to its own depth.
"""
from __future__ import annotations

from typing import Mapping

import numpy as np
from hypothesis import strategies as st

from scenarios import _strategies as S
from scenarios.spec import EXACT, Claim, Params, Scenario, Variant, Verdict, ratio_verdict

A, C, SHIFT = 1664525, 1013904223, 16  # Numerical Recipes' 32-bit LCG, then v ^= v >> 16


def step(v: np.ndarray, spare: np.ndarray) -> None:
    """One step on a uint32 array, in place (numpy's uint32 arithmetic wraps mod 2^32); `spare` is scratch."""
    np.multiply(v, np.uint32(A), out=v)
    np.add(v, np.uint32(C), out=v)
    np.right_shift(v, np.uint32(SHIFT), out=spare)
    np.bitwise_xor(v, spare, out=v)


def make_inputs(p: Params) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(p["seed"])
    return {"x": rng.integers(1, 1 << 32, size=(int(p["jobs"]), int(p["elems"])), dtype=np.uint32)}


def reference(inputs: Mapping[str, np.ndarray], p: Params) -> dict[str, np.ndarray]:
    """Every step, vectorised over the elements: the step does not compose, so there is no shortcut
    (~30 us a step over the full size's 64 Ki elements: ~2 s at 2^16 steps on one core)."""
    v = np.array(inputs["x"], dtype=np.uint32)  # a copy: stepped in place
    spare = np.empty_like(v)
    for _ in range(int(p["iters"])):
        step(v, spare)
    return {"y": v.astype(np.int64)}


def _median(rows: Mapping[str, dict], variant: str) -> float:
    return rows[variant]["timing"]["device_done"]["median"]


def _concurrent(rows: Mapping[str, dict], fw: str, p: Params) -> Verdict:
    one, many = _median(rows, "one_stream"), _median(rows, "many_streams")
    return ratio_verdict("concurrent", fw, one / many, 2.0, lower_is_confirmed=False,
                         what=f"speedup of {p['jobs']} jobs on {p['jobs']} streams over one stream "
                              f"({one * 1e3:.2f} ms -> {many * 1e3:.2f} ms)",
                         numbers={"one_stream_s": one, "many_streams_s": many, "speedup": one / many})


def _one_launch(rows: Mapping[str, dict], fw: str, p: Params) -> Verdict:
    many, batched = _median(rows, "many_streams"), _median(rows, "batched")
    return ratio_verdict("one_launch", fw, batched / many, 1.2, lower_is_confirmed=True,
                         what=f"one launch over all jobs / {p['jobs']} streams ({batched * 1e3:.2f} ms vs "
                              f"{many * 1e3:.2f} ms)",
                         numbers={"batched_s": batched, "many_streams_s": many})


SCENARIO = Scenario(
    name="concurrent_kernels",
    title="Independent kernels run side by side on different streams",
    concept=(
        "A kernel that fills only a few of the GPU's SMs leaves the rest idle. Kernels on one stream run one after "
        "another; kernels on different streams may run at the same time, each on its own SMs. Streams pay off for "
        "independent small kernels that each run long enough to matter; when the work is the same kernel on "
        "different data, one launch over all of it does as well without any stream."
    ),
    variants=(
        Variant("one_stream", "every job's kernel on one stream, one after another (JAX: one dispatch per job)"),
        Variant("many_streams", "job j's kernel on stream j, all at once (JAX: one jitted program holding every "
                                "job's kernel; XLA decides what runs concurrently)", gpu_only=("torch", "cupy")),
        Variant("batched", "one kernel launch over all the jobs' data: no streams needed"),
    ),
    params=lambda: S.params(jobs=st.integers(1, 6), elems=S.dims(1, 300), iters=st.integers(0, 50)),
    sizes={
        "smoke": {"jobs": 4, "elems": 256, "iters": 64},
        # A job: 4096 elements = 32 blocks of 128 threads, one element per thread in all three kernels, 2^16
        # dependent steps per element (a multiply-add, a shift, an xor): at least 0.3 ms per kernel (estimated
        # from the 4.4 ns a step that CuPy's multiply-add loop took on a GPU, not unrolled), device-bound, on
        # 32 SMs. 2^16, not more: the reference runs every step on the host (2-6 s on one core).
        "full": {"jobs": 16, "elems": 4096, "iters": 1 << 16},
    },
    make_inputs=make_inputs,
    reference=reference,
    tolerance=EXACT,
    claims=(
        Claim("concurrent", "Independent small kernels on different streams run concurrently "
                            "(≥ 2x faster than on one stream).", _concurrent, gpu_only=True),
        Claim("one_launch", "One launch over all the jobs is as fast as N streams (≤ 1.2x).",
              _one_launch, gpu_only=True),
    ),
    key_apis={
        "torch": ("triton.jit (launched on torch's current stream)", "torch.cuda.Stream", "with torch.cuda.stream(s):",
                  "Stream.wait_stream", "Tensor.record_stream"),
        "cupy": ("cupy.RawKernel", "cupy.cuda.Stream(non_blocking=True)", "with stream:",
                 "Stream.wait_event(other.record())"),
        "jax": ("jax.experimental.pallas.pallas_call", "jax.experimental.pallas.triton.CompilerParams",
                "jax.lax.fori_loop", "jax.jit"),
    },
    framework_notes={
        "torch": "torch has no operator with a long loop per element, so the kernel is written in Triton, which "
                 "torch ships and launches on its current stream: programs of 128 elements on 4 warps, one element "
                 "per thread, the same layout and 32-bit loop as the CuPy and Pallas kernels. The trip count is a "
                 "run-time argument (Triton specializes integer arguments divisible by 16, so it knows that much). "
                 "The step (a multiply-add mod 2^32, then v ^= v >> 16) does not compose into a cheaper one, so "
                 "every compiler runs every step: they may unroll the loop, not shorten it (with the multiply-add "
                 "alone, each compiler folded consecutive affine steps to its own depth and one_stream differed "
                 "up to 17x across the three). Side streams come from a pool of "
                 "32 per device: up to 32 jobs get distinct streams. Each output is allocated on its job's stream "
                 "and handed to the main stream: record_stream(main).",
        "cupy": "The kernel is a cupy.RawKernel compiled by NVRTC, one element per thread, 128 threads per block; "
                "the trip count is a run-time argument. Streams are non_blocking=True so that none of them syncs "
                "with the legacy default stream.",
        "jax": "No streams. The kernel is written in Pallas (Triton on the GPU, 128 elements a program on 4 warps; "
               "the interpreter on the CPU); the trip count is static, a constant the compiler sees (it may unroll "
               "the lax.fori_loop, it cannot skip a step). one_stream dispatches one jitted call per job; "
               "many_streams jits one program holding every job's kernel, and XLA decides whether independent "
               "kernels run concurrently (the timeline shows what it did); batched is one pallas_call over every "
               "job, JAX's natural answer: batch the work, do not schedule it.",
    },
    timeline=True,
)
