"""data_parallel — every rank holds the whole model, steps on its shard of the batch, and averages
the gradients with an all-reduce, so that every rank takes the same step the whole batch would.

The model is the small MLP of parts 4-6 (scenarios/_models/mlp.py): layers [d_in, hidden, hidden, d_out],
ReLU between them, mean squared error, plain SGD at rate `lr`, `steps` steps, each on its own global
batch of micro x accum x N rows (N ranks, `accum` micro-batches of `micro` rows per rank). Rank r
takes the contiguous r-th N-th of every batch. Every rank draws its own initial weights (seed +
rank); the data-parallel variants broadcast rank 0's (= the seed's) before the first step, the single-
process variants start from the seed's draw, and the hazard keeps its own. The output is each rank's
parameters after the last step, flat, layer by layer (W0, b0, W1, b1, W2, b2); the reference trains on
the global batch in float64.

Tolerance (float32 against the float64 reference): an element of a gradient is a sum over the
batch's rows; float32 summation of n terms errs by at most about n * 2^-24 of the sum of their
magnitudes, and shards, micro-batches and buckets only change the order of that sum, not its bound.
A step moves a parameter by lr x gradient, so with lr = 0.05, <= 3 steps, n <= 512 rows and
gradient terms of order 1/n, the update errs by at most ~3 x 0.05 x 512 x 6e-8 / 512 x O(1): a few
1e-7 worst case; the stored parameter adds its own rounding, 6e-8 x |p|. Hence 5e-6 + 1e-5 x |p|,
10x above the worst case and ~100x above what the CPU measures (3e-8). Matmuls run in full float32
(no TF32: JAX asks for Precision.HIGHEST). One rare exception is not covered: a pre-activation within
~1e-7 of 0 may take the other side of the ReLU in float32.
The ranks' parameters must also be bit-identical to each other (an all-reduce gives every rank the
same bits); the tests check that on the stacked outputs.
"""
from __future__ import annotations

from typing import Mapping

import numpy as np
from hypothesis import strategies as st

from scenarios._models.flat import local_grad, offsets
from scenarios._models import mlp
from scenarios import _ranks as R
from scenarios import _strategies as S
from scenarios.spec import Claim, Params, Scenario, Tolerance, Variant, Verdict, ratio_verdict


def sizes(p: Params) -> list[int]:
    return [int(p["d_in"]), int(p["hidden"]), int(p["hidden"]), int(p["d_out"])]


def n_params(p: Params) -> int:
    return offsets(sizes(p))[1]


def global_batch(p: Params) -> int:
    return int(p["micro"]) * int(p["accum"]) * R.size_of(p)


def init(p: Params, seed: int) -> np.ndarray:
    """One rank's own draw of the initial weights, flat."""
    return np.concatenate([a.ravel() for layer in mlp.init_params(sizes(p), seed) for a in layer])


def _data(p: Params) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng([int(p["seed"]), 1])  # the data set: the same on every rank
    b, k = global_batch(p), int(p["steps"])
    x = rng.standard_normal((k, b, int(p["d_in"]))).astype(p["dtype"])
    return x, rng.standard_normal((k, b, int(p["d_out"]))).astype(p["dtype"])


def make_inputs(p: Params) -> dict[str, np.ndarray]:
    x, t = _data(p)
    seed = int(p["seed"])
    return R.per_rank(p, lambda _p, r: {"x": x, "t": t, "init": init(p, seed), "init_own": init(p, seed + r)})


def train64(p: Params, x: np.ndarray, t: np.ndarray) -> np.ndarray:
    """The reference: `steps` SGD steps on the global batches, in float64."""
    flat = init(p, int(p["seed"])).astype(np.float64)
    grad = np.empty_like(flat)
    for k in range(int(p["steps"])):
        local_grad(np, flat, sizes(p), x[k].astype(np.float64), t[k].astype(np.float64), grad)
        flat = flat - float(p["lr"]) * grad
    return flat


def reference(inputs: dict[str, np.ndarray], p: Params) -> dict[str, np.ndarray]:
    x, t = _data(p)
    final = train64(p, x, t)
    return R.per_rank(p, lambda _p, r: {"params": final})


def _per_step(row: dict, p: Params) -> float:
    return row["timing"]["device_done"]["median"] / int(p["steps"])


