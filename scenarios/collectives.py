"""collectives — the seven collective operations, measured as nccl-tests measures them.

Every rank holds `count` integer-valued floats drawn from seed + rank, so every reduction order gives
the same bits and equivalence is exact (as in nccl-tests). The operation is a parameter (one point
of the sweep per operation and size); what each rank ends with (N ranks, x_j rank j's input, c =
count / N):

    broadcast       x_0 (from root 0)
    reduce          sum_j x_j on root 0; the other ranks report zeros (their buffer is unspecified)
    all_reduce      sum_j x_j
    all_gather      x_0 | x_1 | ... | x_{N-1}
    reduce_scatter  chunk r of sum_j x_j
    all_to_all      chunk r of x_0 | chunk r of x_1 | ...
    barrier         x_r, once every rank has arrived

The rows carry nccl-tests' columns: time (the slowest rank), algbw = bytes / time with bytes the
larger of a rank's send and receive buffers, busbw = algbw x 2(N-1)/N for all_reduce, x (N-1)/N
for all_gather, reduce_scatter and all_to_all, x 1 for broadcast and reduce, and wrong runs.

The floor of a row is raw NCCL: the same operation at the same size through cupy.cuda.nccl's
NcclCommunicator on raw buffers, measured in this run by the CuPy ranks themselves before the
timing (harness/backends/nccl_floor.py; the slowest rank's median), as the raw cudaMemcpy is for
the transfers; "% of floor" is how close a framework's call comes to it. barrier has no floor (no
bytes); without CuPy on GPUs there is none, and the scenario's floor_why says so. The floor is
out of place; at one rank that is a device copy (a 256 MiB broadcast: 146 µs on the H200, 2026-12-03)
while a framework's in-place broadcast or reduce copies nothing, so "% of floor" above 100% at world
size 1 means no copy was made, not a faster NCCL: the floor means something from two ranks on.
"""
from __future__ import annotations

from typing import Mapping

import numpy as np
from hypothesis import strategies as st

from scenarios import _ranks as R
from scenarios import _strategies as S
from scenarios.spec import Claim, Params, Scenario, Tolerance, Variant, Verdict

OPS = ("broadcast", "reduce", "all_reduce", "all_gather", "reduce_scatter", "all_to_all", "barrier")
# Latency (4 KiB), the middle (1 MiB) and bandwidth (256 MiB): seven operations x three sizes x three
# frameworks must fit one GPU lease beside the other scenarios.
GPU_SIZES = ((4 << 10, "4 KiB"), (1 << 20, "1 MiB"), (256 << 20, "256 MiB"))
CPU_SIZES = ((64 << 10, "64 KiB"),)  # one size per operation: CI's time


