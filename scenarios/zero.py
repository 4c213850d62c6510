"""zero — shard what data parallelism replicates (Rajbhandari et al., "ZeRO", SC 2020).

The model: data_parallel's MLP (scenarios/_models/mlp.py), `depth` layers of width x width with ReLU between
them, mean squared error; Adam (torch.optim.Adam's formula, no weight decay) at rate `lr` with `eps`, for
`steps` steps. Every layer the same size (JAX stacks them and scans over them). Stage 1 is written out in
all three: each layer padded to a multiple of N, rank r owning chunk r of every layer (impls/_shared/
zero.py's layout); torch's stages 2 and 3 are FSDP2, which shards each tensor's rows. Each step's global
batch is rows x N rows; rank r takes the r-th N-th. Every rank starts from the seed's draw (data_parallel's
init). The output is each rank's full parameters after the last step, flat (W0, b0, W1, b1, ...), read back
by the harness after the timed call (impls/_shared/zero.py Readback: the gather of zero2/zero3's shards and
the unpadding are not timed); the reference trains on the global batch in float64. Every stage takes the
same steps as ddp, so they must all equal it.

Tolerance (float32 against the float64 reference). Adam divides the first moment by the root of the
second: a parameter moves by about lr x g / (|g| + eps), about lr whatever the gradient's scale where
|g| >> eps, so a gradient's float32 error dg moves its update by up to lr x dg / (|g| + eps). At eps = 1e-4
(lr = 1e-3, steps <= 3) rounding alone stays under 4e-8 at the full size (numpy's float32 and CuPy's on a
GPU alike). The flat band, 1e-4 + 1e-5 x |p|, a tenth of a full step, still fails a stage that skipped
or double-counted a shard's update in most parameters (61% at the full size). What it cannot hold: a
pre-activation within float32's rounding of zero, which another summation order (another card, another
library's GEMM) may put on the other side of the ReLU. That changes its unit's share of a whole column of
gradients outright, and Adam moves some of that column's parameters by a fifth of a step: one GPU put 103
of 4.2 M parameters of CuPy's rows 2.4e-4 off at seed 20261205, and the same seed with emulated other
summation orders (each GEMM's output moved by its rounding's standard deviation) put 108 off by 2.1e-4 in
one run of four; at seed 7 another card's torch and JAX, and one emulated run, put parameters 4.5e-5 off.
Where an output is outside the flat band, the check asks error_bound: a float64 run beside a bound on a
correct float32 run's error per parameter (scenarios/_models/bound.py derives it, ambiguous ReLUs
included); at the full size its median is 2e-5, over 1e-4 for 4-7% of the parameters.
The ranks' final parameters are bit-identical (all-reduce and all-gather give every rank the same bits).

Memory, per rank, float32 Adam with Psi parameters on N ranks (the paper's Figure 1 with 4-byte
parameters and gradients and K = 8 bytes of moments): ddp 16 Psi; zero1 8 Psi + 8 Psi/N; zero2 4 Psi +
12 Psi/N; zero3 16 Psi/N. The impls emit the bytes of parameters, gradients and optimizer state a rank
holds at the optimizer step, by the framework's own accounting of its arrays (torch: tensors, DTensors'
to_local(), the local optimizer's state; JAX: addressable shards' nbytes; CuPy: ndarray.nbytes).
Communication per step and rank, as bytes sent on a ring: ddp all-reduces the gradient, 2(N-1)/N x 4 Psi;
stage 1 and 2 reduce-scatter it and all-gather the parameters, the same bytes; stage 3 all-gathers the
parameters twice (forward, backward), 1.5x. Overlap differs and is not written out the same way: DDP and
FSDP2 issue theirs on their own streams, overlapping backward (FSDP2 also prefetches the next layer's
gather); torch's stage 1 and every CuPy collective run on the compute stream, in order, after the work
that produced their input (no overlap, no prefetch); in JAX, XLA schedules them within a program.
"""
from __future__ import annotations

import functools
import json
from typing import Mapping

import numpy as np
from hypothesis import strategies as st

from scenarios._models.bound import adam_bound
from scenarios._models.flat import local_grad, offsets
from scenarios._models import mlp
from scenarios import _ranks as R
from scenarios import _strategies as S
from scenarios.spec import Claim, Params, Scenario, Tolerance, Variant, Verdict