def _overlap(rows: Mapping[str, dict], fw: str, p: Params) -> Verdict:
    naive, over = rows["ddp_naive"], rows["ddp_bucketed_overlap"]
    comm, n = naive["timing"]["metrics"].get("comm_s", float("nan")), R.size_of(p)
    hidden = _per_step(naive, p) - _per_step(over, p)
    numbers = {"comm_s": comm, "naive_step_s": _per_step(naive, p), "overlap_step_s": _per_step(over, p)}
    if n < 2:
        return Verdict("overlap_hides_comm", fw, "inconclusive", "one rank: nothing to communicate", numbers)
    eff = hidden / comm if comm > 0 else float("nan")
    return ratio_verdict("overlap_hides_comm", fw, eff, 0.5, lower_is_confirmed=False, numbers=numbers | {"overlap_efficiency": eff},
                         what=f"overlap efficiency (naive step − bucketed step) / naive's all-reduce time "
                              f"{comm * 1e3:.3g} ms")


def _no_sync(rows: Mapping[str, dict], fw: str, p: Params) -> Verdict:
    m = rows["ddp_accumulate_no_sync"]["timing"]["metrics"]
    a = int(p["accum"])
    if "allreduce_bytes" not in m:
        return Verdict("no_sync_one_over_a", fw, "inconclusive", "the all-reduced bytes were not counted here", {})
    every = a * m["grad_bytes"]  # what an all-reduce after every micro-batch would move
    frac = m["allreduce_bytes"] / every
    ok = abs(frac * a - 1) < 1e-9  # once per step: not more, and not less (no all-reduce at all is no DDP)
    return Verdict("no_sync_one_over_a", fw, "confirmed" if ok else "refuted",
                   f"bytes all-reduced per step / ({a} micro-batches x gradient bytes) = {frac:.3g} "
                   f"{'=' if ok else '≠'} 1/{a} (counted: {m['allreduce_bytes']:.0f} B per step)",
                   {"fraction": frac, "one_over_a": 1 / a, "allreduce_bytes": m["allreduce_bytes"]})


def _bytes(rows: Mapping[str, dict], fw: str, p: Params) -> Verdict:
    """Every communicating variant's counted bytes per step against the gradient's bytes (one all-reduce of each)."""
    ms = {v: rows[v]["timing"]["metrics"] for v in ("ddp_naive", "ddp_bucketed_overlap", "ddp_accumulate_no_sync")}
    if not all("allreduce_bytes" in m for m in ms.values()):
        return Verdict("bytes_2n1n", fw, "inconclusive", "the all-reduced bytes were not counted here", {})
    n, grad = R.size_of(p), ms["ddp_bucketed_overlap"]["grad_bytes"]
    ratios = {v: m["allreduce_bytes"] / grad for v, m in ms.items()}
    wire, model = ms["ddp_bucketed_overlap"]["allreduce_bytes"] * 2 * (n - 1) / n, grad * 2 * (n - 1) / n
    counted = ", ".join(f"{v} {m['allreduce_bytes']:.0f} B in {m.get('buckets', 0):.3g} all-reduces" for v, m in ms.items())
    return Verdict("bytes_2n1n", fw, "confirmed" if all(abs(r - 1) < 1e-9 for r in ratios.values()) else "refuted",
                   f"counted per step: {counted}; gradient {grad:.0f} B: {wire:.0f} B per rank on a ring vs "
                   f"2(N-1)/N x gradient bytes = {model:.0f} B",
                   {"wire_bytes": wire, "model_bytes": model, **{f"ratio_{v}": r for v, r in ratios.items()}})


def _accumulation(rows: Mapping[str, dict], fw: str, p: Params) -> Verdict:
    c = rows["grad_accumulation"]["check"]
    ok = c["checked"] > 0 and c["wrong"] == 0
    return Verdict("accumulation_is_large_batch", fw, "confirmed" if ok else ("refuted" if c["wrong"] else "inconclusive"),
                   f"{c['checked'] - c['wrong']} of {c['checked']} runs of {p['accum']} micro-batches equal the "
                   f"{global_batch(p)}-row batch's float64 parameters within tolerance", {"wrong": c["wrong"]})


