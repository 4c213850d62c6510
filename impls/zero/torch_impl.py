"""zero in PyTorch: DDP + torch.optim.Adam (ddp), ZeroRedundancyOptimizer over DDP (stage 1), FSDP2's
fully_shard with reshard_after_forward False (≈ stage 2) or True (stage 3), over torch.distributed (gloo on the
CPU with a CPU device mesh, NCCL on GPUs).

On NCCL, DDP's reducer and FSDP2 issue their collectives on their own streams and make the current stream wait
before it reads the results; ZeroRedundancyOptimizer broadcasts after step() on the current stream. On gloo
every collective blocks the host. A stage's wrapper and optimizer are built once, by its first (untimed) run (DDP
broadcasts, allocates its buckets; fully_shard keeps this rank's dim-0 chunks as DTensors); a timed run resets
the parameters in place, empties Adam's state, steps, and gathers the result, as the CuPy and JAX runs do."""
from __future__ import annotations

import contextlib

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard
from torch.distributed.optim import ZeroRedundancyOptimizer
from torch.distributed.tensor import DTensor
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils._python_dispatch import TorchDispatchMode

from impls._shared import dp
from impls._shared import zero as Z
from impls.data_parallel.torch_impl import _model
from scenarios.zero import sizes

_MESH = {}  # one 1-D device mesh per process (it wraps the default process group)


class _Sent(TorchDispatchMode):
    """Counts the bytes a rank sends on a ring for each c10d collective under it (DDP, ZeRO optimizer, FSDP2)."""

    def __init__(self, n):
        super().__init__()
        self.n, self.bytes = n, 0.0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = str(func)
        if name.startswith("c10d.") and any(k in name for k in ("allreduce", "broadcast", "allgather", "reduce_sc")):
            leaves = [a for a in torch.utils._pytree.tree_leaves(args) if isinstance(a, torch.Tensor)]
            big = max(a.numel() * a.element_size() for a in leaves)  # the whole buffer of a gather / scatter
            self.bytes += Z.wire("all_reduce" if "allreduce" in name else "other", big, self.n)
        return func(*args, **(kwargs or {}))


def prepare(inputs, params, device):
    rank, n = dist.get_rank(), dist.get_world_size()
    if device.type not in _MESH:  # a CPU mesh on the CPU: without one FSDP2 would pick CUDA where present
        _MESH[device.type] = init_device_mesh(device.type, (n,))
    shard = lambda a: [torch.from_numpy(dp.shard(b, rank, n).copy()).to(device) for b in a]  # noqa: E731
    state = {"x": shard(inputs["x"]), "t": shard(inputs["t"]), "init": inputs["init"], "dims": sizes(params),
             "device": device, "lr": float(params["lr"]), "eps": float(params["eps"]), "n": n, "rank": rank, "sent": {}}
    state["start"] = [q.detach() for q in _model(inputs["init"], state["dims"], device).parameters()]
    state["wrapped"] = {}  # a stage's wrapper, built by its first (untimed) run
    return state


def barrier(state):
    dist.barrier()


def poison(state):
    if state["device"].type == "cuda":  # untimed: the device idle and the peak counter reset before a run
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
    barrier(state)  # untimed, before every repeat: the ranks start together


class _Wrapped:
    """One stage's model and optimizer, from the initial parameters."""

    def __init__(self, state, stage):
        model, dev = _model(state["init"], state["dims"], state["device"]), state["device"]
        adam = {"lr": state["lr"], "eps": state["eps"]}
        if stage in ("ddp", "zero1"):
            kw = {"device_ids": [dev.index]} if dev.type == "cuda" else {}
            model = DDP(model, gradient_as_bucket_view=True, **kw)  # the gradients are views of DDP's buckets
            opt = (torch.optim.Adam(model.parameters(), **adam) if stage == "ddp" else
                   ZeroRedundancyOptimizer(model.parameters(), optimizer_class=torch.optim.Adam, **adam))
        else:
            for layer in (m for m in model if isinstance(m, torch.nn.Linear)):  # an all-gather / reduce-scatter each
                fully_shard(layer, mesh=_MESH[dev.type], reshard_after_forward=stage == "zero3")
            fully_shard(model, mesh=_MESH[dev.type], reshard_after_forward=stage == "zero3")
            opt = torch.optim.Adam(model.parameters(), **adam)
        self.model, self.opt, self.buckets = model, opt, stage in ("ddp", "zero1")

    def reset(self, state):
        """The initial parameters into this rank's shards, no Adam state (step 1 makes it): DDP needs no broadcast."""
        with torch.no_grad():
            for q, q0 in zip(self.model.parameters(), state["start"]):
                if isinstance(q, DTensor):  # FSDP2's dim-0 chunk: ceil(d0 / N) rows a rank, the last ones may hold none
                    rows = -(-q0.shape[0] // state["n"])
                    q.to_local().copy_(q0[state["rank"] * rows:(state["rank"] + 1) * rows])
                else:
                    q.copy_(q0)
        self.opt.zero_grad(set_to_none=True)
        getattr(self.opt, "optim", self.opt).state.clear()

    def resident(self):
        """Bytes this stage keeps allocated between runs: its parameters (local shards) and DDP's gradient buckets."""
        params = sum((q.to_local() if isinstance(q, DTensor) else q).nbytes for q in self.model.parameters())
        return params * (2 if self.buckets else 1)

    def held(self):
        """Bytes of this rank's parameters, gradients and optimizer state (local shards), at the optimizer step."""
        local = lambda a: a.to_local() if isinstance(a, DTensor) else a  # noqa: E731
        ps = list(self.model.parameters())
        state = getattr(self.opt, "optim", self.opt).state  # ZeroRedundancyOptimizer: its local Adam's
        return {"param_bytes": sum(local(q).nbytes for q in ps),
                "grad_bytes": sum(local(q.grad).nbytes for q in ps if q.grad is not None),
                "optim_bytes": sum(local(v).nbytes for s in state.values() for v in s.values() if torch.is_tensor(v))}


def _train(state, stage):
    """`steps` Adam steps; the first run of a stage counts its collectives under _Sent, later runs reuse it."""
    if stage not in state["wrapped"]:
        state["wrapped"][stage] = _Wrapped(state, stage)
    cuda, w = state["device"].type == "cuda", state["wrapped"][stage]
    w.reset(state)
    base = torch.cuda.memory_allocated() - w.resident() if cuda else 0  # the allocator's count: no sync
    model, opt = w.model, w.opt
    sent = _Sent(state["n"]) if stage not in state["sent"] else None
    with sent if sent is not None else contextlib.nullcontext():
        for x, t in zip(state["x"], state["t"]):
            opt.zero_grad(set_to_none=True)
            torch.nn.functional.mse_loss(model(x), t).backward()
            opt.step()
    if sent is not None:
        state["sent"][stage] = sent.bytes / len(state["x"])
    Z.report(w.held(), state["sent"][stage], torch.cuda.max_memory_allocated() - base if cuda else None)
    mods = [m for m in model.modules() if isinstance(m, torch.nn.Linear)]
    full = [(a.full_tensor() if isinstance(a, DTensor) else a).detach() for m in mods for a in (m.weight, m.bias)]
    return {"params": torch.cat([a.T.reshape(-1) if a.dim() == 2 else a for a in full])}


def run_ddp(state):
    return _train(state, "ddp")


def run_zero1(state):
    return _train(state, "zero1")


def run_zero2(state):
    return _train(state, "zero2")


def run_zero3(state):
    return _train(state, "zero3")