STAGES = ("ddp", "zero1", "zero2", "zero3")


def sizes(p: Params) -> list[int]:
    return [int(p["width"])] * (int(p["depth"]) + 1)


def n_params(p: Params) -> int:
    return offsets(sizes(p))[1]


def model_bytes(stage: str, psi: int, n: int) -> float:
    """The paper's per-rank bytes of parameters, gradients and Adam state, float32 throughout."""
    return {"ddp": 16 * psi, "zero1": 8 * psi + 8 * psi / n, "zero2": 4 * psi + 12 * psi / n,
            "zero3": 16 * psi / n}[stage]


def _data(p: Params) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng([int(p["seed"]), 1])  # the data set: the same on every rank
    b, k, w = int(p["rows"]) * R.size_of(p), int(p["steps"]), int(p["width"])
    return (rng.standard_normal((k, b, w)).astype(p["dtype"]), rng.standard_normal((k, b, w)).astype(p["dtype"]))


def init(p: Params) -> np.ndarray:
    return np.concatenate([a.ravel() for layer in mlp.init_params(sizes(p), int(p["seed"])) for a in layer])


def make_inputs(p: Params) -> dict[str, np.ndarray]:
    x, t = _data(p)
    return R.per_rank(p, lambda _p, r: {"x": x, "t": t, "init": init(p)})


def train64(p: Params, x: np.ndarray, t: np.ndarray) -> np.ndarray:
    """The reference: `steps` Adam steps on the global batches, in float64."""
    flat = init(p).astype(np.float64)
    g, m, v = (np.zeros_like(flat) for _ in range(3))
    for k in range(int(p["steps"])):
        local_grad(np, flat, sizes(p), x[k].astype(np.float64), t[k].astype(np.float64), g)
        mlp.adam(np, flat, g, m, v, k + 1, float(p["lr"]), eps=float(p["eps"]))
    return flat


def reference(inputs: dict[str, np.ndarray], p: Params) -> dict[str, np.ndarray]:
    final = train64(p, *_data(p))
    return R.per_rank(p, lambda _p, r: {"params": final})


def error_bound(p: Params, key: str) -> np.ndarray | None:
    """Per parameter, how far a correct float32 run may end beyond the flat band (scenarios/_models/bound.py):
    every rank ends with the same parameters, so one bound serves the rank's output and the stacked ones."""
    if key != "params":
        return None
    return _bound(json.dumps({k: v for k, v in p.items() if k != "rank"}, sort_keys=True))


@functools.lru_cache(maxsize=4)
def _bound(point: str) -> np.ndarray:
    p = json.loads(point)
    x, t = _data(p)
    return adam_bound(init(p), sizes(p), x, t, float(p["lr"]), float(p["eps"]))[0]


def _memory(rows: Mapping[str, dict], fw: str, p: Params) -> Verdict:
    psi, n = n_params(p), R.size_of(p)
    ratios, parts = {}, []
    for s in STAGES:
        got = rows[s]["timing"]["metrics"]["model_state_bytes"]
        ratios[s] = got / model_bytes(s, psi, n)
        parts.append(f"{s} {got / psi:.2f} Psi vs {model_bytes(s, psi, n) / psi:.2f} Psi")
    worst = max(ratios, key=lambda s: abs(ratios[s] - 1))
    word = "confirmed" if abs(ratios[worst] - 1) <= 0.1 else "refuted"
    return Verdict("memory_model", fw, word, f"bytes held at the optimizer step, N = {n}: " + "; ".join(parts)
                   + f" (worst {worst}: {ratios[worst]:.3f}x)", {f"{s}_ratio": r for s, r in ratios.items()})


def _comm(rows: Mapping[str, dict], fw: str, p: Params) -> Verdict:
    n = R.size_of(p)
    base = rows["ddp"]["timing"]["metrics"].get("comm_bytes", float("nan"))
    if n < 2:
        return Verdict("comm_model", fw, "inconclusive", "one rank: nothing is sent", {})
    ratios = {s: rows[s]["timing"]["metrics"].get("comm_bytes", float("nan")) / base for s in STAGES[1:]}
    ok = abs(ratios["zero1"] - 1) <= 0.05 and abs(ratios["zero2"] - 1) <= 0.05 and 1.2 <= ratios["zero3"] <= 1.6
    word = "inconclusive" if not all(np.isfinite(list(ratios.values()))) else ("confirmed" if ok else "refuted")
    return Verdict("comm_model", fw, word, f"bytes sent per step vs ddp's {base:.0f} B: "
                   + ", ".join(f"{s} {r:.3g}x" for s, r in ratios.items()) + " (model: 1, 1, about 1.5)",
                   {f"{s}_ratio": r for s, r in ratios.items()})


