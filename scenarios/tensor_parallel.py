"""tensor_parallel — split a layer, not the batch: a Megatron MLP block over WORLD_SIZE ranks.

The block: y = relu(x @ W1 + b1) @ W2 + b2, d_model -> hidden -> d_model, loss = half the sum of
squared errors against a target (dL/dy = y - target: gradients of order one at every size, so that a
float32 tolerance means the same for them at the smoke and the full size; a mean would shrink them by
batch x d_model). Every rank holds the same x, target and full weights (from the seed, as each would
load a checkpoint) and keeps its shard: W1's columns and b1's entries `hidden/N * r ...` (column
parallel) and W2's rows of the same range (row parallel); b2 whole. One step is forward and
backward. What rank r reports: y and dx (dL/dx), whole, and the gradients of its shard (dW1[:, cols_r],
db1[cols_r], dW2[rows_r], db2); `dense` computes everything on one device and reports the same slices.

Communication per step, per rank, as a ring moves it (A = batch x d_model x itemsize, the block's
activation; S = batch x hidden/N x itemsize, one rank's hidden slice):
    tp_megatron / tp_sharded  forward: one all-reduce of A (g); backward: one all-reduce of A (f)
                              wire bytes 2(N-1)/N x A each way
    tp_naive                  forward: all-gather of the hidden slices (S) and of the partial outputs
                              (A), summed locally; backward: all-gather of the partial dx (A)
                              wire bytes (N-1) x (S + A) forward, (N-1) x A backward
The hidden layer grows with the ranks (hidden = hidden_per_rank x N): a rank's share of the work is
the same at every N, and `dense` is the whole block on one device. The impls count what they actually issue (torch: their autograd functions, or a dispatch mode under
DTensor in the untimed first call; JAX: the collectives in the compiled HLO; CuPy: its NCCL calls) and emit it; the claim holds
the counts against this model.
"""
from __future__ import annotations

from typing import Mapping

import numpy as np

from scenarios._models import mlp
from scenarios import _ranks as R
from scenarios import _strategies as S
from scenarios.spec import Claim, Params, Scenario, Tolerance, Variant, Verdict


def hidden(p: Params) -> int:
    return int(p["hidden_per_rank"]) * R.size_of(p)


def block(p: Params, dtype=None) -> dict[str, np.ndarray]:
    """The whole block, the same on every rank: weights (mlp.init_params), input and target."""
    d, dt = int(p["d_model"]), dtype or p["dtype"]
    (w1, b1), (w2, b2) = mlp.init_params([d, hidden(p), d], int(p["seed"]), dt)
    rng = np.random.default_rng(int(p["seed"]) + 1)
    x, target = (rng.standard_normal((2, int(p["batch"]), d))).astype(dt)
    return {"x": x, "target": target, "w1": w1, "b1": b1, "w2": w2, "b2": b2}


def make_inputs(p: Params) -> dict[str, np.ndarray]:
    whole = block(p)
    return R.per_rank(p, lambda _p, r: whole)


def shard_of(p: Params, r: int) -> slice:
    k = int(p["hidden_per_rank"])
    return slice(r * k, (r + 1) * k)


def reference(inputs: dict[str, np.ndarray], p: Params) -> dict[str, np.ndarray]:
    b = block(p, np.float64)
    params = [(b["w1"], b["b1"]), (b["w2"], b["b2"])]
    y, cache = mlp.forward(np, params, b["x"])
    dy = y - b["target"]  # dL/dy of L = sum((y - target)^2) / 2
    (dw1, db1), (dw2, db2) = mlp.backward(np, params, cache, dy)
    dx = mlp.relu_backward(np, cache[0][1], dy @ b["w2"].T) @ b["w1"].T  # what f all-reduces

    def one(_p: Params, r: int) -> dict[str, np.ndarray]:
        s = shard_of(p, r)
        return {"y": y, "dx": dx, "dw1": dw1[:, s], "db1": db1[s], "dw2": dw2[s], "db2": db2}

    return R.per_rank(p, one)


