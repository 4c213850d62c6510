"""collectives — the seven collective operations, measured as nccl-tests measures them.

Every rank holds `count` integer-valued floats drawn from seed + rank, so every reduction order gives
the same bits and equivalence is exact (as in nccl-tests). The operation is a parameter (one point
of the sweep per operation and size); what each rank ends with (N ranks, x_j rank j's input, c =
count / N):

    broadcast       x_0 (from root 0)
    reduce          sum_j x_j on root 0; the other ranks report zeros (their buffer is unspecified: gloo
                    leaves partial sums there), so only the root's result is checked
    all_reduce      sum_j x_j
    all_gather      x_0 | x_1 | ... | x_{N-1}
    reduce_scatter  chunk r of sum_j x_j
    all_to_all      chunk r of x_0 | chunk r of x_1 | ...
    barrier         x_r, once every rank has arrived

Each operation runs out of place (a separate output) and in place (the output in the input's buffer,
at nccl-tests' offsets: all_gather's input is the rank's chunk of the output, reduce_scatter's output
the rank's chunk of the input), the two column groups of nccl-tests. A timed sample is calls(p) = 20
back-to-back calls (nccl-tests' -n) between one untimed poison and one full sync, its host wall time
divided by 20 (harness/measure/timing.py); the warm-up is the first call and at least one such sample (nccl-tests:
-w 5). A rank's row time is the mean over ranks per sample (nccl-tests' -a 1), the slowest rank's kept
beside it (timing.slowest_rank). The output checked is the sample's last call's: an in-place
reduction changes its own input, so each in-place call of a sample takes the next of 20 buffers (as
nccl-tests moves its buffers between iterations), refilled untimed before the sample, and the last
call's output is exactly one call's (at one rank a call changes nothing, and one buffer serves).

The rows carry nccl-tests' columns: algbw = bytes / time with bytes the larger of a rank's send and
receive buffers, busbw = algbw x 2(N-1)/N for all_reduce, x (N-1)/N for all_gather, reduce_scatter and
all_to_all, x 1 for broadcast and reduce, and wrong runs. barrier moves no data: no bytes, no bandwidth.

The floor of a row is raw NCCL: the same operation at the same size and placement through
cupy.cuda.nccl's NcclCommunicator on raw buffers, measured in this run by the CuPy ranks themselves
before the timing, on the rows' clock: 20 back-to-back calls to a full sync, host wall time, per call,
the mean over ranks (harness/backends/nccl_floor.py). "% of floor" is how close a framework's call
comes to it. barrier has no floor (no bytes); without CuPy on GPUs there is none, and the scenario's
floor_why says so.
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
CALLS = 20  # nccl-tests' -n default: back-to-back calls per timed sample
GROWS = ("reduce", "all_reduce", "reduce_scatter", "all_to_all")  # an in-place call changes what the next reads
NO_IN_PLACE = {"barrier": "barrier moves no data: it has no in-place form"}
NCCL_NO_IN_PLACE = {"all_to_all": "NCCL has no in-place all_to_all (a rank would overwrite chunks it has not sent "
                                  "yet); nccl-tests times it but checks nothing"}


def count(p: Params) -> int:
    """Elements per rank: the size's bytes, rounded down to a multiple of the world size."""
    n = R.size_of(p)
    return max(n, int(p["bytes"]) // np.dtype(p["dtype"]).itemsize // n * n)


def calls(p: Params) -> int:
    """Back-to-back calls per timed sample: nccl-tests' 20, or params' own "calls"."""
    return int(p.get("calls", CALLS))


def nbytes(p: Params) -> int:
    """nccl-tests' size: the larger of one rank's send and receive buffers."""
    size = count(p) * np.dtype(p["dtype"]).itemsize
    return size * R.size_of(p) if p["op"] == "all_gather" else size


def out_count(op: str, c: int, n: int) -> int:
    """Elements of a rank's output, out of place."""
    return {"all_gather": n * c, "reduce_scatter": c // n}.get(op, c)


def in_place(op: str, c: int, n: int, r: int) -> tuple[int, slice, slice]:
    """nccl-tests' in-place layout of rank r: (elements of the one buffer, where the input sits in it,
    where the output lands in it)."""
    if op == "all_gather":
        return n * c, slice(r * c, (r + 1) * c), slice(None)
    if op == "reduce_scatter":
        return c, slice(None), slice(r * (c // n), (r + 1) * (c // n))
    return c, slice(None), slice(None)


def slots(p: Params) -> int:
    """In-place buffers a rank cycles through in one sample: one per call where a call changes its own
    input (so each call reduces fresh data), else one. At one rank no call changes its input (a sum or an
    exchange of one rank's data is that data), so one buffer: refilling 20 of 256 MiB before each sample
    would be most of the row's wall time, and five of its six GiB, for calls that move nothing."""
    return calls(p) if p["op"] in GROWS and R.size_of(p) > 1 else 1


def device_bytes(p: Params, framework: str) -> int:
    """What a rank holds at p, at least: input, output, zeros, and the in-place fill with its ring of
    slots(p) (24 x 256 MiB at a 256 MiB all_reduce on two or more ranks, 5 on one); JAX also a receive
    buffer, and in place at reduce_scatter the chunk each call returns beside its donated buffer, this
    call's and the one the harness still holds."""
    n, c, item = R.size_of(p), count(p), np.dtype(p["dtype"]).itemsize
    out, size = out_count(p["op"], c, n), in_place(p["op"], c, n, 0)[0]
    held = c + 2 * out + size * (1 + slots(p))
    if framework == "jax":
        held += out + (2 * out if p["op"] == "reduce_scatter" else 0)
    return item * held


def in_place_why(variant: str, p: Params, lacks: Mapping[str, str] | None = None) -> str | None:
    """Why `variant` does not run at p's operation (NCCL's and, in `lacks`, the framework's own gaps)."""
    if variant != "in_place":
        return None
    return NO_IN_PLACE.get(p["op"]) or (lacks or {}).get(p["op"])


def floor_key(p: Params, in_place: bool = False) -> str:
    """The machine ceiling that holds the raw NCCL time of p's operation at p's size and world size."""
    where = "_inplace" if in_place else ""
    return f"nccl_{p['op']}{where}_{nbytes(p)}B_{R.size_of(p)}r_s"


def floor(p: Params, machine: Mapping[str, float], variant: str) -> float | None:
    return machine.get(floor_key(p, variant == "in_place"))


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
    time at 1 MiB and 256 MiB was the same latency again (~0.05-0.6 ms on a GPU), for ~6 s a framework
    of making and checking 256 MiB around it."""
    return [{"op": op, "bytes": b, "dtype": "float32", "label": f"{op} {label}"}
            for op in OPS for b, label in (sizes[:1] if op == "barrier" else sizes)]


def _exact(rows: dict, fw: str, p: Params) -> Verdict:
    timed = {v: r["check"] for v, r in rows.items() if r.get("status") in ("ok", "wrong") and "check" in r}
    checked = {v: c for v, c in timed.items() if c["checked"] and c.get("against") != "none"}
    if not checked:
        return Verdict("exact", fw, "inconclusive", "no timed run was checked against the reference")
    wrong, n = sum(c["wrong"] for c in checked.values()), sum(c["checked"] for c in checked.values())
    each = ", ".join(f"{v} {c['wrong']} of {c['checked']}" for v, c in checked.items())
    return Verdict("exact", fw, "confirmed" if wrong == 0 else "refuted",
                   f"#wrong runs ({p['op']}): {each}", {"wrong": wrong, "checked": n})


SCENARIO = Scenario(
    name="collectives",
    title="Seven collectives, measured as nccl-tests measures them",
    concept=(
        "A collective is one call that every rank of the group makes; the library moves the data (NCCL's "
        "rings and trees on GPUs, gloo on the CPU). Its cost is read as nccl-tests reads it: 20 calls back to "
        "back per sample, the host's wall time to a full sync divided by 20, averaged over the ranks (the "
        "slowest rank beside it), out of place and in place; the algorithm bandwidth (bytes over time) and the "
        "bus bandwidth (algbw times the fraction of the data each link must carry, so that it compares with "
        "the link's own speed). The floor is the library itself: the same NCCL call on raw buffers, with no "
        "framework in between, measured by the same ranks in the same run on the same clock."
    ),
    variants=(Variant("out_of_place", "the framework's collective into an output of its own (nccl-tests' "
                                      "out-of-place columns)"),
              Variant("in_place", "the output in the input's buffer, at nccl-tests' offsets (its in-place "
                                  "columns); JAX: the input donated (donate_argnums), so XLA may write the "
                                  "output into it")),
    params=lambda: S.params(op=st.sampled_from(OPS), bytes=st.integers(4, 4 * 67), dtype=S.float_dtypes("float32"),
                            world_size=R.world_sizes()),
    sizes={"smoke": _sweep(CPU_SIZES), "full": _sweep(GPU_SIZES)},
    make_inputs=make_inputs,
    reference=reference,
    cheap_reference=lambda p: count(p) * R.size_of(p) <= 1 << 26,
    tolerance=Tolerance({"float32": (0.0, 0.0)}),  # integer-valued: every summation order is exact
    claims=(Claim("exact", "On integer-valued inputs every rank ends with the exact result, out of place and in "
                           "place (nccl-tests' #wrong = 0).", _exact, communicates=True, reads_checks=True),),
    key_apis={
        "torch": ("dist.broadcast", "dist.reduce", "dist.all_reduce", "dist.all_gather_into_tensor",
                  "dist.reduce_scatter_tensor", "dist.all_to_all_single", "dist.barrier"),
        "cupy": ("NCCLBackend.broadcast (in place) / NcclCommunicator.broadcast (out of place)", ".reduce",
                 ".all_reduce", ".all_gather", ".reduce_scatter", ".all_to_all (grouped send/recv)", ".barrier"),
        "jax": ("shard_map + lax.pbroadcast (XLA's collective-broadcast; a masked psum on the CPU)",
                "lax.psum (reduce, all_reduce)", "lax.all_gather(tiled=True)",
                "lax.psum_scatter(tiled=True)", "lax.all_to_all",
                "jax.jit(donate_argnums=1) (out of place: the receive buffer)", "jax.jit(donate_argnums=0) (in place)",
                "lax.psum of one element (barrier)"),
    },
    framework_notes={
        "torch": "broadcast, reduce and all_reduce take one tensor: out of place they are a copy into the output, "
                 "then the call (what torch's functional collectives do), so their out-of-place column pays a "
                 "device copy that NCCL's does not. barrier: dist.barrier, on NCCL an all-reduce of one element on "
                 "the device, then the host waits for it; on gloo gloo's own barrier. gloo's reduce_scatter_tensor "
                 "is emulated (an all-reduce, then a chunk): on the CPU it moves about twice the data, so its busbw "
                 "does not mean what NCCL's does.",
        "cupy": "NCCL only: skipped without a GPU per rank. cupyx.distributed writes all_to_all as grouped "
                "send/recv (NCCL has no alltoall call). barrier: NCCLBackend.barrier, host-side through cupyx's "
                "TCP store (rank 0's), no device work; its store clears the current barrier outside its lock "
                "(cupyx/distributed/_store_actions.py), so at two ranks or more barriers back to back may let a "
                "rank through early or hang: not yet run on more than one GPU.",
        "jax": "broadcast is lax.pbroadcast, which XLA lowers to its collective-broadcast (stablehlo."
               "collective_broadcast; NCCL's broadcast on GPUs); XLA:CPU has no lowering for it, so on the CPU "
               "the impl uses pbroadcast's documented equivalent, a psum of a masked block, which moves an "
               "all-reduce's data. There is no reduce primitive: reduce is a psum whose result only rank 0 keeps, "
               "an all-reduce's data too. Where a psum stands in, busbw uses the all-reduce's factor 2(N-1)/N and "
               "the metric all_reduce_traffic is 1, not to be set beside NCCL's broadcast or reduce. Both columns use donation "
               "(jax.jit donate_argnums). Out of place, a receive buffer made in prepare is donated as a second "
               "argument and the output takes it (nccl-tests' separate send and receive buffers; a plain jitted "
               "call would allocate its output and free the last one on every call). In place, the input is "
               "donated, and XLA may then write the output into the input's buffer; in-place "
               "reduce_scatter is psum_scatter, then its result written into the rank's chunk of the donated "
               "buffer (the check reads the psum_scatter's result); in-place all_to_all, which NCCL lacks, "
               "runs in JAX alone (XLA buffers what it must). At one rank XLA folds broadcast, all_reduce and "
               "all_gather away: in place a call runs nothing on the GPU, out of place one device-to-device copy "
               "into the receive buffer (traced on a GPU: results/probes/jax_collective_dispatch.md). barrier: a "
               "psum of one element per "
               "rank in a jitted shard_map (the device all-reduce torch's NCCL barrier is); JAX's own "
               "multihost_utils.sync_global_devices would add a host-to-device copy of a hash, a device all-gather, "
               "a copy back to the host and a comparison. One process per device here (as torch), each handing in "
               "its own block with make_array_from_process_local_data in prepare and getting its own shard back; "
               "JAX's usual model is one process driving all its local devices, which device_puts the whole "
               "global array with a NamedSharding and reads all of it back. The shard_map bodies are the same "
               "(tests/test_ranks_single_controller.py runs them on 4 forced CPU devices in one process).",
    },
    metrics_doc={"bytes": "nccl-tests' size: the larger of a rank's send and receive buffers (none for barrier)",
                 "bus_factor": "nccl-tests' factor of the traffic the call moves: 2(N-1)/N all_reduce; (N-1)/N "
                               "all_gather, reduce_scatter, all_to_all; 1 broadcast, reduce (JAX's psum-based "
                               "reduce, and its broadcast on the CPU: the all-reduce's)",
                 "algbw_GBps": "bytes / time, the time per call averaged over ranks (decimal GB/s)",
                 "busbw_GBps": "algbw x bus_factor",
                 "all_reduce_traffic": "1 where the call is an all-reduce standing in for another operation (JAX's "
                                       "reduce, and its broadcast on the CPU), else 0"},
    floor=floor,
    ranks=True,
    rank_ceilings=True,
    calls=calls,
    rank_time="mean",
    operation="op",
    device_bytes=device_bytes,
)