def count(p: Params) -> int:
    """Elements per rank: the size's bytes, rounded down to a multiple of the world size."""
    n = R.size_of(p)
    return max(n, int(p["bytes"]) // np.dtype(p["dtype"]).itemsize // n * n)


def nbytes(p: Params) -> int:
    """nccl-tests' size: the larger of one rank's send and receive buffers."""
    size = count(p) * np.dtype(p["dtype"]).itemsize
    return size * R.size_of(p) if p["op"] == "all_gather" else size


def floor_key(p: Params) -> str:
    """The machine ceiling that holds the raw NCCL time of p's operation at p's size and world size."""
    return f"nccl_{p['op']}_{nbytes(p)}B_{R.size_of(p)}r_s"


def floor(p: Params, machine: Mapping[str, float], variant: str) -> float | None:
    return machine.get(floor_key(p))


def bus_factor(op: str, n: int) -> float:
    if op == "all_reduce":
        return 2 * (n - 1) / n
    if op in ("all_gather", "reduce_scatter", "all_to_all"):
        return (n - 1) / n
    return 1.0


def _x(p: Params, r: int) -> dict[str, np.ndarray]:
    return {"x": R.small_ints(np.random.default_rng(int(p["seed"]) + r), (count(p),), p["dtype"])}


def make_inputs(p: Params) -> dict[str, np.ndarray]:
    return R.per_rank(p, _x)


def reference(inputs: dict[str, np.ndarray], p: Params) -> dict[str, np.ndarray]:
    n, op, c = R.size_of(p), p["op"], count(p) // R.size_of(p)
    mine = int(p["rank"]) if "rank" in p else None

    def x(r: int) -> np.ndarray:  # rank r's input in float64: this rank's from inputs, another's drawn again
        return (inputs["x"] if r == mine else inputs["x"][r] if mine is None else _x(p, r)["x"]).astype(np.float64)

    def one(_p: Params, r: int) -> dict[str, np.ndarray]:
        if op in ("broadcast", "barrier"):
            return {"out": x(0 if op == "broadcast" else r)}
        if op in ("all_gather", "all_to_all"):
            part = slice(None) if op == "all_gather" else slice(r * c, (r + 1) * c)
            return {"out": np.concatenate([x(j)[part] for j in range(n)])}
        part = slice(r * c, (r + 1) * c) if op == "reduce_scatter" else slice(None)
        total = sum(x(j)[part] for j in range(n))
        return {"out": np.zeros_like(total) if op == "reduce" and r != 0 else total}

    return R.per_rank(p, one)


def _sweep(sizes: tuple[tuple[int, str], ...]) -> list[Params]:
    """Every operation at every size, but barrier at the smallest only: it moves none of the data, so its
    time at 1 MiB and 256 MiB was the same latency again (~0.05-0.6 ms on the H200), for ~6 s a framework
    of making and checking 256 MiB around it."""
    return [{"op": op, "bytes": b, "dtype": "float32", "label": f"{op} {label}"}
            for op in OPS for b, label in (sizes[:1] if op == "barrier" else sizes)]


def _exact(rows: dict, fw: str, p: Params) -> Verdict:
    c = rows["collective"]["check"]
    if not c["checked"] or c["against"] == "none":
        return Verdict("exact", fw, "inconclusive", "no timed run was checked against the reference")
    word = "confirmed" if c["wrong"] == 0 else "refuted"
    return Verdict("exact", fw, word, f"#wrong runs: {c['wrong']} of {c['checked']} checked ({p['op']})",
                   {"wrong": c["wrong"], "checked": c["checked"]})


SCENARIO = Scenario(
    name="collectives",
    title="Seven collectives, measured as nccl-tests measures them",
    concept=(
        "A collective is one call that every rank of the group makes; the library moves the data (NCCL's "
        "rings and trees on GPUs, gloo on the CPU). Its cost is read as nccl-tests reads it: the time of the "
        "slowest rank, the algorithm bandwidth (bytes over time) and the bus bandwidth (algbw times the "
        "fraction of the data each link must carry, so that it compares with the link's own speed). The floor "
        "is the library itself: the same NCCL call on raw buffers, with no framework in between, measured by "
        "the same ranks in the same run."
    ),
    variants=(Variant("collective", "the framework's own collective call, out of place where it has one"),),
    params=lambda: S.params(op=st.sampled_from(OPS), bytes=st.integers(4, 4 * 67), dtype=S.float_dtypes("float32"),
                            world_size=R.world_sizes()),
    sizes={"smoke": _sweep(CPU_SIZES), "full": _sweep(GPU_SIZES)},
    make_inputs=make_inputs,
    reference=reference,
    cheap_reference=lambda p: count(p) * R.size_of(p) <= 1 << 26,
    tolerance=Tolerance({"float32": (0.0, 0.0)}),  # integer-valued: every summation order is exact
    claims=(Claim("exact", "On integer-valued inputs every rank ends with the exact result (nccl-tests' #wrong = 0).",
                  _exact),),
    key_apis={
        "torch": ("dist.broadcast", "dist.reduce", "dist.all_reduce", "dist.all_gather_into_tensor",
                  "dist.reduce_scatter_tensor", "dist.all_to_all_single", "dist.barrier"),
        "cupy": ("NCCLBackend.broadcast", ".reduce", ".all_reduce", ".all_gather", ".reduce_scatter",
                 ".all_to_all (grouped send/recv)", ".barrier"),
        "jax": ("shard_map + lax.psum (broadcast, reduce, all_reduce)", "lax.all_gather(tiled=True)",
                "lax.psum_scatter(tiled=True)", "lax.all_to_all", "multihost_utils.sync_global_devices"),
    },
    framework_notes={
        "torch": "gloo's reduce_scatter_tensor is emulated (an all-reduce, then a chunk): on the CPU it moves "
                 "about twice the data, so its busbw does not mean what NCCL's does.",
        "cupy": "NCCL only: skipped without a GPU per rank. cupyx.distributed writes all_to_all as grouped "
                "send/recv (NCCL has no alltoall call).",
        "jax": "No broadcast or reduce primitive: both are a psum of the root's block (zeros elsewhere). "
               "barrier is a host-side rendezvous through the coordinator, not a device collective. "
               "Two idioms, one body: here one process per device (as torch), each handing in its own block "
               "with make_array_from_process_local_data and reading back its own shard; JAX's usual model is "
               "one process driving all its local devices, which device_puts the whole global array with a "
               "NamedSharding and reads all of it back. The shard_map bodies are the same "
               "(tests/test_ranks_single_controller.py runs them on 4 forced CPU devices in one process); what "
               "changes is who holds the data and who may read it.",
    },
    metrics_doc={"bytes": "nccl-tests' size: the larger of a rank's send and receive buffers",
                 "algbw_GBps": "bytes / time of the slowest rank (decimal GB/s)",
                 "busbw_GBps": "algbw x nccl-tests' factor: 2(N-1)/N all_reduce; (N-1)/N all_gather, "
                               "reduce_scatter, all_to_all; 1 broadcast, reduce"},
    floor=floor,
    ranks=True,
    rank_ceilings=True,
)