def wire_model(p: Params, variant: str) -> tuple[float, float]:
    """(forward, backward) bytes one rank sends per step, ring algorithms (the table above)."""
    n, item = R.size_of(p), np.dtype(p["dtype"]).itemsize
    a = int(p["batch"]) * int(p["d_model"]) * item
    s = int(p["batch"]) * int(p["hidden_per_rank"]) * item
    if variant in ("tp_megatron", "tp_sharded"):
        return 2 * (n - 1) / n * a, 2 * (n - 1) / n * a
    if variant == "tp_naive":
        return (n - 1) * (s + a), (n - 1) * a
    return 0.0, 0.0


def _judge_megatron(rows: Mapping[str, dict], fw: str, p: Params) -> Verdict:
    claim, numbers = "megatron_f_g", {}
    if "tp_megatron" not in rows:
        raise KeyError("tp_megatron")
    n = int(rows["tp_megatron"].get("ranks", R.size_of(p)))
    want = wire_model(dict(p, world_size=n), "tp_megatron")
    if n < 2:
        return Verdict(claim, fw, "inconclusive", "one rank: there is nothing to communicate", numbers)
    for v in ("tp_megatron", "tp_sharded"):
        m = ((rows.get(v) or {}).get("timing") or {}).get("metrics")
        if not m:  # not run, or not expressible (CuPy has no tp_sharded)
            continue
        got = (m["fwd_wire_bytes"], m["bwd_wire_bytes"])
        calls = (m["fwd_collectives"], m["bwd_collectives"])
        numbers |= {f"{v}_fwd_wire_bytes": got[0], f"{v}_bwd_wire_bytes": got[1],
                    f"{v}_fwd_collectives": calls[0], f"{v}_bwd_collectives": calls[1]}
        if calls != (1, 1) or not np.allclose(got, want):
            return Verdict(claim, fw, "refuted", f"{v}: {calls} collectives and {got} wire bytes (forward, "
                           f"backward); the model: (1, 1) and ({want[0]:.0f}, {want[1]:.0f})", numbers | {"model": want[0]})
    return Verdict(claim, fw, "confirmed", f"one all-reduce each way of {want[0]:.0f} wire bytes, as modelled",
                   numbers | {"model": want[0]})


