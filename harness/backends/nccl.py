"""This rank's CuPy communicator. torch and JAX keep a process-wide group that their impls reach by
themselves (torch.distributed, jax.distributed); CuPy keeps none, so the rank entry point
(harness/backends/dist.py) joins cupyx.distributed, leaves the communicator (an NCCLBackend) here, and
the CuPy impls take it from here."""
from __future__ import annotations

from typing import Any

_COMM: dict[str, Any] = {}  # "cupy": the rank's cupyx NCCL communicator (an object of CuPy's)


def set_comm(comm: Any) -> None:
    _COMM["cupy"] = comm


def cupy_comm() -> Any:
    return _COMM["cupy"]


def device_barrier(comm: Any) -> None:
    """Every rank here and its device work done: an all-reduce of one element through NCCL on the current
    stream, then a wait for that stream (torch's barrier on NCCL does the same). Not cupyx's barrier(),
    which goes through its TCP store: its Barrier clears the store's current barrier outside its lock
    (cupyx/distributed/_store_actions.py), so barriers back to back, one before every repeat, can let a
    rank through early or leave the others waiting for good."""
    import cupy

    one = cupy.ones(1, dtype=cupy.int32)
    comm.all_reduce(one, one, op="sum")
    cupy.cuda.get_current_stream().synchronize()
