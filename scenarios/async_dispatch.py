"""async_dispatch — the host enqueues, the device computes, and the two run at the same time.

A chain of `steps` dependent kernels, x <- tanh(x @ W), launched by the host. The baseline waits for
the device after every step; the concept enqueues the whole chain and waits once; the third variant
does what NVIDIA's asyncAPI sample does: enqueue, then count how often the host can spin a loop
while it polls for completion.
"""
from __future__ import annotations

from typing import Any, Mapping

import numpy as np
from hypothesis import strategies as st

from scenarios import _strategies as S
from scenarios.spec import Claim, Params, Scenario, Tolerance, Variant, Verdict, ratio_verdict


def make_inputs(p: Params) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(p["seed"])
    m, n = int(p["m"]), int(p["n"])
    x = rng.standard_normal((m, n), dtype=np.float32)
    # Gain 1: the chain neither explodes nor fades to zeros (tanh keeps it bounded).
    w = rng.standard_normal((n, n), dtype=np.float32) / np.float32(np.sqrt(n))
    return {"x": x.astype(p["dtype"]), "w": w.astype(p["dtype"])}


def reference(inputs: Mapping[str, np.ndarray], p: Params) -> dict[str, np.ndarray]:
    x = inputs["x"].astype(np.float64)
    w = inputs["w"].astype(np.float64)
    for _ in range(int(p["steps"])):
        x = np.tanh(x @ w)
    return {"x": x}


def flops(p: Params) -> float:
    return 2.0 * int(p["m"]) * int(p["n"]) ** 2 * int(p["steps"])


def floor(p: Params, machine: Mapping[str, float], variant: str) -> float | None:
    if p["dtype"] != "float32" or "fp32_flops" not in machine:
        return None
    return flops(p) / machine["fp32_flops"]  # the GEMMs alone at the measured float32 GEMM rate


def _median(row: dict[str, Any], clock: str) -> float:
    return row["timing"][clock]["median"]


def _returns_early(rows: Mapping[str, dict], fw: str, p: Params) -> Verdict:
    r = rows["async"]
    ratio = _median(r, "host_return") / _median(r, "device_done")
    return ratio_verdict("returns_early", fw, ratio, 0.1, lower_is_confirmed=True,
                         what="async host-return / device-done",
                         numbers={"host_return_s": _median(r, "host_return"), "device_done_s": _median(r, "device_done")})


def _host_free(rows: Mapping[str, dict], fw: str, p: Params) -> Verdict:
    iters = rows["async_poll"]["timing"]["metrics"].get("cpu_iters_while_waiting", float("nan"))
    return ratio_verdict("host_free", fw, iters, 100, lower_is_confirmed=False,
                         what="host loop iterations while the device worked", numbers={"cpu_iters": iters})


def _sync_cost(rows: Mapping[str, dict], fw: str, p: Params) -> Verdict:
    a, s = rows["async"]["timing"]["device_done"], rows["sync_each"]["timing"]["device_done"]
    diff = s["median"] - a["median"]
    noise = (s["iqr"] + a["iqr"]) / 2
    per_step_us = diff / int(p["steps"]) * 1e6
    pct = 100 * diff / a["median"]
    verdict = "confirmed" if diff > noise else "inconclusive"
    return Verdict("sync_cost", fw, verdict,
                   f"sync_each {diff * 1e3:+.2f} ms ({pct:+.1f}%, {per_step_us:+.1f} µs per step) vs async; "
                   f"spread ±{noise * 1e3:.2f} ms", {"per_step_s": diff / int(p["steps"]), "pct": pct})


SCENARIO = Scenario(
    name="async_dispatch",
    title="The host enqueues, the device computes",
    concept=(
        "A framework call on a GPU array queues a kernel and returns: the host runs ahead of the device. "
        "Waiting after every kernel turns that overlap into lock-step; enqueuing the chain and waiting once "
        "leaves the host free for other work while the device computes."
    ),
    variants=(
        Variant("sync_each", "wait for each step's result before enqueuing the next (the lock-step baseline); the "
                             "same scope in all three: torch and CuPy synchronize an event recorded behind the step, "
                             "JAX blocks on the step's output array"),
        Variant("async", "enqueue every step, return at once; the harness waits at the end"),
        Variant("async_poll", "enqueue every step, then count host loop iterations while polling for completion "
                              "(NVIDIA asyncAPI)"),
    ),
    params=lambda: S.params(m=S.dims(1, 48), n=S.dims(1, 48), steps=st.integers(1, 6), dtype=S.float_dtypes()),
    sizes={
        "smoke": {"m": 192, "n": 192, "steps": 8, "dtype": "float32"},
        "full": {"m": 8192, "n": 4096, "steps": 16, "dtype": "float32"},
    },
    make_inputs=make_inputs,
    reference=reference,
    tolerance=Tolerance({"float32": (1e-4, 1e-5), "float16": (2e-2, 2e-2)}),
    claims=(
        Claim("returns_early", "The host does not wait: the call returns long before the device is done.",
              _returns_early, gpu_only=True),
        Claim("host_free", "While the device computes, the host is free for other work.", _host_free, gpu_only=True),
        Claim("sync_cost", "Synchronizing after every kernel costs time.", _sync_cost, gpu_only=True),
    ),
    floor=floor,
    cheap_reference=lambda p: flops(p) <= 2e9,
    key_apis={
        "torch": ("torch.tanh(x @ w)", "Stream.record_event().synchronize()", "torch.cuda.Event.query()"),
        "cupy": ("cupy.tanh(x @ w)", "Stream.record().synchronize()", "cupy.cuda.Event.done"),
        "jax": ("jax.jit(step)", "jax.Array.block_until_ready()", "jax.Array.is_ready()"),
    },
    framework_notes={
        "jax": "Each step is one jitted call: XLA fuses tanh into the GEMM's epilogue or a second kernel; "
               "the dispatch is asynchronous as in torch and CuPy. No device-wide or stream synchronize: you wait on "
               "arrays, which is why sync_each waits on one step's result in all three frameworks (an event behind "
               "the step in torch and CuPy; torch.cuda.synchronize() would wait for every stream of the device).",
        "cupy": "Event.done polls the event (cudaEventQuery) without blocking.",
    },
    metrics_doc={"cpu_iters_while_waiting": "host loop iterations done while polling for the device (async_poll)"},
)
