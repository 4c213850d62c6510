"""point_to_point — each rank sends its block to the next rank around a ring and receives the previous one's.

Every rank holds `count` integer-valued floats drawn from seed + rank; rank r ends with x_{r-1 mod N}.
Blocking `send`/`recv` must be ordered so that the ring cannot deadlock (even ranks send first, odd
ranks receive first); non-blocking `isend`/`irecv` post both and `wait`. The hazard reads the
receive buffer before the wait: what it sees is whatever the buffer held (zeros, refilled before
every run) or part of the message. A ring of one rank sends to itself: a local copy.
"""
from __future__ import annotations

import numpy as np

from scenarios import _ranks as R
from scenarios import _strategies as S
from scenarios.spec import Claim, Params, Scenario, Tolerance, Variant


def _x(p: Params, r: int) -> dict[str, np.ndarray]:
    return {"x": R.small_ints(np.random.default_rng(int(p["seed"]) + r), (int(p["count"]),), p["dtype"])}


def make_inputs(p: Params) -> dict[str, np.ndarray]:
    return R.per_rank(p, _x)


def reference(inputs: dict[str, np.ndarray], p: Params) -> dict[str, np.ndarray]:
    n = R.size_of(p)
    return R.per_rank(p, lambda _p, r: {"received": _x(p, (r - 1) % n)["x"].astype(np.float64)})


SCENARIO = Scenario(
    name="point_to_point",
    title="Point-to-point: send and receive around a ring",
    concept=(
        "Point-to-point calls move a buffer from one rank to one other. Blocking send/recv return when their "
        "side is done, so the order of the calls decides whether a ring deadlocks; non-blocking isend/irecv "
        "post both sides at once and return a handle to wait on. Until the wait, the receive buffer is not "
        "yours to read. JAX has no per-process send: its counterpart is ppermute, a collective every rank enters."
    ),
    variants=(
        Variant("blocking", "send then recv on even ranks, recv then send on odd ranks (no deadlock)"),
        Variant("nonblocking", "isend and irecv posted together, then wait (JAX: lax.ppermute)"),
        Variant("read_before_wait", "irecv posted, the buffer read before the wait", hazard=True),
    ),
    params=lambda: S.params(count=S.dims(1, 300), dtype=S.float_dtypes("float32"), world_size=R.world_sizes()),
    sizes={"smoke": {"count": 1 << 16, "dtype": "float32"},
           "full": {"count": 1 << 26, "dtype": "float32"}},  # 256 MiB per rank
    make_inputs=make_inputs,
    reference=reference,
    cheap_reference=lambda p: int(p["count"]) * R.size_of(p) <= 1 << 26,
    tolerance=Tolerance({"float32": (0.0, 0.0)}),
    claims=(Claim("read_before_wait", "The receive buffer is not yours to read until the wait.",
                  R.hazard_caught("read_before_wait", "read_before_wait"), communicates=True),),
    key_apis={
        "torch": ("dist.send / dist.recv", "dist.P2POp + dist.batch_isend_irecv", "Work.wait()"),
        "cupy": ("NCCLBackend.send / .recv", "cupy.cuda.nccl.groupStart / groupEnd", "Stream.wait_event"),
        "jax": ("jax.shard_map + lax.ppermute",),
    },
    framework_notes={
        "torch": "On NCCL the transfers run on NCCL's own stream; wait() makes the current stream wait for them. "
                 "batch_isend_irecv posts the ring's pair as one NCCL group.",
        "cupy": "NCCL calls run on a stream of their own here, so that the wait is an event the current stream "
                "waits on, as in torch; NCCL only: skipped without a GPU per rank.",
        "jax": "ppermute is a collective, not a point-to-point call: every process enters it, and its result is a "
               "future jax.Array, so there is no blocking send and no buffer to read before the wait.",
    },
    ranks=True,
)