SCENARIO = Scenario(
    name="tensor_parallel",
    title="Tensor parallelism: split a layer, not the batch",
    concept=(
        "Tensor parallelism splits each weight matrix across ranks. Megatron's MLP block splits the first "
        "linear by columns, so each rank computes its slice of the hidden layer with no communication, and "
        "the second by rows, so each rank holds a partial sum of the output: one all-reduce (g) completes "
        "the forward, and its conjugate f, an all-reduce of the input's gradient, completes the backward. "
        "Gathering whole activations after every linear moves more; forgetting g leaves each rank a partial sum."
    ),
    variants=(
        Variant("dense", "one device computes the whole block (each rank alone); the reference"),
        Variant("tp_naive", "column-parallel, then every linear's output (and dx) all-gathered and summed locally"),
        Variant("tp_megatron", "column then row parallel with Megatron's f and g written out: one all-reduce "
                               "each way (torch autograd.Function, JAX shard_map + psum, CuPy NCCL)"),
        Variant("tp_sharded", "the framework's own tensor parallelism: torch ColwiseParallel/RowwiseParallel on "
                              "DTensor, JAX jit over weights with sharding annotations"),
        Variant("row_parallel_without_reduce", "g forgotten: each rank keeps its partial sum as the output",
                hazard=True),
    ),
    params=lambda: S.params(batch=S.dims(1, 8), d_model=S.dims(1, 8), hidden_per_rank=S.dims(1, 4),
                            dtype=S.float_dtypes("float32"), world_size=R.world_sizes()),
    sizes={
        "smoke": {"batch": 64, "d_model": 128, "hidden_per_rank": 256, "dtype": "float32"},
        # GPT-2-medium-like block on one rank: 2048 tokens, d_model 1024, hidden 4096 (4 x d_model): ~100 GFLOP
        # a step, each matmul ~0.3 ms of float32 at ~55 TFLOP/s (far above a launch), the activation all-reduced
        # 8 MiB. The GPT-2-XL block (4096 tokens, d_model 1600) took ~20 s a framework of a full run; the claim
        # counts collectives, which the size does not change.
        "full": {"batch": 2048, "d_model": 1024, "hidden_per_rank": 4096, "dtype": "float32"},
    },
    make_inputs=make_inputs,
    reference=reference,
    cheap_reference=lambda p: int(p["batch"]) * int(p["d_model"]) * hidden(p) <= 1 << 28,
    # float32 sums of at most max(batch, d_model, hidden) terms of order one, in another order than
    # float64's: about sqrt(terms) ulp of the largest term, below 1e-4 relative up to the full size; ReLU's
    # kink is not met by continuous draws. Gradients are of order one too (the loss is a sum, not a mean).
    tolerance=Tolerance({"float32": (2e-4, 1e-4)}),
    claims=(Claim("megatron_f_g", "Megatron's f and g: one all-reduce of the activations in forward and one "
                                  "in backward (Shoeybi et al. 2019, Megatron-LM, section 3)", _judge_megatron,
                  communicates=True),),
    key_apis={
        "torch": ("parallelize_module + ColwiseParallel / RowwiseParallel", "init_device_mesh", "DTensor",
                  "torch.autograd.Function + dist.all_reduce (f, g)", "dist.all_gather_into_tensor"),
        "cupy": ("NCCLBackend.all_reduce", "NCCLBackend.all_gather", "impls/_shared/tensor_parallel.py (by hand)"),
        "jax": ("jax.shard_map + lax.psum", "all_gather_invariant", "NamedSharding(mesh, P(None, 'r')) on weights + jit",
                "jax.grad", "jit(f).lower(...).compile().as_text() (the collectives)"),
    },
    framework_notes={
        "torch": "DTensor's layouts put Megatron's f and g in for you (parallelize_module); written out, they are "
                 "two autograd.Functions (identity/all-reduce and all-reduce/identity). DTensor's collectives are "
                 "counted by a TorchDispatchMode that lets DTensor desugar first (as CommDebugMode does), in the "
                 "untimed first call only: the mode sees every op, so a timed call under it would time it. gloo's "
                 "all_gather_into_tensor wants its output concatenated along dim 0, not stacked on a new axis.",
        "cupy": "No autograd and no sharding layer: forward and backward by hand, with NCCL all-reduces where "
                "f and g sit; tp_sharded is not expressible. dense runs the six GEMMs autograd runs (two forward; "
                "dh, dW2, dx, dW1 backward), as tp_megatron does. NCCL only: skipped without a GPU per rank.",
        "jax": "Inside shard_map, jax.grad transposes psum for you: the backward all-reduce of f comes from "
               "autodiff. With sharding annotations alone, XLA's partitioner chooses and inserts the collectives. "
               "Trap: lax.all_gather's result is typed 'varying' over the mesh axis, so jax.grad differentiates N "
               "copies of the loss and dx came out N times too large; all_gather_invariant (private in JAX 0.10) "
               "types it as the same on every rank. In tp_naive, autodiff also all-reduces the whole hidden "
               "layer's gradient (slicing an invariant array by the rank index transposes to a psum): its "
               "backward moves more than the naive torch and CuPy write out.",
    },
    metrics_doc={"fwd_collectives": "collective calls issued in forward", "bwd_collectives": "... in backward",
                 "fwd_wire_bytes": "bytes one rank sends in forward (ring: 2(N-1)/N x all-reduce, (N-1) x "
                                   "all-gather payload)", "bwd_wire_bytes": "... in backward"},
    ranks=True,
)