def _scaling(rows: Mapping[str, dict], fw: str, p: Params) -> Verdict:
    one, ddp_ = _per_step(rows["single_process"], p), _per_step(rows["ddp_bucketed_overlap"], p)
    n = R.size_of(p)
    eff = one / (n * ddp_)
    numbers = {"single_step_s": one, "ddp_step_s": ddp_, "ranks": n, "efficiency": eff}
    if n < 2:
        return Verdict("scaling", fw, "inconclusive", f"one rank: efficiency {eff:.2f} is DDP's overhead alone", numbers)
    return ratio_verdict("scaling", fw, eff, 0.8, lower_is_confirmed=False, numbers=numbers,
                         what=f"scaling efficiency 1→{n} ranks, single-process step / (N x DDP step)")


SCENARIO = Scenario(
    name="data_parallel",
    title="Data parallelism: gradient accumulation and DDP",
    concept=(
        "Data parallelism replicates the model on every rank and splits the batch: each rank runs forward and "
        "backward on its shard, and an all-reduce averages the gradients, so every rank takes the step the whole "
        "batch would have taken and the replicas stay bit-identical. All-reducing each gradient after backward "
        "leaves the links idle during backward and the GPU idle during the all-reduce; DDP all-reduces buckets of "
        "gradients while backward still runs. Accumulating micro-batches reproduces a large batch in one process; "
        "under DDP, no_sync skips the all-reduce of all but the last micro-batch. The replicas only agree if they "
        "start equal: DDP broadcasts rank 0's weights when it wraps the model."
    ),
    variants=(
        Variant("single_process", "one process steps on the whole global batch (every rank does so alone)"),
        Variant("grad_accumulation", "one process, accum micro-batches per step, gradients summed and scaled by 1/accum"),
        Variant("ddp_naive", "backward on the rank's shard, then one all-reduce per gradient tensor once the whole "
                             "backward is done (no overlap; JAX: one psum per tensor behind an optimization barrier, "
                             "XLA may combine them). comm_s, the all-reduces alone, is measured outside the timed "
                             "calls in all three, so the timed step has no extra synchronization"),
        Variant("ddp_bucketed_overlap", "gradients all-reduced in DDP's buckets while backward runs: torch DDP with its "
                                        "defaults (a first bucket of >= 1 MiB, then 25 MiB, in the order backward "
                                        "makes the gradients ready); CuPy the same buckets (impls/_shared/dp.py), NCCL "
                                        "on a communication stream after events; JAX jit over a batch-sharded array: "
                                        "XLA inserts, splits, combines and schedules the all-reduces, no buckets"),
        Variant("ddp_accumulate_no_sync", "accum micro-batches per step on the shard, one all-reduce of the gradient "
                                          "per step (torch no_sync(), the last micro-batch's buckets overlapping its "
                                          "backward; CuPy the same, written out; JAX shard_map + lax.psum after the "
                                          "accum micro-batches, scheduled by XLA)"),
        Variant("unsynced_init", "every rank keeps its own initial weights (no broadcast from rank 0): the replicas "
                                 "drift apart (torch: DDP with init_sync=False, its buckets; CuPy and JAX: the "
                                 "naive per-tensor all-reduce; a hazard's time is not compared)", hazard=True),
    ),
    params=lambda: S.params(d_in=S.dims(1, 16), hidden=S.dims(1, 24), d_out=S.dims(1, 8), micro=st.integers(1, 4),
                            accum=st.integers(1, 3), steps=st.integers(1, 3), lr=st.just(0.05),
                            dtype=S.float_dtypes("float32"), world_size=R.world_sizes()),
    sizes={
        "smoke": {"d_in": 64, "hidden": 256, "d_out": 16, "micro": 16, "accum": 2, "steps": 2, "lr": 0.05,
                  "dtype": "float32"},
        # 25.2 M parameters (101 MB of float32 gradients: DDP's buckets of 16, 64 and 16 MiB), 1024 rows per rank
        # and step: 146 GFLOP a step (forward 2 x rows x weights, backward twice that less the first layer's dx),
        # ~5 ms of float32 matmuls at the ~28 TFLOP/s measured on a GPU against ~1.4 ms of host launches, so the
        # device sets the pace (at 8.4 M parameters and 512 rows the host did: 4.31 ms host, 4.38 ms device).
        "full": {"d_in": 1024, "hidden": 4096, "d_out": 1024, "micro": 512, "accum": 2, "steps": 3, "lr": 0.05,
                 "dtype": "float32"},
    },
    make_inputs=make_inputs,
    reference=reference,
    cheap_reference=lambda p: n_params(p) * global_batch(p) * int(p["steps"]) <= 1 << 33,
    tolerance=Tolerance({"float32": (1e-5, 5e-6)}),  # (rtol, atol) from the summation order: see the module's text
    claims=(
        Claim("overlap_hides_comm", "Bucketing gradients and all-reducing them during backward hides most of the "
                                    "communication (Li et al., \"PyTorch Distributed\", VLDB 2020).", _overlap,
              communicates=True, gpu_only=True),
        Claim("no_sync_one_over_a", "no_sync cuts gradient communication to 1/A of all-reducing every micro-batch "
                                    "(torch DDP docs, no_sync).", _no_sync, communicates=True),
        Claim("bytes_2n1n", "Each step all-reduces every gradient once: a ring moves 2(N-1)/N x the gradient bytes "
                            "per rank (Patarasuk & Yuan 2009; nccl-tests' busbw).", _bytes, communicates=True),
        Claim("accumulation_is_large_batch", "Gradient accumulation reproduces the large batch (Goyal et al. 2017).",
              _accumulation, reads_checks=True),
        Claim("scaling", "Data parallelism over N ranks runs a fixed global batch's step about N times faster "
                         "(scaling efficiency above 0.8).", _scaling, gpu_only=True),
    ),
    key_apis={
        "torch": ("DistributedDataParallel(model)", "ddp.no_sync()", "ddp.register_comm_hook", "dist.all_reduce",
                  "DistributedDataParallel(init_sync=False)"),
        "cupy": ("scenarios/_models/mlp.py (backward by hand)", "NCCLBackend.all_reduce(stream=)", "cupy.cuda.Event",
                 "Stream.wait_event", "NCCLBackend.broadcast"),
        "jax": ("jax.grad", "jax.shard_map + lax.psum", "jit over a NamedSharding(mesh, P(None, 'r')) batch",
                "lax.optimization_barrier", "Compiled.as_text (the all-reduces counted)",
                "multihost_utils.broadcast_one_to_all"),
    },
    framework_notes={
        "torch": "autograd; DDP broadcasts rank 0's weights when it wraps the model, and its reducer all-reduces "
                 "each bucket from an autograd hook as soon as its gradients are ready (one bucket in the first step, "
                 "rebuilt in ready order after it). A comm hook counts the buckets' bytes; the naive loop counts its "
                 "own calls.",
        "cupy": "No autograd: the backward is written by hand (scenarios/_models/mlp.py; like autograd it skips the first "
                "layer's dx). Buckets are DDP's, computed in impls/_shared/dp.py as contiguous slices of one flat "
                "gradient buffer, all-reduced on a communication stream once an event says backward wrote them. "
                "Every all-reduce goes through a counting wrapper. NCCL only: skipped without a GPU per rank.",
        "jax": "Each variant is one jitted program over every step, compiled on its first call; the bytes are those "
               "of the all-reduces in the compiled program. ddp_bucketed_overlap is the automatic idiom: the steps "
               "jitted over a batch sharded across the processes' devices, XLA inserts the all-reduces and decides "
               "how to split, combine and overlap them (JAX cannot express DDP's buckets). ddp_naive and "
               "ddp_accumulate_no_sync are explicit (shard_map with psum); XLA's combiner may still merge a step's "
               "psums into fewer all-reduces (the buckets metric counts what it made).",
    },
    metrics_doc={"comm_s": "ddp_naive: seconds of the step's all-reduces alone (one per gradient tensor, synchronized "
                           "before and after), measured once in the variant's first, untimed call",
                 "allreduce_bytes": "bytes handed to all-reduce per step and rank, counted from the calls made (torch: "
                                    "DDP's comm hook, the naive loop; CuPy: the communicator's wrapper; JAX: the "
                                    "compiled program's all-reduces)",
                 "grad_bytes": "the model's gradient bytes", "buckets": "all-reduce calls per step"},
    ranks=True,
)
