"""launch_overhead — many tiny kernels: the host's cost of launching them, and how to stop paying it.

A chain of `ops` elementwise operations on a small vector, alternating x <- 1.5 x and x <- tanh(x)
(each one kernel in torch and CuPy). The kernels take a microsecond or two; launching each one from
Python takes longer, so the host, not the device, sets the pace. The baseline launches one kernel per
op; the concept records the chain once and replays it with one launch: a CUDA graph in torch
(torch.cuda.CUDAGraph) and CuPy (stream capture), and in JAX the loop inside one jit.
"""
from __future__ import annotations

from typing import Mapping

import numpy as np
from hypothesis import strategies as st

from scenarios import _strategies as S
from scenarios.spec import Claim, Params, Scenario, Tolerance, Variant, Verdict, ratio_verdict

SCALE = 1.5  # x <- tanh(1.5 x) has attracting fixed points at ±0.8586: the chain stays bounded and away from 0
# Host cost per op must fall at least this much with one launch for the whole chain (the targets).
TARGET = {"torch": 9.0, "cupy": 9.0, "jax": 4.5}


def make_inputs(p: Params) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(p["seed"])
    return {"x": rng.standard_normal(int(p["n"]), dtype=np.float32).astype(p["dtype"])}


def reference(inputs: Mapping[str, np.ndarray], p: Params) -> dict[str, np.ndarray]:
    x = inputs["x"].astype(np.float64)
    for k in range(int(p["ops"])):
        x = x * SCALE if k % 2 == 0 else np.tanh(x)
    return {"x": x}


def _per_op(rows: Mapping[str, dict], variant: str, p: Params) -> float:
    return rows[variant]["timing"]["host_return"]["median"] / int(p["ops"])


def _host_cost(rows: Mapping[str, dict], fw: str, p: Params) -> Verdict:
    eager, graph = _per_op(rows, "eager", p), _per_op(rows, "graph", p)
    ratio = eager / graph if graph > 0 else float("inf")
    v = ratio_verdict("host_cost", fw, ratio, TARGET[fw], lower_is_confirmed=False,
                      what="eager / graph host cost per op",
                      numbers={"eager_us_per_op": eager * 1e6, "graph_us_per_op": graph * 1e6, "ratio": ratio})
    return Verdict(v.claim, fw, v.verdict,
                   f"{eager * 1e6:.2f} µs per op eager, {graph * 1e6:.3f} µs per op with one launch: {v.evidence}",
                   v.numbers)


def _device_time(rows: Mapping[str, dict], fw: str, p: Params) -> Verdict:
    e, g = rows["eager"]["timing"]["device_done"], rows["graph"]["timing"]["device_done"]
    diff = e["median"] - g["median"]
    noise = (e["iqr"] + g["iqr"]) / 2
    verdict = "confirmed" if diff > noise else ("refuted" if diff < -noise else "inconclusive")
    return Verdict("device_time", fw, verdict,
                   f"device done after {e['median'] * 1e3:.3f} ms eager vs {g['median'] * 1e3:.3f} ms with one launch "
                   f"({e['median'] / g['median']:.1f}×); spread ±{noise * 1e3:.3f} ms",
                   {"speedup": e["median"] / g["median"]})


SCENARIO = Scenario(
    name="launch_overhead",
    title="Many tiny kernels: launch them once",
    concept=(
        "Every kernel launch costs the host a few microseconds of Python and driver work, more than a tiny "
        "kernel takes on the device: a chain of tiny ops runs at the host's pace while the GPU idles. "
        "Recording the chain once and replaying it (a CUDA graph; in JAX, the loop compiled inside one jit) "
        "costs one launch for the whole chain."
    ),
    variants=(
        Variant("eager", "one launch per op (torch/CuPy kernels; one jitted call per op in JAX)"),
        Variant("graph", "the whole chain in one launch: CUDA graph replay in torch and CuPy, the loop inside "
                         "one jit (lax.fori_loop, unrolled) in JAX", gpu_only=("torch", "cupy")),
    ),
    params=lambda: S.params(n=S.dims(1, 64), ops=st.integers(1, 40), dtype=S.float_dtypes("float32")),
    sizes={
        "smoke": {"n": 256, "ops": 64, "dtype": "float32"},
        # 512 kernels of ~1-2 µs on 16 KiB: the host's launch cost is the whole story, which is the point.
        "full": {"n": 4096, "ops": 512, "dtype": "float32"},
    },
    make_inputs=make_inputs,
    reference=reference,
    tolerance=Tolerance({"float32": (2e-5, 2e-6)}),
    claims=(
        Claim("host_cost", "One launch for the whole chain cuts the host's cost per op (≥ 9× with CUDA graphs in "
                           "torch and CuPy, ≥ 4.5× with the loop inside jit in JAX).", _host_cost, gpu_only=True),
        Claim("device_time", "The device finishes sooner too: it no longer waits for the host between kernels.",
              _device_time, gpu_only=True),
    ),
    key_apis={
        "torch": ("torch.cuda.CUDAGraph", "torch.cuda.graph(g)", "CUDAGraph.replay()", "Tensor.mul_ / Tensor.tanh_"),
        "cupy": ("cupy.cuda.Stream(non_blocking=True)", "Stream.begin_capture()", "Stream.end_capture()",
                 "cupy.cuda.Graph.launch(stream)"),
        "jax": ("jax.jit", "jax.lax.fori_loop(..., unroll=True)"),
    },
    framework_notes={
        "torch": "The graph is captured in prepare (untimed), after a warm-up on a side stream, into static buffers: "
                 "replay() writes the same output tensor every run. The ops run in place on a copy of the input, so "
                 "eager makes exactly one launch per op (plus one copy) and the graph replays those same kernels.",
        "cupy": "Captured on a non-blocking stream (the legacy default stream cannot capture) after one warm-up run "
                "that compiles and loads the kernels; the ops write in place into one preallocated buffer, so no "
                "memory-pool block is handed out during the capture that the graph would keep writing later. "
                "CuPy refuses cuBLAS calls during capture: elementwise chains capture, matmuls do not.",
        "jax": "JAX has no user-facing CUDA graphs. Its idiom is the loop inside jit: the chain is traced once "
               "(lax.fori_loop, fully unrolled so that no while-loop round trip to the host remains) and XLA fuses "
               "the whole chain into a single kernel — one dispatch, and far less device work too, where torch and "
               "CuPy replay every kernel. The eager baseline is one jitted single-op call per op (JAX's fast C++ "
               "dispatch path). Compilation happens on the first call, which the harness times apart. The in-jit "
               "loop also runs on the CPU, where it shows the same host saving.",
    },
    metrics_doc={"host_us_per_op": "host time spent enqueueing the chain, measured inside the run, divided by ops"},
)
