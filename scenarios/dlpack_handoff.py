"""dlpack_handoff — torch -> CuPy -> JAX -> torch on one GPU without copies, ordered by the protocol.

Three stages x <- tanh(x @ W), each done by the next framework of the ring torch -> CuPy -> JAX, the
data handed from one to the next while the producer's GEMM is still running. Each framework's row
starts and ends the ring with that framework (torch's row: torch -> CuPy -> JAX -> torch). The
baseline hands off through host memory (a copy out, a copy in); the concept hands off with DLPack:
the consumer passes its stream, the producer orders its current stream before it, and the consumer
works on the producer's memory (the same pointer). The hazard variant shows the protocol's one trap:
a producer that queued its kernel on a side stream but exports after leaving that stream's context.

Where CuPy has no GPU (the CPU), the ring is torch -> JAX -> torch and the three stages alternate.

Memory: each worker holds all three allocators here, the exception to "each framework within its
fraction (0.3)". The row's framework keeps the cap the harness gave it (its worker keeps it for the
other scenarios, so it is not lowered); the two frameworks the ring opens beside it (each impl's
guest()) are capped at a third of it each. A worker may hold 5/3 of its fraction; the ring itself
holds under 1 GiB per worker at the full size.
"""
from __future__ import annotations

from typing import Mapping

import numpy as np

from scenarios import _strategies as S
from scenarios.spec import Claim, Params, Scenario, Tolerance, Variant, Verdict, ratio_verdict

STAGES = 3


def make_inputs(p: Params) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(p["seed"])
    m, n = int(p["m"]), int(p["n"])
    x = rng.standard_normal((m, n), dtype=np.float32)
    w = rng.standard_normal((n, n), dtype=np.float32) / np.float32(np.sqrt(n))  # gain 1: tanh stays busy
    return {"x": x.astype(p["dtype"]), "w": w.astype(p["dtype"])}


def reference(inputs: Mapping[str, np.ndarray], p: Params) -> dict[str, np.ndarray]:
    x, w = inputs["x"].astype(np.float64), inputs["w"].astype(np.float64)
    for _ in range(STAGES):
        x = np.tanh(x @ w)
    return {"y": x}


def flops(p: Params) -> float:
    return STAGES * 2.0 * int(p["m"]) * int(p["n"]) ** 2


def floor(p: Params, machine: Mapping[str, float], variant: str) -> float | None:
    if "fp32_flops" not in machine:
        return None
    return flops(p) / machine["fp32_flops"]  # the three GEMMs; a zero-copy hand-off adds no device work


def _metric(rows: Mapping[str, dict], variant: str, name: str) -> float:
    return rows[variant]["timing"]["metrics"].get(name, float("nan"))


def _zero_copy(rows: Mapping[str, dict], fw: str, p: Params) -> Verdict:
    hops, same = _metric(rows, "dlpack", "hops"), _metric(rows, "dlpack", "zero_copy_hops")
    nums = {"hops": hops, "zero_copy_hops": same, "frameworks": _metric(rows, "dlpack", "ring_frameworks")}
    if not hops > 0:
        return Verdict("zero_copy", fw, "inconclusive", "no hand-off between frameworks ran", nums)
    ok = same == hops
    return Verdict("zero_copy", fw, "confirmed" if ok else "refuted",
                   f"{same:g} of {hops:g} DLPack hand-offs kept the data pointer "
                   f"({nums['frameworks']:g} frameworks in the ring)", nums)


def _ordered(rows: Mapping[str, dict], fw: str, p: Params) -> Verdict:
    r = rows["dlpack"]  # present only when every checked run matched (rows with wrong outputs are not judged)
    busy, hops = _metric(rows, "dlpack", "busy_handoffs"), _metric(rows, "dlpack", "hops")
    nums = {"busy_handoffs": busy, "hops": hops, "checked": r["check"]["checked"]}
    if not busy > 0:
        return Verdict("ordered", fw, "inconclusive",
                       f"every producer had finished before its hand-off ({hops:g} hops): nothing to order", nums)
    return Verdict("ordered", fw, "confirmed",
                   f"{busy:g} of {hops:g} hand-offs happened while the producer was still computing, and "
                   f"{r['check']['checked']} checked runs matched the expected output", nums)


def _off_stream(rows: Mapping[str, dict], fw: str, p: Params) -> Verdict:
    c = rows["export_off_stream"]["check"]
    rate = c["wrong"] / c["checked"] if c["checked"] else float("nan")
    v = ratio_verdict("off_stream", fw, rate, 0.0, lower_is_confirmed=False, what="share of wrong runs",
                      numbers={"wrong": c["wrong"], "checked": c["checked"]})
    return Verdict(v.claim, fw, v.verdict, f"{c['wrong']} of {c['checked']} runs wrong: {v.evidence}", v.numbers)


def _copy_cost(rows: Mapping[str, dict], fw: str, p: Params) -> Verdict:
    h, d = rows["via_host"]["timing"]["device_done"], rows["dlpack"]["timing"]["device_done"]
    diff = h["median"] - d["median"]
    noise = (h["iqr"] + d["iqr"]) / 2
    verdict = "confirmed" if diff > noise else ("refuted" if diff < -noise else "inconclusive")
    return Verdict("copy_cost", fw, verdict,
                   f"through host memory {h['median'] * 1e3:.2f} ms, DLPack {d['median'] * 1e3:.2f} ms "
                   f"({h['median'] / d['median']:.1f}×); spread ±{noise * 1e3:.2f} ms",
                   {"via_host_s": h["median"], "dlpack_s": d["median"]})


