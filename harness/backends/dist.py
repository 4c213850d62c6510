"""Joining a group of ranks with each framework's own distributed machinery.

Every rank reads torchrun's environment contract (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR,
MASTER_PORT), whoever started it: the harness (harness/workers/ranks.py), torchrun or srun. The three
frameworks rendezvous on three different ports, so that the three groups of one run never meet:
torch on MASTER_PORT, JAX's coordinator on TRIPTYCH_JAX_PORT (default MASTER_PORT + 1), CuPy's TCP
store for the NCCL id on CUPYX_DISTRIBUTED_PORT (default MASTER_PORT + 2). Nothing here runs at import.
"""
from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass
from typing import Any

import numpy as np

from harness.backends.base import Backend, Unavailable
from harness.backends import nccl
from harness.backends.xla import use_cublas_gemms

NO_NCCL_HERE = "NCCL needs a CUDA GPU per rank"


@dataclass(frozen=True)
class RankEnv:
    rank: int
    world_size: int
    local_rank: int
    addr: str
    port: int

    @classmethod
    def from_environ(cls) -> "RankEnv":
        """torchrun's variables; under srun, Slurm's task ids stand in for RANK, WORLD_SIZE and LOCAL_RANK."""
        env = os.environ
        slurm = {"RANK": "SLURM_PROCID", "WORLD_SIZE": "SLURM_NTASKS", "LOCAL_RANK": "SLURM_LOCALID"}
        get = {k: env.get(k, env.get(v)) for k, v in slurm.items()}
        try:
            for k in ("RANK", "WORLD_SIZE", "MASTER_PORT"):
                if (get.get(k) if k in get else env.get(k)) is None:
                    raise KeyError(k)
            return cls(int(get["RANK"]), int(get["WORLD_SIZE"]), int(get["LOCAL_RANK"] or get["RANK"]),
                       env.get("MASTER_ADDR", "127.0.0.1"), int(env["MASTER_PORT"]))
        except KeyError as e:
            raise Unavailable(f"not started as a rank: ${e.args[0]} is not set (torchrun's contract)") from None

    def port_for(self, fw: str) -> int:
        if fw == "jax":
            return int(os.environ.get("TRIPTYCH_JAX_PORT", self.port + 1))
        if fw == "cupy":
            return int(os.environ.get("CUPYX_DISTRIBUTED_PORT", self.port + 2))
        return self.port


def join(fw: str, backend: Backend, env: RankEnv) -> str:
    """Join the group before the framework touches a device; point the backend at this rank's device.
    Returns the group's description."""
    os.environ.setdefault("NCCL_NVLS_ENABLE", "0")  # NVLink multicast off (the GPU machines' rule)
    if fw == "jax":
        return _join_jax(backend, env)
    backend.ordinal = env.local_rank  # the cap and the context on this rank's device (Backend.ordinal)
    try:
        backend.load()
    except Unavailable as e:
        raise Unavailable(f"{NO_NCCL_HERE}: {e}" if fw == "cupy" else str(e)) from None
    if fw == "torch":
        return _join_torch(backend, env)
    if fw == "cupy":
        return _join_cupy(backend, env)
    raise ValueError(f"unknown framework {fw!r}")


def _join_torch(b: Backend, env: RankEnv) -> str:
    import torch.distributed as dist

    kind = "nccl" if b.on_gpu else "gloo"
    os.environ.setdefault("MASTER_ADDR", env.addr)  # env:// reads the address and port from here
    # env:// reads MASTER_ADDR/MASTER_PORT/RANK/WORLD_SIZE; device_id binds NCCL's communicator eagerly.
    dist.init_process_group(kind, rank=env.rank, world_size=env.world_size,
                            device_id=b.device if b.on_gpu else None)
    return f"torch.distributed {kind}, rank {env.rank} of {env.world_size}"


def _join_jax(b: Backend, env: RankEnv) -> str:
    use_cublas_gemms()  # before jax starts a backend
    import jax

    gpu = _has_cuda()
    # One process per device: on a GPU this rank sees only its LOCAL_RANK device; on the CPU one device.
    jax.distributed.initialize(coordinator_address=f"{env.addr}:{env.port_for('jax')}",
                               num_processes=env.world_size, process_id=env.rank,
                               local_device_ids=[env.local_rank] if gpu else None)
    b.load()
    b.device = jax.local_devices()[0]
    return f"jax.distributed ({b.device.platform}), process {jax.process_index()} of {jax.process_count()}"


def _join_cupy(b: Backend, env: RankEnv) -> str:
    from cupyx import distributed

    if not b.on_gpu:
        raise Unavailable(NO_NCCL_HERE)
    # Rank 0 serves the TCP store that hands the NCCL unique id to the others.
    nccl.set_comm(distributed.init_process_group(env.world_size, env.rank, backend="nccl",
                                                 host=env.addr, port=env.port_for("cupy")))
    return f"cupyx.distributed NCCL, rank {env.rank} of {env.world_size}"


STOPS = (None, "noise", "time_cap", "max_repeats")  # timing.TimingConfig.stop's answers, as numbers


def agree_stop(fw: str, backend: Backend, stop: str | None) -> str | None:
    """Rank 0's answer to "stop repeating?", on every rank, through the framework's own broadcast: every
    rank must run the same number of repeats (a collective needs all of them), so rank 0's clock decides
    for the group. Called after each repeat, outside the timed region."""
    code = STOPS.index(stop)
    if fw == "torch":
        import torch
        import torch.distributed as dist

        t = torch.tensor([code], dtype=torch.int32, device=backend.device)  # NCCL: on the GPU; gloo: the CPU
        dist.broadcast(t, 0)
        return STOPS[int(t.item())]
    if fw == "jax":
        from jax.experimental import multihost_utils

        return STOPS[int(multihost_utils.broadcast_one_to_all(np.int32(code)))]
    if fw == "cupy":
        import cupy

        a = cupy.asarray([code], dtype=cupy.int32)
        nccl.cupy_comm().broadcast(a, root=0)
        return STOPS[int(a.get()[0])]
    raise ValueError(f"unknown framework {fw!r}")


def _has_cuda() -> bool:

    if not shutil.which("nvidia-smi"):
        return False
    try:
        return subprocess.run(["nvidia-smi", "-L"], capture_output=True, timeout=20).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def leave(fw: str) -> None:
    """Tear the group down (best effort: the process ends next)."""
    try:
        if fw == "torch":
            import torch.distributed as dist

            if dist.is_initialized():
                dist.destroy_process_group()
        elif fw == "jax":
            import jax

            jax.distributed.shutdown()
        elif fw == "cupy":
            # rank 0's TCP store serves from a child process that CuPy does not stop at exit: the rank's exit
            # joins it and waits until the harness kills the rank, a group's whole grace (10 s)
            store = getattr(nccl.cupy_comm(), "_store", None)
            if store is not None:
                store.stop()
    except Exception:  # noqa: BLE001 - a peer already gone; exiting anyway
        pass