SCENARIO = Scenario(
    name="zero",
    title="ZeRO: shard the optimizer state, the gradients, the parameters",
    concept=(
        "Data parallelism keeps a whole copy of the model state on every rank: with float32 Adam, 16 bytes per "
        "parameter (parameter, gradient, two moments). ZeRO shards what is replicated. Stage 1 shards Adam's "
        "moments: a rank updates only its shard of the parameters, then the shards are all-gathered. Stage 2 "
        "also shards the gradients: a reduce-scatter replaces the all-reduce, and a rank keeps only the sum of "
        "its shard. Stage 3 also shards the parameters: each layer is all-gathered before forward and again "
        "before backward, and freed after use. Stages 1 and 2 send what DDP sends (an all-reduce is a reduce-"
        "scatter plus an all-gather); stage 3 adds one all-gather: 1.5x."
    ),
    variants=(
        Variant("ddp", "everything replicated: the gradient all-reduced, Adam on every parameter on every rank"),
        Variant("zero1", "Adam's moments sharded, written out in all three: each layer's gradient reduce-"
                         "scattered after backward, Adam on the rank's chunks, each layer all-gathered (torch and "
                         "CuPy on the compute stream, no overlap)"),
        Variant("zero2", "gradients sharded too (torch FSDP2 fully_shard, reshard_after_forward=False, "
                         "overlapped on its streams; CuPy layer by layer on the compute stream; JAX one "
                         "reduce-scatter after backward's loop)"),
        Variant("zero3", "parameters sharded too, each layer all-gathered before forward and again before "
                         "backward (torch FSDP2 reshard_after_forward=True, prefetched; CuPy on the compute "
                         "stream, no prefetch; JAX all_gather in a scanned layer under jax.checkpoint)"),
    ),
    params=lambda: S.params(width=S.dims(1, 16), depth=st.integers(1, 4), rows=st.integers(1, 4),
                            steps=st.integers(1, 3), lr=st.just(1e-3), eps=st.just(1e-4),
                            dtype=S.float_dtypes("float32"), world_size=R.world_sizes()),
    sizes={
        "smoke": {"width": 128, "depth": 4, "rows": 16, "steps": 2, "lr": 1e-3, "eps": 1e-4, "dtype": "float32"},
        # 4.2 M parameters (67 MB of float32 model state replicated), 256 rows per rank and step.
        "full": {"width": 1024, "depth": 4, "rows": 256, "steps": 3, "lr": 1e-3, "eps": 1e-4, "dtype": "float32"},
    },
    make_inputs=make_inputs,
    reference=reference,
    tolerance=Tolerance({"float32": (1e-5, 1e-4)}),  # (rtol, atol): Adam's amplification, see the module's text
    error_bound=error_bound,  # beyond it: a ReLU float32 may take on the other side (the module's text)
    claims=(
        Claim("memory_model", "Per rank, float32 Adam holds 16 Psi replicated, 8 Psi + 8 Psi/N at stage 1, 4 Psi + "
                              "12 Psi/N at stage 2 and 16 Psi/N at stage 3, within 10% (Rajbhandari et al. 2020, "
                              "Figure 1).", _memory, communicates=True),
        Claim("comm_model", "Stages 1 and 2 send what DDP sends per step; stage 3 about 1.5x (Rajbhandari et al. "
                            "2020, section 7).", _comm, communicates=True),
    ),
    key_apis={
        "torch": ("DistributedDataParallel(gradient_as_bucket_view=True) + torch.optim.Adam",
                  "dist.reduce_scatter_single / all_gather_single (in place on a flat buffer)",
                  "fully_shard(mesh=init_device_mesh(...), reshard_after_forward=)", "DTensor.to_local()",
                  "TorchDispatchMode (counts c10d collectives)"),
        "cupy": ("impls/_shared/zero.py (the stages by hand)", "NCCLBackend.reduce_scatter (in place)",
                 "NCCLBackend.all_gather (in place)", "NCCLBackend.all_reduce",
                 "get_default_memory_pool().used_bytes()"),
        "jax": ("jax.shard_map(check_vma=False)", "lax.psum_scatter(tiled=True)", "lax.all_gather(tiled=True)",
                "lax.scan + jax.checkpoint(policy=dots_with_no_batch_dims_saveable) (re-gather in backward)", "NamedSharding(mesh, P('r')) on moments, gradients, "
                "parameters", "compiled.memory_analysis()"),
    },
    framework_notes={
        "torch": "Stage 1 is written out (a ZeroRedundancyOptimizer over DDP would all-reduce the whole gradient and "
                 "then broadcast each rank's parameters: 1.5x DDP's bytes, not the paper's 1x). FSDP2 has no true "
                 "stage 2: reshard_after_forward=False keeps a layer gathered from forward to backward (one "
                 "all-gather per step, DDP's bytes), but the parameters are resharded after backward, so at the "
                 "optimizer step a rank holds stage 3's 16 Psi/N; the unsharded 4 Psi lives only inside forward "
                 "and backward (peak_bytes on a GPU). FSDP2 overlaps its collectives with compute (its own streams, "
                 "prefetch); stage 1's run on the compute stream after backward.",
        "cupy": "Every byte is written out (impls/_shared/zero.py): in-place NCCL reduce-scatter and all-gather on "
                "each layer's padded segment, on the compute stream in order: nothing overlaps, nothing is "
                "prefetched (what FSDP2 and DeepSpeed's overlap_comm hide is paid here). NCCL only: skipped "
                "without a GPU per rank.",
        "jax": "Explicit: shard_map over the processes' mesh with psum / psum_scatter / all_gather; the state lives "
               "in global (layers, segment) arrays sharded P(None, 'r') (each device its chunk of every layer) or "
               "replicated. Forward is a lax.scan over the layers under jax.checkpoint saving only the matmuls: "
               "stage 3's compiled program all-gathers each layer in forward's loop and again in backward's (the "
               "transpose of all_gather is the reduce-scatter of its gradient), 1.5x DDP's bytes, read from the "
               "compiled HLO with the loops' trip counts. Without the scan, XLA's CPU compiler merged the "
               "backward re-gather with forward's (jax.checkpoint's optimization barriers removed, then CSE) and "
               "kept each layer gathered: stage 2's schedule.",
    },
    metrics_doc={"param_bytes": "parameter bytes a rank holds at the optimizer step (its local shards)",
                 "grad_bytes": "gradient bytes a rank holds at the optimizer step",
                 "optim_bytes": "optimizer-state bytes a rank holds (Adam's moments; torch also its 4-byte step "
                                "counters)",
                 "model_state_bytes": "param + grad + optim bytes: the paper's per-rank model state",
                 "peak_bytes": "peak bytes in a step by the allocator (torch: CUDA max_memory_allocated over the "
                               "steps minus what was allocated before the run, plus the stage's resident parameters "
                               "and DDP's gradient buckets; CuPy: the memory pool's used bytes sampled after each "
                               "gather, reduce-scatter and update; JAX: XLA's memory_analysis of the compiled steps, "
                               "arguments + outputs + temporaries); not emitted by torch on the CPU. Not comparable "
                               "across the three: JAX's counts the largest program's inputs (x, t too) and its "
                               "undonated outputs, CuPy's is sampled at chosen points",
                 "comm_bytes": "bytes a rank sends per step on a ring (all-reduce 2(N-1)/N of the buffer, reduce-"
                               "scatter and all-gather (N-1)/N of the whole, broadcast (N-1)/N), from the "
                               "collectives issued: torch counted by a dispatch mode over a stage's first call, "
                               "CuPy by the comm every NCCL call goes through, JAX read from the compiled HLO "
                               "(a loop's collectives times its trip count)",
                 **{f"comm_bytes_{k}": f"the part of comm_bytes sent by {k.replace('_', '-')}s"
                    for k in ("all_reduce", "reduce_scatter", "all_gather", "broadcast")}},
    ranks=True,
)