SCENARIO = Scenario(
    name="dlpack_handoff",
    title="Hand data across frameworks without copies",
    concept=(
        "DLPack lets one framework work on another's device memory in place: the consumer imports the producer's "
        "buffer (same pointer, no copy) and passes its own stream, and the producer makes that stream wait for "
        "the work it has queued, so the consumer sees finished data even when the producer's kernel is still "
        "running. The producer orders its current stream: data produced on a side stream must be handed off "
        "while that stream is current. And the producer's buffer must outlive the consumer's use of it."
    ),
    variants=(
        Variant("via_host", "each hand-off copies to host memory (numpy) and back onto the device"),
        Variant("dlpack", "each hand-off is a DLPack import (from_dlpack) while the producer's stream is current"),
        Variant("export_off_stream", "torch and CuPy queue their stage on a side stream but hand off after leaving "
                                     "its context: the protocol orders the wrong stream", hazard=True, gpu_only=True),
    ),
    params=lambda: S.params(m=S.dims(1, 48), n=S.dims(1, 48), dtype=S.float_dtypes("float32")),
    sizes={
        "smoke": {"m": 256, "n": 128, "dtype": "float32"},
        # Each stage is a 0.14 TFLOP GEMM (about 2.5 ms at ~55 TFLOP/s); a hand-off's host work takes well under
        # 1 ms, so every consumer imports while its producer is still computing. 64 MiB per activation (128 MiB
        # once, cut to shorten a full run).
        "full": {"m": 4096, "n": 4096, "dtype": "float32"},
    },
    make_inputs=make_inputs,
    reference=reference,
    cheap_reference=lambda p: flops(p) <= 2e9,
    tolerance=Tolerance({"float32": (1e-4, 1e-5)}),
    claims=(
        Claim("zero_copy", "DLPack hand-offs share memory: the consumer sees the producer's data pointer.", _zero_copy),
        Claim("ordered", "Each consumer sees finished data although the producer was still computing at the hand-off: "
                         "the protocol orders the streams.", _ordered, gpu_only=True),
        Claim("off_stream", "Handing off after leaving the producing stream's context lets the consumer read "
                            "unfinished data.", _off_stream, gpu_only=True),
        Claim("copy_cost", "Handing off through host memory costs time that DLPack does not.",
              _copy_cost, gpu_only=True),
    ),
    floor=floor,
    key_apis={
        "torch": ("torch.from_dlpack(x)", "Tensor.__dlpack__(stream=)", "torch.cuda.stream(s)", "Tensor.data_ptr()"),
        "cupy": ("cupy.from_dlpack(x)", "ndarray.__dlpack__(stream=)", "with cupy.cuda.Stream(non_blocking=True)",
                 "ndarray.data.ptr"),
        "jax": ("jax.dlpack.from_dlpack(x)", "jax.Array.__dlpack__(stream=)", "jax.Array.unsafe_buffer_pointer()",
                "jax.Array.is_ready()"),
    },
    framework_notes={
        "torch": "Consumer: torch.from_dlpack passes torch's current stream. Producer: Tensor.__dlpack__(stream=s) "
                 "records an event on torch's *current* stream and makes s wait for it, so a tensor produced under "
                 "torch.cuda.stream(side) must be handed off inside that block (or after current_stream().wait_stream"
                 "(side)). Called directly, __dlpack__ defaults to stream=-1 (no ordering). Tensors with "
                 "requires_grad=True are refused (BufferError): detach() first. Lifetime: the capsule keeps the tensor "
                 "alive, but the caching allocator knows only torch's streams: once freed, its block can be reused "
                 "while the consumer's stream still reads it. The ring keeps every buffer until the harness has waited. "
                 "Opened by another framework's ring, torch is capped at a third of that row's cap "
                 "(set_per_process_memory_fraction; see docs/harness.md, Sharing one GPU).",
        "cupy": "Consumer: cupy.from_dlpack passes CuPy's current stream. Producer: ndarray.__dlpack__(stream=s) records "
                "an event on CuPy's *current* stream and makes s wait: the same rule as torch. Stages run on a "
                "non-blocking stream (a plain cupy.cuda.Stream() would also synchronize with the legacy default "
                "stream). The memory pool has no record_stream: keep the producer's array alive until the consumer is "
                "done. No requires_grad concept. Opened by another framework's ring, CuPy's pool is capped at a third of "
                "that row's cap (set_limit).",
        "jax": "Consumer: jax.dlpack.from_dlpack passes the stream XLA uses for external ready events. Producer: "
               "jax.Array.__dlpack__(stream=s) makes s wait for that buffer's own ready event, and without a stream "
               "blocks the host until the buffer is ready: JAX tracks readiness per buffer, not per stream, so it "
               "cannot make the off-stream mistake (its hops stay ordered in the hazard variant). JAX arrays are "
               "immutable: a consumer must not write into memory imported from JAX, and JAX assumes nobody writes into "
               "memory it imported. No user streams: JAX's stage has no stream context to enter. Opened by another "
               "framework's ring, JAX starts with no preallocation (else it takes 75% of the GPU at once) and "
               "XLA_PYTHON_CLIENT_MEM_FRACTION at a third of that row's cap.",
    },
    metrics_doc={
        "ring_frameworks": "frameworks in the ring (3 on a GPU; 2 where CuPy has no device)",
        "hops": "hand-offs between frameworks in one run",
        "zero_copy_hops": "hand-offs where the consumer's data pointer equals the producer's",
        "busy_handoffs": "hand-offs made while the producer's stage was still running on the device",
    },
)
