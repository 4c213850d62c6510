"""ranks — one process per device, each with its own id; the id picks the rank's share of the work.

The work: per column, the sum of squares over a data set of `rows` x `cols` integer-valued floats
(from the seed: every rank holds the same data set, as each would load it). The baseline does it in
one process, alone (each rank does it all, independently: the single-process time). `by_rank` lets
rank r take rows r, r + N, r + 2N, ... and all-reduces the partial sums. The hazard forgets to
shard: every rank sums all rows, and the all-reduce counts the data N times. Every variant also
reports `mark`, a module-level value the rank set for itself: processes share no state, so each
rank reads its own id back.
"""
from __future__ import annotations

import numpy as np
from hypothesis import strategies as st

from scenarios import _ranks as R
from scenarios import _strategies as S
from scenarios.spec import Claim, Params, Scenario, Tolerance, Variant, Verdict, ratio_verdict


def make_inputs(p: Params) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(p["seed"])  # the data set: the same on every rank
    data = R.small_ints(rng, (int(p["rows"]), int(p["cols"])), p["dtype"], bound=8)
    return R.per_rank(p, lambda _p, r: {"data": data})


def reference(inputs: dict[str, np.ndarray], p: Params) -> dict[str, np.ndarray]:
    def one(_p: Params, r: int) -> dict[str, np.ndarray]:
        data = inputs["data"] if "rank" in p else inputs["data"][r]
        return {"total": (data.astype(np.float64) ** 2).sum(axis=0), "mark": np.asarray(r, dtype=np.int64)}

    return R.per_rank(p, one)


def _speedup(rows: dict, fw: str, p: Params) -> Verdict:
    one, mine = (rows[v]["timing"]["device_done"]["median"] for v in ("one_process", "by_rank"))
    n = int(rows["by_rank"].get("ranks", R.size_of(p)))
    if n < 2:
        return Verdict("shares_divide", fw, "inconclusive", "one rank: nothing to divide", {"world_size": n})
    return ratio_verdict("shares_divide", fw, one / mine, 1.0, lower_is_confirmed=False,
                         what=f"one process / by_rank at world size {n}", numbers={"speedup": one / mine})


SCENARIO = Scenario(
    name="ranks",
    title="One process per device; the rank picks the share",
    concept=(
        "A rank is a CPU process that drives one device and has a unique id. Two GPUs mean two processes, "
        "rank 0 and rank 1: they share no memory and no state and run the same code; the rank id gives each "
        "its own share of the work, and a collective (all-reduce) combines the shares. Forget to shard and "
        "every rank does all the work: the combined result counts it WORLD_SIZE times."
    ),
    variants=(
        Variant("one_process", "one process sums every row alone (each rank does so independently)"),
        Variant("by_rank", "rank r sums rows r, r+N, r+2N, ...; an all-reduce adds the partial sums"),
        Variant("same_data_every_rank", "sharding forgotten: every rank sums all rows, then all-reduces",
                hazard=True),
    ),
    params=lambda: S.params(rows=S.dims(1, 64), cols=S.dims(1, 33), dtype=S.float_dtypes("float32"),
                            world_size=R.world_sizes()),
    sizes={
        "smoke": {"rows": 4096, "cols": 256, "dtype": "float32"},
        # 256 MiB per rank; sums of squares of |x| <= 8 over 65536 rows stay below 2^24: exact in float32.
        "full": {"rows": 65536, "cols": 1024, "dtype": "float32"},
    },
    make_inputs=make_inputs,
    reference=reference,
    tolerance=Tolerance({"float32": (0.0, 0.0)}),  # integer-valued sums below 2^24: bit-exact
    claims=(
        Claim("shares_divide", "Each rank takes its share: the group is faster than one process alone.", _speedup,
              gpu_only=True),
        Claim("forgotten_sharding", "Without sharding every rank does all the work and the sum counts it N times.",
              R.hazard_caught("forgotten_sharding", "same_data_every_rank"), communicates=True),
    ),
    key_apis={
        "torch": ("torch.distributed.init_process_group", "dist.get_rank()", "dist.all_reduce", "torchrun"),
        "cupy": ("cupyx.distributed.init_process_group", "NCCLBackend.all_reduce", "RANK / WORLD_SIZE",
                 "cupy.RawKernel (the fused sum of squares)"),
        "jax": ("jax.distributed.initialize", "jax.process_index()", "jax.make_array_from_process_local_data",
                "jax.shard_map + lax.axis_index + lax.psum"),
    },
    framework_notes={
        "torch": "gloo on the CPU, NCCL on GPUs; init_process_group reads torchrun's environment. (x * x).sum(0) is "
                 "two kernels in eager torch: the squares written out as big as the data, then read back by the "
                 "column sum, three passes over memory where JAX and CuPy make one (eager torch has no fused sum "
                 "of squares: linalg.vector_norm fuses but ends in a square root, not exact; torch.compile would "
                 "fuse). A rank's share data[r::N] is a strided view, read in place.",
        "cupy": "NCCL only (no CPU path): skipped without a GPU per rank. Rank 0 serves a TCP store for the NCCL id. "
                "The sum of squares is a cupy.RawKernel that squares each element as it reads it (one pass, as "
                "XLA's fusion) into partial sums of 256 rows, then sums the partials: CuPy's own (x * x).sum(0) "
                "makes three passes and its column reduction runs one block per 32 columns, 32 blocks for 1024 "
                "columns, which leaves most of a GPU idle. It reads the strided share data[r::N] in place.",
        "jax": "One process per device here, like torch. JAX's usual model is one process per host driving all "
               "its devices through a Mesh; a collective is then a shard_map over the global mesh. by_rank is one "
               "program: the shard_map selects the rank's rows with lax.axis_index (a dynamic index into a "
               "(rows/N, N, cols) view; prepare pads the data set with at most N-1 zero rows so that N divides "
               "its rows), squares and sums them in one fused pass and psums the result.",
    },
    ranks=True,
)
